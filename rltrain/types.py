"""The records every layer shares: counters, transitions, policy outputs, metric values and a
run's summary. This module imports nothing from rltrain (``tests/test_layers.py`` checks it), so
any module may use them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Union

import numpy as np
import torch


@dataclass
class Progress:
    """The run's counters, advanced by the runner (env steps) and ``Optimization`` (gradient steps).

    Agents receive this object in ``setup`` and read it live (an epsilon schedule reads
    ``env_steps``; a target-network update reads ``gradient_steps``).

    Attributes:
        env_steps: Transitions collected, summed over sub-environments.
        vector_steps: Calls to the vector environment's ``step``.
        gradient_steps: ``training_step`` calls.
        episodes: Training episodes finished (terminated or truncated).
        pending_gradient_steps: Gradient steps owed by the current training round (non-zero
            only when a stop interrupted a round; a resumed run does them first).
    """

    env_steps: int = 0
    vector_steps: int = 0
    gradient_steps: int = 0
    episodes: int = 0
    pending_gradient_steps: int = 0


#: A batch of observations as arrays: one array, or one per key of a ``Dict`` observation space.
ObsArrays = Union[np.ndarray, dict[str, np.ndarray]]
#: The same as tensors (what a policy and a training step receive).
ObsTensors = Union[torch.Tensor, dict[str, torch.Tensor]]


class Transitions(NamedTuple):
    """One vector step's transitions, one row per sub-env (numpy, as the env returned them).

    ``next_observations`` holds the real last observation where an episode ended, so a truncated
    episode can bootstrap from it; ``terminated`` and ``truncated`` stay apart. ``policy_info``
    is what the acting policy returned beside the actions (``PolicyStep.info``: e.g. PPO's
    log-probabilities and values), as ordinary tensors (copied out of inference mode); empty
    for random actions and for policies that return nothing more. Observations of a ``Dict``
    space are a dict of arrays, one per key.
    """

    observations: ObsArrays
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: ObsArrays
    terminated: np.ndarray
    truncated: np.ndarray
    policy_info: Mapping[str, torch.Tensor] = {}


#: A policy's per-environment recurrent state: None for memoryless policies, else tensors whose
#: first dimension is the sub-environment.
PolicyState = Union[None, torch.Tensor, tuple[torch.Tensor, ...]]


class PolicyStep(NamedTuple):
    """What :meth:`Policy.act` returns: a batch of actions, the next state and extra outputs."""

    action: torch.Tensor
    state: PolicyState
    info: Mapping[str, torch.Tensor]


#: A metric value: a Python number, or a detached scalar tensor read at render cadence.
MetricValue = Union[float, int, "torch.Tensor"]


@dataclass(frozen=True)
class Summary:
    """What a run achieved.

    Attributes:
        env_steps: Env steps done (transitions summed over sub-envs).
        gradient_steps: Gradient steps done.
        episodes: Training episodes finished.
        wall_time: Seconds the ``train`` call took.
        best_eval_return: Best mean evaluation return; None when no evaluation ran.
        threshold_env_steps: Env steps at the first evaluation whose mean return reached the
            return threshold; None when no threshold was set or it was not reached.
        threshold_seconds: Seconds from the start to that evaluation's end; None likewise.
        stop_reason: The reason of the stop request that ended the loop before ``num_steps``,
            and always when a refused non-finite loss stopped the run (then with the
            checkpoint it leaves); None when the run took all its steps.
        final_metrics: Every metric at the end, keyed as in :mod:`rltrain.observe.metrics`.
    """

    env_steps: int
    gradient_steps: int
    episodes: int
    wall_time: float
    best_eval_return: float | None
    threshold_env_steps: int | None
    threshold_seconds: float | None
    stop_reason: str | None
    final_metrics: dict[str, float] = field(default_factory=dict)

"""The contracts every agent fulfils: :class:`Policy` (acts) and :class:`LearningAgent` (learns)."""

from __future__ import annotations

import dataclasses
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrain.agents.protocols import RolloutLearner
from rltrain.observe.events import flatten_hparams
from rltrain.runtime.distributed import SINGLE, DistributedContext
from rltrain.runtime.statistics import Statistics
from rltrain.settings.loops import OffPolicyConfig, OnPolicyConfig
from rltrain.types import ObsTensors, PolicyState, PolicyStep, Progress

if TYPE_CHECKING:
    from rltrain.optim import Optimization
    from rltrain.types import MetricValue

class TrainerInfo(Protocol):
    """What an agent may read of the :class:`~rltrain.Trainer` running it (``agent.trainer``):
    the run's settings. Typed apart from the Trainer, which sits layers above the agents."""

    num_steps: int
    device: str
    inference_device: str | None
    dtype: str
    last_run_dir: Path | None

    def settings(self) -> dict[str, Any]: ...


class Policy(nn.Module, ABC):
    """Maps a batch of observations to a batch of actions, on the inference device.

    A policy may keep a recurrent state per environment; the runner stores it between steps and
    asks the policy to reset it where an episode ended. It holds modules that are either the
    learner's own (same device) or copies refreshed by ``load_state_dict`` (another device).
    """

    @abstractmethod
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        """Actions for ``obs`` (shape ``[num_envs, *obs_shape]``; a dict of such tensors for a
        ``Dict`` observation space), in their storage dtype: float32 for float spaces,
        ``uint8`` images unscaled (the agent's encoder scales them).

        ``deterministic=True`` is for evaluation (greedy, or the distribution's mode);
        ``False`` explores as the agent does while collecting.
        """

    def initial_state(self, num_envs: int) -> PolicyState:
        """The recurrent state at the start of every episode. Default: None (no memory)."""
        return None

    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        """``state`` with the rows of environments where ``done`` is True set to the initial state.

        Default: None (no memory). Recurrent policies override it.
        """
        return None


class LearningAgent(nn.Module, ABC):
    """Owns the networks and the learning rule; never the loop, never ``backward()``.

    The life of an agent in a run:

    1. :meth:`setup` once the environment's spaces are known: checks them
       (:meth:`check_spaces`), builds the networks (:meth:`build`) and moves them to the device.
    2. :meth:`configure_optimizers` names each optimizer.
    3. :meth:`training_step` computes losses on a batch and calls ``optim.step(name, loss)``
       once per optimizer it updates; it returns metrics for the renderers.
    4. :meth:`policy` hands out the acting part.

    ``state_dict()`` (from ``nn.Module``) holds every network, target networks included.
    Schedules are functions of ``self.progress``, so the run's counters restore them.

    What the run gives the agent (as Lightning gives a ``LightningModule``): ``device``,
    ``dtype`` (the training precision; autocast is applied for you), ``progress`` (the live
    counters: env steps, gradient steps, episodes), ``trainer`` (the :class:`~rltrain.Trainer`
    running ``fit``, or None) and ``logger`` (while ``fit`` runs: the run's TensorBoard
    ``SummaryWriter``, for histograms or images, or the logger object given to the Trainer;
    None without a logger). Scalars go through
    :meth:`log`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.progress = Progress()
        self.num_steps = 0
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        #: The run's processes (:mod:`rltrain.runtime.distributed`), set by the run: what a
        #: statistic over a batch spread across ranks uses (PPO's advantage normalisation). Default:
        #: one process.
        self.distributed: DistributedContext = SINGLE
        self._statistics = Statistics()
        self.built = False
        #: The (observation, action) spaces of the last :meth:`setup`; checkpoints store them.
        self.spaces: tuple[gym.Space[Any], gym.Space[Any]] | None = None
        self.logger: Any = None
        self._trainer: weakref.ref[TrainerInfo] | None = None
        self._logged: dict[str, MetricValue] = {}

    @property
    def statistics(self) -> Statistics:
        """The statistics service of the run's processes (:mod:`rltrain.runtime.statistics`):
        moments over every rank's data together, the plain computation with one process."""
        if self._statistics.context is not self.distributed:
            self._statistics = Statistics(self.distributed)
        return self._statistics

    @property
    def trainer(self) -> TrainerInfo | None:
        """The :class:`~rltrain.Trainer` that last ran ``fit`` with this agent (None before)."""
        return self._trainer() if self._trainer is not None else None

    @trainer.setter
    def trainer(self, trainer: TrainerInfo | None) -> None:
        # A weak reference: the agent can be copied or kept without keeping the trainer alive.
        self._trainer = weakref.ref(trainer) if trainer is not None else None

    def log(self, name: str, value: float | torch.Tensor) -> None:
        """Record a scalar (a float or a one-element tensor), as Lightning's ``self.log``.

        Call it anywhere in the agent; the value joins the metrics of the current (or next)
        gradient step, so every renderer shows it as ``train/<name>`` (averaged like the
        losses over the last 100 gradient steps): TensorBoard, console, progress bar and
        ``metrics.jsonl``. Tensors are read only when a renderer writes them.
        """
        self._logged[name] = value.detach() if isinstance(value, torch.Tensor) else float(value)

    def pop_logged(self) -> dict[str, MetricValue]:
        """The values :meth:`log` received since the last call (for the framework)."""
        logged, self._logged = self._logged, {}
        return logged

    def setup(self, *, observation_space: gym.Space[Any], action_space: gym.Space[Any],
              device: torch.device, progress: Progress,
              dtype: torch.dtype = torch.float32, num_steps: int = 0) -> None:
        """Check the spaces, build the networks on first use and move them to ``device``;
        ``num_steps`` is the run's total env steps (0 outside a run), for schedules over the
        run (PPO's learning-rate annealing)."""
        self.check_spaces(observation_space, action_space)
        if not self.built:
            self.build(observation_space, action_space)
            self.built = True
        self.progress, self.num_steps = progress, num_steps
        self.spaces = observation_space, action_space
        self.device = torch.device(device)
        self.dtype = dtype
        self.to(self.device)

    def is_set_up_for(self, progress: Progress) -> bool:
        """True when :meth:`setup` already ran for the run that counts with ``progress``: the
        Trainer sets the agent up before anything is written, and the run does not again."""
        return self.built and self.progress is progress

    @abstractmethod
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Raise :class:`SpaceError` when the agent cannot handle these spaces."""

    @abstractmethod
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Create the networks for these spaces (called once, after :meth:`check_spaces`)."""

    @abstractmethod
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers, by the name ``training_step`` passes to ``optim.step``."""

    @abstractmethod
    def training_step(self, batch: Any, optim: Optimization) -> dict[str, MetricValue]:
        """One gradient step on ``batch`` (what the buffer of :meth:`make_buffer` samples: a
        :class:`~rltrain.buffers.ReplayBatch` by default); returns metrics (floats or
        detached scalar tensors)."""

    @abstractmethod
    def policy(self, device: torch.device) -> Policy:
        """The acting policy on ``device``: sharing this agent's modules when ``device`` is its
        own, otherwise a copy that the strategy refreshes with :meth:`sync_policy`."""

    def default_strategy_settings(self) -> OffPolicyConfig | OnPolicyConfig:
        """The settings of the strategy this agent trains best with, when the Trainer is
        given none: a checked config whose type names the strategy (the registered one that
        takes it). Default: :class:`~rltrain.settings.loops.OnPolicyConfig` ()'s defaults
        for an agent that learns from rollouts (a
        :class:`~rltrain.agents.protocols.RolloutLearner`), else
        :class:`~rltrain.settings.loops.OffPolicyConfig` ()'s (which are DQN's)."""
        return OnPolicyConfig() if isinstance(self, RolloutLearner) else OffPolicyConfig()

    def hparams(self) -> dict[str, float | int | str | bool]:
        """The agent's hyperparameters, as ``{"agent/<name>": value}``: shown in TensorBoard,
        saved in checkpoints and compared when a run is resumed (a setting that differs is
        refused). Default: the fields of ``self.config`` when it is a dataclass, else none; an
        agent without a config dataclass overrides it, or its settings go unchecked."""
        config = getattr(self, "config", None)
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return flatten_hparams("agent", config)
        return {}

    def sync_policy(self, policy: Policy) -> None:
        """Copy the learner's current weights into a ``policy`` living on another device."""
        policy.load_state_dict(self.policy(self.device).state_dict())


class SpaceError(ValueError):
    """An agent was given an observation or action space it cannot handle."""


def require_bounded(agent: str, action_space: gym.spaces.Box, why: str) -> None:
    """Refuse a ``Box`` action space with an infinite bound (the agents that squash actions
    into the bounds: SAC, Dreamer), naming the wrapper that declares the real range."""
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise SpaceError(
            f"{agent} {why}, and {action_space} has infinite ones. Declare the range the env "
            "really accepts: gymnasium.wrappers.TransformAction(env, lambda a: a, "
            "gymnasium.spaces.Box(low, high)).")

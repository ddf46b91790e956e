"""The events a strategy emits while it trains.

Events are frozen dataclasses: renderers and subscribers read them and cannot steer training (a
stop request goes through the :class:`~rltrain.runtime.interrupt.Interrupter`). Each event names its
subscriber hook: ``on_`` plus the class name in snake_case (``EnvStep`` -> ``on_env_step``).

Counters are named by their unit: ``env_steps`` are transitions summed over sub-environments,
``vector_steps`` are calls to the vector environment's ``step``, ``gradient_steps`` are
``training_step`` calls.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from rltrain.types import MetricValue, Summary

__all__ = ["MetricValue", "Summary"]  # re-exported: their home is rltrain.types


@dataclass(frozen=True, slots=True)
class Start:
    """Training starts.

    Attributes:
        total_env_steps: The number of env steps the run will take (the ``num_steps`` setting).
        start_env_steps: Env steps already done before this call (0 for a new run).
        hparams: The settings that shape what the run computes, flattened to
            ``{"group/name": value}`` (compared when a run resumes).
        config: The run's whole configuration (the ``DictConfig`` given to the Trainer, or
            the one it describes itself), flattened to dotted keys as written on the command
            line: ``{"agent.lr": 0.001, "trainer.num_steps": 20000}``.
    """

    total_env_steps: int
    start_env_steps: int = 0
    hparams: Mapping[str, float | int | str | bool] = field(default_factory=dict)
    config: Mapping[str, float | int | str | bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EnvStep:
    """One step of the vector environment (one event per vector step, not per sub-env).

    Attributes:
        env_steps: Env steps done after this step (transitions summed over sub-envs).
        vector_steps: Vector steps done after this step.
    """

    env_steps: int
    vector_steps: int


@dataclass(frozen=True, slots=True)
class EpisodeEnd:
    """An episode ended in one sub-environment, by termination or truncation.

    Attributes:
        env_steps: Env steps done when the episode ended.
        env_index: The sub-environment the episode ran in.
        episode_return: Undiscounted sum of the episode's rewards.
        episode_length: The episode's length in env steps.
        terminated: True when the MDP ended the episode, False when a time limit cut it.
    """

    env_steps: int
    env_index: int
    episode_return: float
    episode_length: int
    terminated: bool


@dataclass(frozen=True, slots=True)
class TrainStep:
    """One gradient step (one ``training_step`` call) finished.

    Attributes:
        env_steps: Env steps done when the gradient step ran.
        gradient_steps: Gradient steps done, this one included.
        metrics: What the agent's ``training_step`` returned, keyed without namespace
            (``loss``, ``epsilon``); renderers show them under ``train/``.
    """

    env_steps: int
    gradient_steps: int
    metrics: Mapping[str, MetricValue]


@dataclass(frozen=True, slots=True)
class EvaluationStart:
    """Greedy evaluation episodes begin.

    Attributes:
        env_steps: Env steps done when evaluation began.
        episodes: The number of episodes the evaluation will run.
        max_episode_steps: Env steps after which an evaluation episode is truncated (the
            ``eval_max_episode_steps`` setting); None: no cap.
    """

    env_steps: int
    episodes: int
    max_episode_steps: int | None = None


@dataclass(frozen=True, slots=True)
class EvaluationStep:
    """One step of the evaluation's vector environment (one event per vector step), so that
    renderers can show a long evaluation's progress.

    Attributes:
        env_steps: Env steps of training done when the evaluation began.
        eval_env_steps: Env steps this evaluation has taken so far (summed over its sub-envs).
        episodes_done: Evaluation episodes finished so far.
        episodes: The number of episodes the evaluation will run.
    """

    env_steps: int
    eval_env_steps: int
    episodes_done: int
    episodes: int


@dataclass(frozen=True, slots=True)
class EvaluationEnd:
    """Evaluation finished.

    Attributes:
        env_steps: Env steps done when evaluation began (evaluation takes no training steps).
        returns: Each evaluation episode's undiscounted return, in the order they finished.
        lengths: Each evaluation episode's length in env steps.
        complete: False when a stop request cut the evaluation short.
    """

    env_steps: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    complete: bool = True

    @property
    def return_mean(self) -> float:
        """Mean evaluation return (NaN when no episode finished)."""
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    @property
    def return_std(self) -> float:
        """Population standard deviation of the evaluation returns (NaN when none finished)."""
        if not self.returns:
            return float("nan")
        mean = self.return_mean
        return float((sum((r - mean) ** 2 for r in self.returns) / len(self.returns)) ** 0.5)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint was written.

    Attributes:
        env_steps: Env steps done when it was taken.
        path: The file written.
        size_bytes: Its size on disk.
        seconds: Wall-clock seconds the save took.
        best: True for ``best-<env_steps>.pt`` (an evaluation beat the best so far).
    """

    env_steps: int
    path: str
    size_bytes: int
    seconds: float
    best: bool = False


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A stop was requested and the loop returned early.

    Attributes:
        env_steps: Env steps done when the loop stopped.
        reason: The reason given to :meth:`~rltrain.runtime.interrupt.Interrupter.stop`.
    """

    env_steps: int
    reason: str


@dataclass(frozen=True, slots=True)
class End:
    """Training ended (normally or after an interruption).

    Attributes:
        summary: The run's summary, as returned in :class:`~rltrain.strategies.base.RLResult`.
    """

    summary: Summary


Event = Union[
    Start, EnvStep, EpisodeEnd, TrainStep, EvaluationStart, EvaluationStep, EvaluationEnd,
    Checkpoint, Interrupted, End,
]

#: Every event type, in the order a run emits them first.
EVENT_TYPES: tuple[type, ...] = (
    Start,
    EnvStep,
    EpisodeEnd,
    TrainStep,
    EvaluationStart,
    EvaluationStep,
    EvaluationEnd,
    Checkpoint,
    Interrupted,
    End,
)


def flatten_hparams(prefix: str, config: Any) -> dict[str, float | int | str | bool]:
    """A dataclass config as ``{"<prefix>/<field>": value}`` for :class:`Start`'s hparams.

    Numbers, strings and booleans are kept; anything else (None, lists) becomes its ``str``.
    """
    return {
        f"{prefix}/{name}": value if isinstance(value, (bool, int, float, str)) else str(value)
        for name, value in dataclasses.asdict(config).items()
    }


def flatten_config(config: Mapping[str, Any],
                   prefix: str = "") -> dict[str, float | int | str | bool]:
    """A nested config as dotted keys (``{"agent.lr": 0.001}``) for :class:`Start`'s config;
    lists and None become their ``str``."""
    out: dict[str, float | int | str | bool] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_config(value, dotted + "."))
        else:
            out[dotted] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def hook_name(event_type: type) -> str:
    """The subscriber method that receives ``event_type``: ``EnvStep`` -> ``on_env_step``."""
    return "on_" + re.sub(r"(?<!^)(?=[A-Z])", "_", event_type.__name__).lower()

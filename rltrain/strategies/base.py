"""The strategy template: :class:`RLStrategy`, its :class:`RLResult` and :class:`Summary`."""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym

from rltrain.agents.base import LearningAgent, Policy
from rltrain.envs.make import EnvInit
from rltrain.observe.events import End, Interrupted, Start, flatten_config, flatten_hparams
from rltrain.optim import ended_on_refused_loss
from rltrain.strategies.components import RLComponents
from rltrain.strategies.run.failure import what_is_left
from rltrain.strategies.run.resume import restore_progress
from rltrain.types import Summary


@dataclass(frozen=True)
class RLResult:
    """The trained policy and the run's summary."""

    policy: Policy
    summary: Summary


class RLStrategy(ABC):
    """A way of training an agent: subclasses implement :meth:`train_loop`.

    :meth:`train` is a fixed template, so no strategy can forget the run's events: it resets the
    metrics, emits Start, runs ``train_loop``, emits Interrupted when a stop was requested, builds
    the summary and emits End. A ``train_loop`` steps environments (with a
    :class:`~rltrain.envs.runner.Runner`), stores experience, calls the agent through
    :class:`~rltrain.optim.Optimization`, emits EnvStep/EpisodeEnd/TrainStep events, and returns
    as soon as ``components.interrupter.stop_requested()``.
    """

    @property
    def seed(self) -> int:
        """The run's seed, from which every other derives
        (:func:`~rltrain.runtime.seeding.derive_seeds`), what the Trainer's probe environment
        and ``evaluate`` use too. Default 0; a strategy whose settings hold a seed returns it
        (the shipped loops: ``self.config.seed``)."""
        return 0

    #: What kind of loop this is, in messages and hparams; ``"custom"`` for your own loops.
    kind: str = "custom"

    #: The protocol the agents this loop trains fit (:mod:`rltrain.agents.protocols`):
    #: checked structurally when a run starts. None (your own loops): any agent.
    learner: ClassVar[type | None] = None

    @classmethod
    def fits(cls, agent_type: type) -> bool:
        """Whether agents of ``agent_type`` have what this loop calls (:attr:`learner`)."""
        return cls.learner is None or issubclass(agent_type, cls.learner)

    def train(self, agent: LearningAgent, components: RLComponents, env_init: EnvInit) -> RLResult:
        """Train ``agent`` on ``env_init`` for ``components.num_steps`` env steps."""
        events = components.event_processor
        settings = components.summary
        progress = components.progress
        events.metrics.reset(window=settings.window, return_threshold=settings.return_threshold,
                             progress=progress)
        if components.checkpoint is not None:
            restore_progress(components)
        events.emit(Start(total_env_steps=components.num_steps,
                          start_env_steps=progress.env_steps,
                          hparams=self.run_hparams(agent, components),
                          config=flatten_config(components.config)))
        policy = self.train_loop(agent, components, env_init)
        reason = stop_reason(components)
        if reason is not None:
            events.emit(Interrupted(env_steps=progress.env_steps, reason=reason))
        metrics = events.metrics
        summary = Summary(
            env_steps=progress.env_steps,
            gradient_steps=progress.gradient_steps,
            episodes=progress.episodes,
            wall_time=metrics.elapsed,
            best_eval_return=None if math.isinf(metrics.best_eval_return)
            else metrics.best_eval_return,
            threshold_env_steps=metrics.threshold_env_steps,
            threshold_seconds=metrics.threshold_seconds,
            stop_reason=reason,
            final_metrics=metrics.snapshot(),
        )
        events.emit(End(summary=summary))
        return RLResult(policy=policy, summary=summary)

    @abstractmethod
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        """Run the training and return the trained policy (also when stopped early)."""

    def check(self, agent: LearningAgent, components: RLComponents,
              observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Check this strategy's settings against the run (its agent, built for the env's
        spaces, ``components.num_steps``, and ``components.checkpoint`` when resuming) before
        anything is written: raise an error that names the setting, or warn. Default: nothing
        to check."""
        return None

    def hparams(self) -> dict[str, float | int | str | bool]:
        """The strategy's settings, for TensorBoard's hyperparameters and the resume check.
        Default: the fields of ``self.config`` when it is a dataclass (``strategy/<field>``),
        else none."""
        config = getattr(self, "config", None)
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return flatten_hparams("strategy", config)
        return {}

    def run_hparams(self, agent: LearningAgent,
                    components: RLComponents) -> dict[str, float | int | str | bool]:
        """Every setting that shapes what the run computes: the strategy's, the agent's and the
        optimisation's. Shown as TensorBoard hyperparameters, saved in checkpoints, and
        compared when a run is resumed."""
        return {**self.hparams(), **agent.hparams(), **components.optimization.hparams()}


def stop_reason(components: RLComponents) -> str | None:
    """Why a run ended: the stop request's reason when it came before ``num_steps`` (None
    when the run took them all), and always when a refused non-finite loss stopped it (even
    in the last update), then with the checkpoint it leaves and what to do next: such a run
    failed, and writes no checkpoint after the loss."""
    interrupter = components.interrupter
    reason = interrupter.reason if interrupter.stop_requested() else None
    if ended_on_refused_loss(reason):
        return f"{reason} {what_is_left(components.checkpointer)}"
    return reason if components.progress.env_steps < components.num_steps else None

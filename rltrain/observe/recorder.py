"""A subscriber that keeps every event: for tests, notebooks and debugging."""

from __future__ import annotations

from typing import Any, TypeVar

from typing_extensions import override

from rltrain.observe.events import (
    Checkpoint,
    End,
    EnvStep,
    EpisodeEnd,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Interrupted,
    Start,
    TrainStep,
)
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber

E = TypeVar("E")


class EventRecorder(Subscriber):
    """Appends every event it receives to :attr:`events`, in order.

    Example:

        recorder = EventRecorder()
        Trainer(callbacks=[recorder]).fit("CartPole-v1", DQN())
        returns = [e.return_mean for e in recorder.of(EvaluationEnd)]
    """

    def __init__(self) -> None:
        self.events: list[Any] = []

    def of(self, event_type: type[E]) -> list[E]:
        """The recorded events of ``event_type``, in order."""
        return [e for e in self.events if isinstance(e, event_type)]

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_train_step(self, event: TrainStep, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_evaluation_step(self, event: EvaluationStep, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_checkpoint(self, event: Checkpoint, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_interrupted(self, event: Interrupted, metrics: Metrics) -> None:
        self.events.append(event)

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        self.events.append(event)

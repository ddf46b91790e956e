"""Events, metrics and renderers: everything training shows or stores goes through here."""

from rltrain.observe.events import (
    Checkpoint,
    End,
    EnvStep,
    EpisodeEnd,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Event,
    Interrupted,
    Start,
    TrainStep,
)
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import EventProcessor, Subscriber
from rltrain.observe.recorder import EventRecorder

__all__ = [
    "Checkpoint",
    "End",
    "EnvStep",
    "EpisodeEnd",
    "EvaluationEnd",
    "EvaluationStart",
    "EvaluationStep",
    "Event",
    "EventProcessor",
    "EventRecorder",
    "Interrupted",
    "Metrics",
    "Start",
    "Subscriber",
    "TrainStep",
]

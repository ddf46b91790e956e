"""Events, metrics and renderers: everything training shows or stores goes through here."""

from rltrain.events.events import (
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
from rltrain.events.metrics import Metrics
from rltrain.events.processor import EventProcessor, Subscriber
from rltrain.events.recorder import EventRecorder

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

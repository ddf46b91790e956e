"""Callbacks shipped with rltrain: subscribers that act on what they see."""

from __future__ import annotations

from typing_extensions import override

from rltrain.observe.events import EvaluationEnd
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber
from rltrain.runtime.interrupt import Interrupter


class EarlyStopping(Subscriber):
    """Stops training once the mean evaluation return reaches ``threshold``.

    It requests the stop (:meth:`~rltrain.observe.processor.Subscriber.request_stop`), so the
    loop ends cleanly after the evaluation and the run's summary gives ``stop_reason``.
    ``Trainer(return_threshold=...)`` adds one; pass your own in ``callbacks`` to use it with
    any trainer.

    Args:
        threshold: Mean greedy evaluation return to reach (e.g. 475 for CartPole-v1).
        interrupter: The run's interrupter. Default: the one the Trainer attaches.
    """

    def __init__(self, threshold: float, *, interrupter: Interrupter | None = None) -> None:
        self.threshold = threshold
        self.interrupter = interrupter

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        if event.complete and event.returns and event.return_mean >= self.threshold:
            self.request_stop(
                f"evaluation return {event.return_mean:.2f} reached the threshold "
                f"{self.threshold:g}"
            )

"""Any experiment logger with Lightning's interface (``log_metrics``, ``log_hyperparams``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from typing_extensions import override

from rltrain.observe.events import End, EnvStep, EvaluationEnd, Start
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers.schedule import LogSchedule

#: Hyperparameter groups named after the config section that holds the same settings.
_SECTION_OF_GROUP = {"optim": "trainer"}


def hyperparameters(event: Start) -> dict[str, float | int | str | bool]:
    """The run's hyperparameters, each once, by its config name (``agent.lr``, as on the
    command line): the Start event's dotted ``config``, then any of its ``hparams``
    (``agent/lr``) the config does not hold already, renamed with a dot (``optim/dtype`` is
    the config's ``trainer.dtype``)."""
    shown = dict(event.config)
    for key, value in event.hparams.items():
        group, _, name = key.partition("/")
        section = _SECTION_OF_GROUP.get(group, group)
        if f"{group}.{name}" not in shown and f"{section}.{name}" not in shown:
            shown[f"{group}.{name}" if name else key] = value
    return shown


def _log_hyperparams(logger: object, params: Mapping[str, Any]) -> None:
    log_hyperparams = getattr(logger, "log_hyperparams", None)
    if log_hyperparams is not None:
        log_hyperparams(dict(params))


@runtime_checkable
class MetricsLogger(Protocol):
    """What ``Trainer(logger=...)`` accepts besides TensorBoard: an object with
    ``log_metrics(metrics, step)``, as Lightning's ``CSVLogger``, ``WandbLogger`` or
    ``MLFlowLogger`` (``log_hyperparams(params)`` and ``finalize(status)`` are called when
    the object has them)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record ``metrics`` at ``step`` (env steps)."""


class LoggerRenderer(Subscriber):
    """Passes the run's metrics to a :class:`MetricsLogger`, on TensorBoard's schedule.

    Every ``log_interval`` env steps and at the end: every metric but the evaluation ones; after
    each complete evaluation: the ``eval/`` metrics. At the start: the hyperparameters, each once
    by its dotted config name (:func:`hyperparameters`), through ``log_hyperparams`` when the
    logger has it. At the end:
    ``finalize("success")``, ``("interrupted")`` after a stop, or ``("failed")`` when the run
    raised, when the logger has it.

    Args:
        logger: The logger object.
        log_interval: Env steps between metric rows. Default 1,000.
    """

    def __init__(self, logger: MetricsLogger, *, log_interval: int = 1_000) -> None:
        self.logger = logger
        self.schedule = LogSchedule(log_interval)
        self._open = False

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self.schedule.start(event.start_env_steps)
        self._open = True
        _log_hyperparams(self.logger, hyperparameters(event))

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        if self.schedule.due(event.env_steps):
            self._write(metrics, event.env_steps)

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        if event.complete:
            snapshot = metrics.snapshot()
            self.logger.log_metrics({k: v for k, v in snapshot.items() if k.startswith("eval/")},
                                    step=event.env_steps)

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        if self.schedule.final_due(metrics.env_steps):
            self._write(metrics, metrics.env_steps)
        self._finalize("success" if event.summary.stop_reason is None else "interrupted")

    @override
    def close(self) -> None:
        self._finalize("failed")  # closed before the End event: the run raised

    def _finalize(self, status: str) -> None:
        finalize: Any = getattr(self.logger, "finalize", None)
        if self._open and finalize is not None:
            finalize(status)
        self._open = False

    def _write(self, metrics: Metrics, env_steps: int) -> None:
        snapshot = metrics.snapshot()
        self.logger.log_metrics({k: v for k, v in snapshot.items() if not k.startswith("eval/")},
                                step=env_steps)

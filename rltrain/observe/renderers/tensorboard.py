"""TensorBoard scalars and hyperparameters, through torch's ``SummaryWriter``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from typing_extensions import override

from rltrain.observe.events import Checkpoint, End, EnvStep, EvaluationEnd, Start
from rltrain.observe.loggers import is_summary_writer as is_summary_writer
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers.logger import hyperparameters
from rltrain.observe.renderers.schedule import LogSchedule

if TYPE_CHECKING:
    # Imported when a writer is made: TensorBoard costs 5 MB and 0.2 s to import, which runs
    # without a TensorBoard logger need not pay.
    from torch.utils.tensorboard import SummaryWriter


#: The checkpoint's size and save time: under ``trainer/``, the group TensorBoard lists last.
CHECKPOINT_TAGS = ("trainer/checkpoint_size_mb", "trainer/checkpoint_seconds")


class TensorBoardRenderer(Subscriber):
    """Writes every metric against the env step, and the run's hyperparameters.

    Scalars are written every ``log_interval`` env steps, at each evaluation and at the end
    (unless that step was written already, as when a finished run is resumed with nothing
    left to do). The run's hyperparameters go to TensorBoard's HPARAMS tab, each once by its
    dotted config name (``agent.lr``; :func:`~rltrain.observe.renderers.logger.hyperparameters`),
    linked to ``eval/return_mean`` and ``rollout/episode_return``.

    Tag order: TensorBoard's Time Series page groups the cards by the tag's part before the
    first ``/`` and sorts them by tag name (letters in ASCII order, numbers by value), and
    opens the first two groups only. The groups here sort ``eval/`` (greedy returns),
    ``rollout/`` (training returns), ``time/`` (``time/sps``), ``train/`` (losses), and last
    ``trainer/`` (:data:`CHECKPOINT_TAGS`), so the page opens on the returns.

    Args:
        log_dir: The directory for the event files (ignored when ``writer`` is given).
        writer: Your own ``SummaryWriter``; it is flushed, not closed, at the end. Default: one
            made in ``log_dir`` when the run starts, closed at its end.
        log_interval: Env steps between scalar writes. Default 1,000.
    """

    def __init__(self, log_dir: str | Path | None = None, *, writer: SummaryWriter | None = None,
                 log_interval: int = 1_000) -> None:
        if log_dir is None and writer is None:
            raise ValueError("TensorBoardRenderer needs a log_dir or a SummaryWriter.")
        self.log_dir = Path(writer.log_dir if writer is not None else str(log_dir))
        self.schedule = LogSchedule(log_interval)
        self._owns_writer = writer is None
        self._writer: SummaryWriter | None = writer

    @property
    def writer(self) -> SummaryWriter:
        """The ``SummaryWriter`` in use (made in ``log_dir`` on first use)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        return self._writer

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self.schedule.start(event.start_env_steps)
        shown = hyperparameters(event)
        if shown:
            from torch.utils.tensorboard.summary import hparams

            metric_tags = {"eval/return_mean": math.nan, "rollout/episode_return": math.nan}
            file_writer = self.writer.file_writer
            assert file_writer is not None
            for summary in hparams(shown, metric_tags):
                file_writer.add_summary(summary)

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        if self.schedule.due(event.env_steps):
            self._write(metrics, event.env_steps)

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        writer = self._writer
        if writer is None or not event.complete:  # a cut-short evaluation is not a data point
            return
        snap = metrics.snapshot()
        for key in ("eval/return_mean", "eval/return_std", "eval/length_mean", "eval/best_return"):
            writer.add_scalar(key, snap[key], event.env_steps)

    @override
    def on_checkpoint(self, event: Checkpoint, metrics: Metrics) -> None:
        if self._writer is not None:
            self._writer.add_scalar(CHECKPOINT_TAGS[0], event.size_bytes / 1e6, event.env_steps)
            self._writer.add_scalar(CHECKPOINT_TAGS[1], event.seconds, event.env_steps)

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        if self.schedule.final_due(metrics.env_steps):
            self._write(metrics, metrics.env_steps)
        self.close()

    def _write(self, metrics: Metrics, env_steps: int) -> None:
        writer = self._writer
        if writer is None:
            return
        for key, value in metrics.snapshot().items():
            if not key.startswith("eval/"):
                writer.add_scalar(key, value, env_steps)

    @override
    def close(self) -> None:
        if self._writer is None:
            return
        if self._owns_writer:
            self._writer.close()
            self._writer = None
        else:
            self._writer.flush()

"""What a Trainer's run shows and writes: its renderers, its logger, the model summary."""

from __future__ import annotations

from pathlib import Path

from rltrain.agents.base import LearningAgent
from rltrain.callbacks import EarlyStopping
from rltrain.checkpoint import atomic_write_text
from rltrain.events.processor import Subscriber
from rltrain.events.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    LoggerRenderer,
    TensorBoardRenderer,
    TqdmRenderer,
)
from rltrain.events.renderers.tensorboard import is_summary_writer
from rltrain.model_summary import format_summary, summarize
from rltrain.trainer.settings import TrainerSettings


def write_model_summary(trainer: TrainerSettings, agent: LearningAgent, run_dir: Path) -> None:
    """``model_summary.txt`` in ``run_dir`` (and on the console when it is on)."""
    table = format_summary(summarize(agent))
    atomic_write_text(run_dir / "model_summary.txt", table + "\n")
    if trainer.enable_console:
        print(f"{type(agent).__name__}\n{table}", flush=True)

def logger_renderer(trainer: TrainerSettings, run_dir: Path) -> Subscriber | None:
    """The renderer of ``trainer.logger`` (None for ``logger=False``)."""
    logger, interval = trainer.logger, trainer.log_interval
    if logger is False:
        return None
    if logger is True:
        return TensorBoardRenderer(run_dir, log_interval=interval)
    if isinstance(logger, (str, Path)):
        return TensorBoardRenderer(logger, log_interval=interval)
    if is_summary_writer(logger):
        return TensorBoardRenderer(writer=logger, log_interval=interval)
    return LoggerRenderer(logger, log_interval=interval)

def subscribers(trainer: TrainerSettings, run_dir: Path, agent: LearningAgent) -> list[Subscriber]:
    """The run's subscribers: the built-in renderers that are on, then the callbacks and
    early stopping, each attached to the trainer's interrupter; the agent gets its logger."""
    subscribers: list[Subscriber] = []
    if trainer.enable_progress_bar:
        subscribers.append(TqdmRenderer())
    if trainer.enable_console:
        subscribers.append(ConsoleRenderer(interval_seconds=trainer.console_interval))
    logger = logger_renderer(trainer, run_dir)
    if logger is not None:
        subscribers.append(logger)
        agent.logger = (logger.writer if isinstance(logger, TensorBoardRenderer)
                        else trainer.logger)
    if trainer.enable_metrics_file:
        subscribers.append(JsonlRenderer(run_dir / "metrics.jsonl",
                                         log_interval=trainer.log_interval))
    subscribers += trainer.callbacks
    if trainer.return_threshold is not None:
        subscribers.append(EarlyStopping(trainer.return_threshold))
    for subscriber in subscribers:
        subscriber.interrupter = trainer.interrupter
    return subscribers

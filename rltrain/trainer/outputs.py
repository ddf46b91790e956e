"""What a Trainer's run shows and writes: its renderers, its loggers, the model summary."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

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
from rltrain.loggers import is_unrecorded, logger_items, named_logger
from rltrain.model_summary import format_summary, summarize
from rltrain.trainer.settings import TrainerSettings


def write_model_summary(trainer: TrainerSettings, agent: LearningAgent, run_dir: Path) -> None:
    """``model_summary.txt`` in ``run_dir`` (and on the console when it is on)."""
    table = format_summary(summarize(agent))
    atomic_write_text(run_dir / "model_summary.txt", table + "\n")
    if trainer.enable_console:
        print(f"{type(agent).__name__}\n{table}", flush=True)

def logger_renderers(trainer: TrainerSettings, run_dir: Path) -> list[Subscriber]:
    """The renderers of ``trainer.logger``, in its order (none for ``logger=False``). A saved
    config's ``{unrecorded: why}`` (a logger object given in Python) is skipped, with a
    warning."""
    interval, renderers = trainer.log_interval, list[Subscriber]()
    for item in logger_items(trainer.logger):
        if item == "tensorboard":
            renderers.append(TensorBoardRenderer(run_dir, log_interval=interval))
        elif isinstance(item, str):
            renderers.append(LoggerRenderer(named_logger(item, run_dir), log_interval=interval))
        elif isinstance(item, Path):
            renderers.append(TensorBoardRenderer(item, log_interval=interval))
        elif is_summary_writer(item):
            renderers.append(TensorBoardRenderer(writer=item, log_interval=interval))
        elif is_unrecorded(item):
            warnings.warn(f"trainer.logger: {item['unrecorded']}; this run goes on without "
                          "it (name the loggers with trainer.logger=[...]).", stacklevel=2)
        else:
            renderers.append(LoggerRenderer(item, log_interval=interval))
    return renderers


def agent_logger(renderer: Subscriber) -> Any:
    """What the agent's ``logger`` is while a run writes to ``renderer``: TensorBoard's
    ``SummaryWriter``, or the logger object."""
    if isinstance(renderer, TensorBoardRenderer):
        return renderer.writer
    assert isinstance(renderer, LoggerRenderer)
    return renderer.logger


def subscribers(trainer: TrainerSettings, run_dir: Path, agent: LearningAgent) -> list[Subscriber]:
    """The run's subscribers: the built-in renderers that are on, then the callbacks and
    early stopping, each attached to the trainer's interrupter; the agent gets its logger."""
    subscribers: list[Subscriber] = []
    if trainer.enable_progress_bar:
        subscribers.append(TqdmRenderer())
    if trainer.enable_console:
        subscribers.append(ConsoleRenderer(interval_seconds=trainer.console_interval))
    loggers = logger_renderers(trainer, run_dir)
    subscribers += loggers
    if loggers:  # the first one, as Lightning's ``self.logger``
        agent.logger = agent_logger(loggers[0])
    if trainer.enable_metrics_file:
        subscribers.append(JsonlRenderer(run_dir / "metrics.jsonl",
                                         log_interval=trainer.log_interval))
    subscribers += trainer.callbacks
    if trainer.return_threshold is not None:
        subscribers.append(EarlyStopping(trainer.return_threshold))
    for subscriber in subscribers:
        subscriber.interrupter = trainer.interrupter
    return subscribers

"""What a Trainer's run shows and writes: its renderers, its loggers, the model summary, the
run's ``summary.json``, and what an aborted run leaves."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rltrain.agents.base import LearningAgent
from rltrain.agents.nn.encoders import encoder_lines
from rltrain.checkpoint import Checkpointer, atomic_write_text
from rltrain.observe.callbacks import EarlyStopping
from rltrain.observe.loggers import is_unrecorded, logger_items, named_logger
from rltrain.observe.model_summary import format_summary, summarize
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    LoggerRenderer,
    TensorBoardRenderer,
    TqdmRenderer,
)
from rltrain.observe.renderers.jsonl import json_safe
from rltrain.observe.renderers.tensorboard import is_summary_writer
from rltrain.optim import ended_on_refused_loss
from rltrain.trainer.settings import TrainerSettings
from rltrain.types import Summary


def write_model_summary(agent: LearningAgent, run_dir: Path) -> str:
    """``model_summary.txt`` in ``run_dir``: which encoder each part of the observation got
    (:func:`~rltrain.agents.nn.encoders.encoder_lines`), then the table of the agent's
    networks; returned for the console."""
    table = "\n".join([*encoder_lines(agent), format_summary(summarize(agent))])
    atomic_write_text(run_dir / "model_summary.txt", table + "\n")
    return f"{type(agent).__name__}\n{table}"


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


def subscribers(trainer: TrainerSettings, run_dir: Path, agent: LearningAgent,
                preamble: Sequence[str] = ()) -> list[Subscriber]:
    """The run's subscribers: the built-in renderers that are on (the console writes
    ``preamble`` when training starts), then the callbacks and early stopping, each attached to
    the trainer's interrupter; the agent gets its logger."""
    subscribers: list[Subscriber] = []
    if trainer.enable_progress_bar:
        subscribers.append(TqdmRenderer())
    if trainer.enable_console:
        subscribers.append(ConsoleRenderer(interval_seconds=trainer.console_interval,
                                           preamble=preamble))
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


def write_summary(run_dir: Path, summary: Summary) -> None:
    """``summary.json`` in ``run_dir``: the run's :class:`~rltrain.types.Summary`, with its
    ``stop_reason`` (a refused non-finite loss's too: :func:`stopped_on_refused_loss`)."""
    atomic_write_text(run_dir / "summary.json", json.dumps(
        json_safe(dataclasses.asdict(summary)), indent=2) + "\n")


def stopped_on_refused_loss(run_dir: Path) -> bool:
    """True when ``run_dir``'s ``summary.json`` says a refused non-finite loss stopped its run
    (a failed run, not a finished one: with no checkpoint beside it, nothing in the folder can
    be resumed and a new run may take it). False when it cannot be read."""
    try:
        record = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    reason = record.get("stop_reason") if isinstance(record, dict) else None
    return isinstance(reason, str) and ended_on_refused_loss(reason)


def kept_after_abort(checkpointer: Checkpointer | None, run_dir: Path) -> str:
    """What a run aborted by a second Ctrl-C leaves, in words: its last checkpoint (the one
    its manifest names: read at once, not verified) and how to resume from it, or that it has
    none and is started again."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unreadable manifest: resuming says why
            last = None if checkpointer is None else checkpointer.manifest().last
    except (OSError, ValueError):
        return "the checkpoints written before it are kept"
    if checkpointer is None or last is None:
        return ("no checkpoint was written yet, so nothing can be resumed: start the run again "
                "(rltrain fit without --resume)")
    return (f"the last checkpoint, {checkpointer.store.where(last)}, is kept: resume with "
            f"rltrain fit --resume {run_dir}")

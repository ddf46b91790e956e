"""A JSON-lines metrics file: one object per line, for pandas, jq and scripts."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import IO, Any

from typing_extensions import override

from rltrain.observe.events import Checkpoint, End, EnvStep, EvaluationEnd, Interrupted, Start
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers.schedule import LogSchedule


class JsonlRenderer(Subscriber):
    """Appends metric rows to a ``.jsonl`` file.

    Each row has an ``event`` field: ``"metrics"`` (every ``log_interval`` env steps and at the
    end, with every metric of :class:`~rltrain.observe.metrics.Metrics`), ``"evaluation"`` (with
    the episode returns and lengths, and ``time/elapsed`` at its end), ``"checkpoint"`` (path,
    size, seconds), ``"interrupted"`` and ``"end"`` (with the summary).
    Non-finite floats are written as ``null`` so that every line is strict JSON.

    Args:
        path: The file to append to (its folder is created).
        log_interval: Env steps between ``"metrics"`` rows. Default 1,000.
    """

    def __init__(self, path: str | Path, *, log_interval: int = 1_000) -> None:
        self.path = Path(path)
        self.schedule = LogSchedule(log_interval)
        self._file: IO[str] | None = None

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Appended, never followed through a symbolic link (a run directory is untrusted).
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self.schedule.start(event.start_env_steps)
        self._write({"event": "start", "env_steps": event.start_env_steps,
                     "total_env_steps": event.total_env_steps, "hparams": dict(event.hparams),
                     "config": dict(event.config)})

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        if self.schedule.due(event.env_steps):
            self._write({"event": "metrics", "env_steps": event.env_steps, **metrics.snapshot()})

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        self._write({
            "event": "evaluation",
            "env_steps": event.env_steps,
            "eval/return_mean": event.return_mean,
            "eval/return_std": event.return_std,
            "returns": list(event.returns),
            "lengths": list(event.lengths),
            "complete": event.complete,
            # the clock of the summary's threshold_seconds: seconds since this fit started
            "time/elapsed": metrics.elapsed,
        })

    @override
    def on_checkpoint(self, event: Checkpoint, metrics: Metrics) -> None:
        self._write({"event": "checkpoint", "env_steps": event.env_steps, "path": event.path,
                     "size_bytes": event.size_bytes, "seconds": event.seconds,
                     "best": event.best})

    @override
    def on_interrupted(self, event: Interrupted, metrics: Metrics) -> None:
        self._write({"event": "interrupted", "env_steps": event.env_steps, "reason": event.reason})

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        if self.schedule.final_due(metrics.env_steps):
            self._write({"event": "metrics", "env_steps": metrics.env_steps,
                         **metrics.snapshot()})
        self._write({"event": "end", **dataclasses.asdict(event.summary)})
        self.close()

    def _write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(json_safe(row)) + "\n")
            self._file.flush()
        except OSError as error:
            raise OSError(error.errno, f"Cannot write {self.path}: {error.strerror}") from error

    @override
    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, recursively (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value

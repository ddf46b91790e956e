"""Plain console lines, readable in CI logs and anywhere without a TTY, and written through
the progress bar on a terminal."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Sequence
from typing import TextIO

from typing_extensions import override

from rltrain.observe.events import (
    Checkpoint,
    End,
    EnvStep,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Interrupted,
    Start,
)
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers.progress_bar import terminal_columns, write_line


class ConsoleRenderer(Subscriber):
    """Prints a status line every ``interval_seconds``, a line per evaluation and a final summary.

    A line reads ``[ 12.0%] env_steps=6,000/50,000 sps=1,502 return=87.3 eval=... loss=0.41``;
    while an evaluation runs, the line every ``interval_seconds`` is its progress instead
    (``evaluating at 10,000 env steps: 3/10 episodes done, 2,500 evaluation env steps``).
    ``sps`` is env steps per second since the run's first env step, as the bar's and
    TensorBoard's ``time/sps``.

    Each line is written through the progress bar (:func:`~rltrain.observe.renderers.
    progress_bar.write_line`): the bar is cleared, the line written whole, the bar redrawn
    below it. On a terminal, a line wider than the window is wrapped between its fields
    (continuation lines indented by four spaces); in a file or pipe each line stays one line.

    Args:
        file: Where lines are written. Default ``sys.stdout``.
        interval_seconds: Seconds between status lines. Default 10.
        preamble: What the run says of itself, written as it is when training starts (the
            Trainer's: the agent's networks, the torch threads, the heap settings). Default
            none.
    """

    def __init__(self, *, file: TextIO | None = None, interval_seconds: float = 10.0,
                 preamble: Sequence[str] = ()) -> None:
        self.file = file
        self.interval_seconds = interval_seconds
        self.preamble = tuple(preamble)
        self._next_line = 0.0
        self._evaluation_cap: int | None = None

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self._next_line = time.monotonic() + self.interval_seconds
        for text in self.preamble:
            write_line(text, self.file if self.file is not None else sys.stdout)
        self._print(
            f"training for {event.total_env_steps:,} env steps"
            + (f", resuming at {event.start_env_steps:,}" if event.start_env_steps else "")
        )

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        now = time.monotonic()
        if now >= self._next_line:
            self._next_line = now + self.interval_seconds
            self._print(self.status_line(metrics))

    @override
    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        self._evaluation_cap = event.max_episode_steps

    @override
    def on_evaluation_step(self, event: EvaluationStep, metrics: Metrics) -> None:
        now = time.monotonic()
        if now >= self._next_line:
            self._next_line = now + self.interval_seconds
            self._print(f"evaluating at {event.env_steps:,} env steps: {event.episodes_done}/"
                        f"{event.episodes} episodes done, {event.eval_env_steps:,} evaluation "
                        "env steps")

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        if event.returns:
            cap = self._evaluation_cap
            capped = 0 if cap is None else sum(length >= cap for length in event.lengths)
            self._print(
                f"evaluation at {event.env_steps:,} env steps: return "
                f"{event.return_mean:.2f} ± {event.return_std:.2f} over {len(event.returns)} "
                f"episodes" + ("" if event.complete else " (cut short by a stop request)")
                + (f" ({capped} cut at eval_max_episode_steps={cap:,})" if capped else "")
            )

    @override
    def on_checkpoint(self, event: Checkpoint, metrics: Metrics) -> None:
        self._print(f"saved {event.path} ({event.size_bytes / 1e6:.1f} MB in "
                    f"{event.seconds:.2f} s)")

    @override
    def on_interrupted(self, event: Interrupted, metrics: Metrics) -> None:
        self._print(f"stopped at {event.env_steps:,} env steps: {event.reason}")

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        s = event.summary
        best = "n/a" if s.best_eval_return is None else f"{s.best_eval_return:.2f}"
        self._print(self.status_line(metrics))
        self._print(
            f"done: {s.env_steps:,} env steps, {s.gradient_steps:,} gradient steps in "
            f"{s.wall_time:.1f} s; best evaluation return {best}"
        )

    @staticmethod
    def status_line(metrics: Metrics) -> str:
        """One line with progress, speed, returns and the agent's training metrics."""
        snap = metrics.snapshot()
        total = metrics.total_env_steps
        percent = 100.0 * metrics.env_steps / total if total else 0.0
        parts = [
            f"[{percent:5.1f}%] env_steps={metrics.env_steps:,}/{total:,}",
            f"sps={snap['time/sps']:,.0f}",
        ]
        for key, label in (("rollout/episode_return", "return"), ("eval/return_mean", "eval")):
            if key in snap:
                parts.append(f"{label}={snap[key]:.1f}")
        parts += [f"{k[6:]}={v:.4g}" for k, v in snap.items() if k.startswith("train/")]
        return " ".join(parts)

    def _print(self, line: str) -> None:
        file = self.file if self.file is not None else sys.stdout
        columns = terminal_columns(file)
        if columns is not None and len(line) > columns:
            line = "\n".join(textwrap.wrap(line, columns, subsequent_indent="    ",
                                            break_long_words=False, break_on_hyphens=False))
        write_line(line, file)

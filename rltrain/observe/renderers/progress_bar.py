"""A tqdm progress bar over env steps, drawn only on a terminal, with the console's lines
written through it (:func:`write_line`)."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from tqdm import tqdm
from typing_extensions import override

from rltrain.observe.events import (
    End,
    EnvStep,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Start,
)
from rltrain.observe.metrics import Metrics
from rltrain.observe.processor import Subscriber

#: The bar's layout: no tqdm rate (``sps`` in the postfix is the run's one speed figure).
BAR_FORMAT = "{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
#: Fewest bar cells kept when the postfix is fitted to the terminal's width.
MIN_BAR_CELLS = 10


def terminal_columns(file: TextIO) -> int | None:
    """The width of the terminal ``file`` writes to; None when it is not a terminal or does
    not know its width (a pseudo-terminal never sized reports 0 columns: ``script``, some
    container and CI terminals)."""
    try:
        columns = os.get_terminal_size(file.fileno()).columns if file.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None
    return columns if columns else None


def write_line(line: str, file: TextIO) -> None:
    """Write ``line`` to ``file`` through any progress bar being drawn: a bar on the same
    terminal (stdout and stderr count as one) is cleared first and redrawn below the line,
    so neither overwrites the other (``tqdm.write``)."""
    tqdm.write(line, file=file)
    file.flush()


class TqdmRenderer(Subscriber):
    """A bar over env steps showing the elapsed time, the ETA, ``sps``, the mean episode
    return, the last evaluation return and the training metrics (losses and what the agent
    logged, averaged over the window). While an evaluation runs, the bar's description shows
    its episodes done.

    ``sps`` is the run's one speed figure, the same as the console's ``sps=`` and
    TensorBoard's ``time/sps``: env steps per second since the run's first env step
    (evaluations included). The ETA is the env steps left at that speed: the setup before the
    first step (making the environments, allocating the replay buffer, restoring a checkpoint)
    is not taken for a slow step. On a terminal the line fits the window (80 columns
    included): the postfix drops its last items rather than squeeze the bar below ten cells,
    and shows training metrics only where the bar keeps a third of the width (they are in the
    console lines too).

    On the default ``sys.stderr`` the bar is drawn only when stderr is a terminal: a run
    redirected to a file (``2>&1 > log``) gets the console's plain lines and no carriage
    returns. A ``file`` given explicitly is always drawn into.

    Args:
        file: Where the bar is drawn. Default ``sys.stderr``, where it is a terminal.
        refresh_seconds: Minimum seconds between redraws. Default 0.1 (tqdm's ``mininterval``).
    """

    def __init__(self, *, file: TextIO | None = None, refresh_seconds: float = 0.1) -> None:
        self.file = file
        self.refresh_seconds = refresh_seconds
        self._bar: tqdm[None] | None = None
        self._next_refresh = 0.0
        self._stepped = False
        self._description = ""

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        file = self.file if self.file is not None else sys.stderr
        if self.file is None and terminal_columns(file) is None:
            return  # not a terminal: no bar, the console's lines are the record
        self._bar = tqdm(
            total=event.total_env_steps,
            initial=event.start_env_steps,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            bar_format=BAR_FORMAT,
            smoothing=0,  # the ETA from the mean speed since the first step, as sps
            file=file,
            mininterval=self.refresh_seconds,
        )
        self._stepped = False
        self._description = ""

    @override
    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        bar = self._bar
        if not self._stepped and bar is not None:
            # The clock starts now: tqdm's rate would otherwise take the whole setup for the
            # first step (an ETA of hours for a run of minutes). The first step is not counted.
            self._stepped = True
            bar.unpause()
            bar.n = bar.last_print_n = bar.initial = event.env_steps
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh_seconds
            self._refresh(event.env_steps, metrics)

    @override
    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        self._describe(f"evaluating 0/{event.episodes} episodes", metrics)

    @override
    def on_evaluation_step(self, event: EvaluationStep, metrics: Metrics) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh_seconds
            self._describe(f"evaluating {event.episodes_done}/{event.episodes} episodes",
                           metrics)

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        self._describe("", metrics)

    def _describe(self, text: str, metrics: Metrics) -> None:
        self._description = text + ": " if text else ""
        self._refresh(metrics.env_steps, metrics)

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        self._refresh(metrics.env_steps, metrics)
        self.close()

    def _refresh(self, env_steps: int, metrics: Metrics) -> None:
        bar = self._bar
        if bar is None:
            return
        bar.n = env_steps
        items = [f"sps={metrics.sps:,.0f}"]
        if metrics.episodes:
            items.append(f"return={metrics.episode_return_mean:.1f}")
        if metrics.last_evaluation is not None:
            items.append(f"eval={metrics.last_evaluation.return_mean:.1f}")
        extras = [f"{name}={value:.4g}" for name, value in metrics.train_means().items()]
        bar.set_description_str(self._description, refresh=False)
        columns = bar.ncols if bar.ncols else terminal_columns(bar.fp)
        if columns is not None:  # on a terminal: what fits, the training metrics only if
            items = self._fitted(bar, items, columns - MIN_BAR_CELLS)  # the bar keeps a third
            extras = self._fitted(bar, items + extras, columns - columns // 3)[len(items):]
        bar.set_postfix_str(", ".join(items + extras), refresh=False)
        bar.refresh()

    @staticmethod
    def _fitted(bar: tqdm[None], items: list[str], width: int) -> list[str]:
        """The first of ``items`` whose line, without the bar's cells, fits in ``width``."""
        while items:
            bar.set_postfix_str(", ".join(items), refresh=False)
            meter = bar.format_meter(**{**bar.format_dict, "ncols": None,
                                        "bar_format": BAR_FORMAT.replace("{bar}", "")})
            if len(meter) <= width:
                break
            items = items[:-1]
        return items

    @override
    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

"""A tqdm progress bar over env steps."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm
from typing_extensions import override

from rltrain.events.events import (
    End,
    EnvStep,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    Start,
)
from rltrain.events.metrics import Metrics
from rltrain.events.processor import Subscriber


class TqdmRenderer(Subscriber):
    """A bar over env steps showing the ETA, SPS, the mean episode return, the last evaluation
    return and the training metrics (losses and what the agent logged), averaged over the
    window. While an evaluation runs, the bar's description shows its episodes done. The ETA
    counts from the run's first env step: the setup before it (making the environments,
    allocating the replay buffer, restoring a checkpoint) is not taken for a slow step.

    Args:
        file: Where the bar is drawn. Default ``sys.stderr``, as tqdm.
        refresh_seconds: Minimum seconds between redraws. Default 0.1 (tqdm's ``mininterval``).
    """

    def __init__(self, *, file: TextIO | None = None, refresh_seconds: float = 0.1) -> None:
        self.file = file
        self.refresh_seconds = refresh_seconds
        self._bar: tqdm[None] | None = None
        self._next_refresh = 0.0
        self._stepped = False

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        self._bar = tqdm(
            total=event.total_env_steps,
            initial=event.start_env_steps,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            file=self.file if self.file is not None else sys.stderr,
            mininterval=self.refresh_seconds,
        )
        self._stepped = False

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
        self._describe(f"evaluating 0/{event.episodes} episodes")

    @override
    def on_evaluation_step(self, event: EvaluationStep, metrics: Metrics) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh_seconds
            self._describe(f"evaluating {event.episodes_done}/{event.episodes} episodes")

    @override
    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        self._describe("")
        self._refresh(metrics.env_steps, metrics)

    def _describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)

    @override
    def on_end(self, event: End, metrics: Metrics) -> None:
        self._refresh(metrics.env_steps, metrics)
        self.close()

    def _refresh(self, env_steps: int, metrics: Metrics) -> None:
        bar = self._bar
        if bar is None:
            return
        bar.update(env_steps - bar.n)
        postfix = {"sps": f"{metrics.sps:.0f}"}
        if metrics.episodes:
            postfix["return"] = f"{metrics.episode_return_mean:.1f}"
        if metrics.last_evaluation is not None:
            postfix["eval"] = f"{metrics.last_evaluation.return_mean:.1f}"
        postfix.update({name: f"{value:.4g}" for name, value in metrics.train_means().items()})
        bar.set_postfix(postfix, refresh=True)

    @override
    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

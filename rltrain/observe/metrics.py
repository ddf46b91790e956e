"""Metrics computed from the event stream.

:class:`Metrics` is the first subscriber of every
:class:`~rltrain.observe.processor.EventProcessor`.
It keeps counters and windows cheaply at every event and turns them into numbers only when a
renderer asks (:meth:`Metrics.snapshot`), so tensors the agent returns are synchronised at render
cadence, not once per gradient step.

Keys are namespaced and spelled the same in every renderer:

=========================== =============================================================
``rollout/episode_return``  mean undiscounted return of the last ``window`` episodes
``rollout/episode_length``  mean length (env steps) of the last ``window`` episodes
``rollout/episode_return_last`` / ``rollout/episode_length_last``  the latest episode
``eval/return_mean``        mean greedy evaluation return of the latest complete evaluation
``eval/return_std``         its population standard deviation
``eval/length_mean``        mean evaluation episode length (env steps)
``eval/best_return``        best ``eval/return_mean`` so far
``train/<name>``            mean of the agent's ``<name>`` metric over the last ``window``
                            gradient steps (``train/loss``, ``train/epsilon``)
``time/sps``                env steps per second since the run's first env step
``time/env_steps``          env steps (transitions summed over sub-envs)
``time/gradient_steps``     gradient steps (``training_step`` calls)
``time/episodes``           finished training episodes
``time/elapsed``            seconds since training started (this call)
=========================== =============================================================
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from rltrain.observe.events import EnvStep, EpisodeEnd, EvaluationEnd, Start, TrainStep
from rltrain.types import MetricValue, Progress


class Metrics:
    """Windows and evaluation results, updated from events, beside the run's counters.

    The counters (env, vector and gradient steps, episodes) are not kept here: they are the
    run's :class:`~rltrain.types.Progress`, read when a renderer asks, the one set a checkpoint
    saves.

    Args:
        window: How many recent episodes (and gradient steps) the rolling means cover.
            Default 100, as Stable-Baselines3's ``stats_window_size``.
        return_threshold: When set, the env steps and seconds at which ``eval/return_mean`` first
            reached it are recorded. Default None: no threshold.
        progress: The run's counters. Default: counters of its own, all zero (a strategy's
            ``train`` hands in the run's at its start).
    """

    def __init__(self, *, window: int = 100, return_threshold: float | None = None,
                 progress: Progress | None = None) -> None:
        self.reset(window=window, return_threshold=return_threshold, progress=progress)

    def reset(self, *, window: int = 100, return_threshold: float | None = None,
              progress: Progress | None = None) -> None:
        """Forget everything and start over with these settings and counters (called at each
        run's start, with the run's counters)."""
        if window < 1:
            raise ValueError(f"Metrics window must be >= 1 episode; got {window}.")
        self.window = window
        self.return_threshold = return_threshold
        self.progress = progress if progress is not None else Progress()
        self.total_env_steps = 0
        self.start_time = time.perf_counter()
        self._first_step: tuple[float, int] | None = None
        self._returns: deque[float] = deque(maxlen=window)
        self._lengths: deque[int] = deque(maxlen=window)
        self._train: dict[str, deque[MetricValue]] = {}
        self.last_evaluation: EvaluationEnd | None = None
        self.best_eval_return = -math.inf
        self.threshold_env_steps: int | None = None
        self.threshold_seconds: float | None = None
        #: Seconds spent compiling networks in this run, when they are compiled (set by the run).
        self.compiling: Callable[[], float] | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            Start: self._on_start,
            EnvStep: self._on_env_step,
            EpisodeEnd: self._on_episode_end,
            TrainStep: self._on_train_step,
            EvaluationEnd: self._on_evaluation_end,
        }

    def update(self, event: object) -> None:
        """Update the windows from one event (events it does not track are ignored)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def hears(self, event_type: type) -> bool:
        """Whether :meth:`update` would change anything for an event of ``event_type``: an
        :class:`EnvStep` only until the first one is recorded."""
        if event_type is EnvStep:
            return self._first_step is None
        return event_type in self._handlers

    @property
    def env_steps(self) -> int:
        """Env steps done (the run's counter)."""
        return self.progress.env_steps

    @property
    def vector_steps(self) -> int:
        """Vector steps done (the run's counter)."""
        return self.progress.vector_steps

    @property
    def gradient_steps(self) -> int:
        """Gradient steps done (the run's counter)."""
        return self.progress.gradient_steps

    @property
    def episodes(self) -> int:
        """Training episodes finished (the run's counter)."""
        return self.progress.episodes

    @property
    def elapsed(self) -> float:
        """Seconds since the Start event."""
        return time.perf_counter() - self.start_time

    @property
    def sps(self) -> float:
        """Env steps per second since the first EnvStep of this run (resumed steps excluded)."""
        if self._first_step is None:
            return 0.0
        first_time, first_env_steps = self._first_step
        seconds = time.perf_counter() - first_time
        return (self.env_steps - first_env_steps) / seconds if seconds > 0 else 0.0

    @property
    def episode_return_mean(self) -> float:
        """Mean return over the last ``window`` training episodes (NaN before the first)."""
        return sum(self._returns) / len(self._returns) if self._returns else math.nan

    def train_means(self) -> dict[str, float]:
        """Each training metric (losses, values the agent logged) averaged over the window."""
        return {name: _mean(values) for name, values in self._train.items()}

    def snapshot(self) -> dict[str, float]:
        """Every metric as a float, keyed as in this module's table."""
        out: dict[str, float] = {}
        if self._returns:
            out["rollout/episode_return"] = self.episode_return_mean
            out["rollout/episode_length"] = sum(self._lengths) / len(self._lengths)
            out["rollout/episode_return_last"] = self._returns[-1]
            out["rollout/episode_length_last"] = float(self._lengths[-1])
        evaluation = self.last_evaluation
        if evaluation is not None:
            out["eval/return_mean"] = evaluation.return_mean
            out["eval/return_std"] = evaluation.return_std
            lengths = evaluation.lengths
            out["eval/length_mean"] = sum(lengths) / len(lengths) if lengths else math.nan
            out["eval/best_return"] = self.best_eval_return
        out.update({"train/" + name: value for name, value in self.train_means().items()})
        out["time/sps"] = self.sps
        out["time/env_steps"] = float(self.env_steps)
        out["time/gradient_steps"] = float(self.gradient_steps)
        out["time/episodes"] = float(self.episodes)
        out["time/elapsed"] = self.elapsed
        if self.compiling is not None:
            out["time/compile"] = self.compiling()
        return out

    def state_dict(self) -> dict[str, Any]:
        """The windows and evaluation results (for checkpoints; timings are not kept, and the
        counters are saved once, as the run's ``progress``)."""
        evaluation = self.last_evaluation
        return {
            "returns": list(self._returns),
            "lengths": list(self._lengths),
            "train": {name: [float(v) for v in values] for name, values in self._train.items()},
            "last_evaluation": None if evaluation is None else {
                "env_steps": evaluation.env_steps, "returns": list(evaluation.returns),
                "lengths": list(evaluation.lengths)},
            "best_eval_return": self.best_eval_return,
            "threshold_env_steps": self.threshold_env_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (after the resumed run's Start event)."""
        self._returns.extend(state["returns"])
        self._lengths.extend(state["lengths"])
        for name, values in state["train"].items():
            self._train[name] = deque(values, maxlen=self.window)
        saved = state["last_evaluation"]
        if saved is not None:
            self.last_evaluation = EvaluationEnd(env_steps=int(saved["env_steps"]),
                                                 returns=tuple(saved["returns"]),
                                                 lengths=tuple(saved["lengths"]))
        self.best_eval_return = float(state["best_eval_return"])
        self.threshold_env_steps = state["threshold_env_steps"]

    def _on_start(self, event: Start) -> None:
        self.start_time = time.perf_counter()
        self.total_env_steps = event.total_env_steps

    def _on_env_step(self, event: EnvStep) -> None:
        if self._first_step is None:
            self._first_step = (time.perf_counter(), event.env_steps)

    def _on_episode_end(self, event: EpisodeEnd) -> None:
        self._returns.append(event.episode_return)
        self._lengths.append(event.episode_length)

    def _on_train_step(self, event: TrainStep) -> None:
        for name, value in event.metrics.items():
            values = self._train.get(name)
            if values is None:
                values = self._train[name] = deque(maxlen=self.window)
            values.append(value)

    def _on_evaluation_end(self, event: EvaluationEnd) -> None:
        if not event.complete:  # cut short by a stop request: not comparable to full ones
            return
        self.last_evaluation = event
        mean = event.return_mean
        self.best_eval_return = max(self.best_eval_return, mean)
        threshold = self.return_threshold
        if threshold is not None and self.threshold_env_steps is None and mean >= threshold:
            self.threshold_env_steps = event.env_steps
            self.threshold_seconds = self.elapsed


def _mean(values: deque[MetricValue]) -> float:
    """Mean of floats or scalar tensors, with one device sync for all the tensors."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return float(sum(values)) / len(values)
    numbers = [float(v) for v in values if not isinstance(v, torch.Tensor)]
    tensor_sum = torch.stack([t.detach().float().reshape(()) for t in tensors]).sum().item()
    return (tensor_sum + sum(numbers)) / len(values)

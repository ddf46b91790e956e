"""The Metrics numbers, fed by hand: episode and training windows, evaluations, the
threshold, the speed, a reset."""

from __future__ import annotations

import math
import time

import pytest
import torch
from conftest import episode

from rltrain.observe import (
    EnvStep,
    EvaluationEnd,
    Metrics,
    Start,
    TrainStep,
)
from rltrain.types import MetricValue, Progress

# --- Metrics fed by hand -----------------------------------------------------------------------


def evaluation(env_steps: int, *returns: float, complete: bool = True) -> EvaluationEnd:
    return EvaluationEnd(env_steps=env_steps, returns=tuple(returns),
                         lengths=tuple(int(r) for r in returns), complete=complete)


def test_metrics_episode_means_cover_the_last_window_episodes() -> None:
    progress = Progress()
    metrics = Metrics(window=3, progress=progress)
    metrics.update(Start(total_env_steps=100))
    assert "rollout/episode_return" not in metrics.snapshot()
    assert math.isnan(metrics.episode_return_mean)
    for i, (ret, length) in enumerate([(1.0, 10), (2.0, 20), (3.0, 30), (10.0, 40)]):
        progress.episodes += 1  # as the runner counts them, before the event
        metrics.update(episode(10 * (i + 1), ret, length))
    snap = metrics.snapshot()
    assert snap["rollout/episode_return"] == pytest.approx(5.0)  # (2 + 3 + 10) / 3
    assert snap["rollout/episode_length"] == pytest.approx(30.0)  # (20 + 30 + 40) / 3
    assert snap["rollout/episode_return_last"] == 10.0
    assert snap["rollout/episode_length_last"] == 40.0
    assert snap["time/episodes"] == 4.0


def test_metrics_train_means_cover_the_last_window_steps_with_tensors_and_numbers() -> None:
    progress = Progress()
    metrics = Metrics(window=3, progress=progress)
    metrics.update(Start(total_env_steps=100))
    values: list[MetricValue] = [torch.tensor(1.0), torch.tensor(2.0), 3.0, 7]
    for i, value in enumerate(values, start=1):
        progress.gradient_steps = i
        metrics.update(TrainStep(env_steps=50, gradient_steps=i,
                                 metrics={"loss": value, "epsilon": 1.0 / i}))
    snap = metrics.snapshot()
    assert snap["train/loss"] == pytest.approx(4.0)  # (2 + 3 + 7) / 3
    assert snap["train/epsilon"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert snap["time/gradient_steps"] == 4.0
    assert isinstance(snap["train/loss"], float)


def test_metrics_evaluation_keeps_the_latest_and_the_best_return() -> None:
    metrics = Metrics()
    metrics.update(Start(total_env_steps=1000))
    metrics.update(evaluation(100, 10.0, 20.0))
    snap = metrics.snapshot()
    assert snap["eval/return_mean"] == 15.0
    assert snap["eval/return_std"] == 5.0
    assert snap["eval/length_mean"] == 15.0
    assert snap["eval/best_return"] == 15.0
    metrics.update(evaluation(200, 30.0, 50.0))
    metrics.update(evaluation(300, 5.0))
    snap = metrics.snapshot()
    assert snap["eval/return_mean"] == 5.0
    assert snap["eval/best_return"] == 40.0
    assert metrics.best_eval_return == 40.0
    # An evaluation cut short before any episode finished changes nothing.
    metrics.update(evaluation(400, complete=False))
    assert metrics.snapshot()["eval/return_mean"] == 5.0
    assert metrics.last_evaluation is not None and metrics.last_evaluation.env_steps == 300


def test_metrics_ignore_an_incomplete_evaluation_even_with_episodes() -> None:
    metrics = Metrics(return_threshold=100.0)
    metrics.update(Start(total_env_steps=1000))
    metrics.update(evaluation(100, 10.0))
    metrics.update(evaluation(200, 500.0, complete=False))
    snap = metrics.snapshot()
    assert snap["eval/return_mean"] == 10.0
    assert snap["eval/best_return"] == 10.0
    assert metrics.threshold_env_steps is None


def test_metrics_without_evaluation_have_no_eval_keys_and_infinite_best() -> None:
    metrics = Metrics()
    metrics.update(Start(total_env_steps=10))
    assert not any(k.startswith("eval/") for k in metrics.snapshot())
    assert metrics.best_eval_return == -math.inf


def test_metrics_threshold_records_the_first_evaluation_reaching_it() -> None:
    metrics = Metrics(return_threshold=35.0)
    metrics.update(Start(total_env_steps=1000))
    metrics.update(evaluation(100, 30.0, 20.0))
    assert metrics.threshold_env_steps is None
    assert metrics.threshold_seconds is None
    time.sleep(0.05)
    metrics.update(evaluation(200, 35.0, 35.0))  # exactly the threshold counts
    assert metrics.threshold_env_steps == 200
    seconds = metrics.threshold_seconds
    assert seconds is not None
    assert 0.05 <= seconds <= metrics.elapsed
    metrics.update(evaluation(300, 100.0))
    assert metrics.threshold_env_steps == 200
    assert metrics.threshold_seconds == seconds


def test_metrics_without_threshold_never_record_threshold_steps() -> None:
    metrics = Metrics()
    metrics.update(Start(total_env_steps=1000))
    metrics.update(evaluation(100, 1e9))
    assert metrics.threshold_env_steps is None
    assert metrics.threshold_seconds is None


def test_metrics_sps_counts_env_steps_since_the_first_env_step() -> None:
    progress = Progress(env_steps=1000, vector_steps=0)
    metrics = Metrics(progress=progress)
    metrics.update(Start(total_env_steps=5000, start_env_steps=1000))
    assert metrics.sps == 0.0
    before_first = time.perf_counter()
    progress.env_steps, progress.vector_steps = 1100, 100
    metrics.update(EnvStep(env_steps=1100, vector_steps=100))
    after_first = time.perf_counter()
    assert metrics.sps == 0.0  # nothing counted yet: the first step is the origin
    time.sleep(0.05)
    progress.env_steps, progress.vector_steps = 1600, 600
    metrics.update(EnvStep(env_steps=1600, vector_steps=600))
    before = time.perf_counter()
    sps = metrics.sps
    after = time.perf_counter()
    assert 500 / (after - before_first) <= sps <= 500 / (before - after_first)
    snap = metrics.snapshot()
    assert snap["time/env_steps"] == 1600.0
    assert metrics.vector_steps == 600


def test_metrics_reset_forgets_everything() -> None:
    metrics = Metrics(window=2, return_threshold=1.0)
    metrics.update(Start(total_env_steps=10))
    metrics.update(episode(5, 3.0, 3))
    metrics.update(evaluation(5, 4.0))
    metrics.reset()
    snap = metrics.snapshot()
    assert "rollout/episode_return" not in snap
    assert "eval/return_mean" not in snap
    assert metrics.threshold_env_steps is None
    assert metrics.episodes == 0
    with pytest.raises(ValueError, match="window"):
        metrics.reset(window=0)

"""Events of a real ``Trainer.fit``, the EventProcessor's dispatch and the Metrics numbers."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.observe import (
    Checkpoint,
    End,
    EnvStep,
    EpisodeEnd,
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    EventProcessor,
    EventRecorder,
    Interrupted,
    Metrics,
    Start,
    Subscriber,
    TrainStep,
)
from rltrain.strategies import RLResult
from rltrain.types import MetricValue, Progress

ENV = "CartPole-v1"


class StopAt(EventRecorder):
    """A recorder that requests a stop (same thread) once ``env_steps`` reaches ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.trainer: Trainer | None = None

    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        super().on_env_step(event, metrics)
        if event.env_steps >= self.at and self.trainer is not None:
            self.trainer.interrupter.stop("enough")


def small_config(**overrides: Any) -> OffPolicyConfig:
    settings: dict[str, Any] = dict(warmup_steps=100, train_interval=50, train_steps=4,
                                    batch_size=32, buffer_size=5000, seed=0)
    settings.update(overrides)
    return OffPolicyConfig(**settings)


def fit(tmp_path: Path, recorder: EventRecorder, *, num_steps: int, eval_interval: int = 200,
        eval_episodes: int = 2, **config: Any) -> tuple[Trainer, RLResult]:
    trainer = Trainer(num_steps=num_steps, strategy=OffPolicyStrategy(small_config(**config)),
                      eval_interval=eval_interval, eval_episodes=eval_episodes,
                      run_dir=tmp_path / "run", callbacks=[recorder], **QUIET)
    if isinstance(recorder, StopAt):
        recorder.trainer = trainer
    result = trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[32, 32])))
    return trainer, result


TwoEnvRun = tuple[EventRecorder, RLResult]


@pytest.fixture(scope="module")
def two_env_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[EventRecorder, RLResult]:
    """600 env steps on 2 sub-envs, warm-up 100, training every 50, evaluation every 200."""
    recorder = EventRecorder()
    _, result = fit(tmp_path_factory.mktemp("events"), recorder, num_steps=600, num_envs=2)
    return recorder, result


# --- the event stream of a run ----------------------------------------------------------------


def test_start_is_first_and_end_is_last_and_each_comes_once(two_env_run: TwoEnvRun) -> None:
    recorder, result = two_env_run
    events = recorder.events
    assert isinstance(events[0], Start)
    assert isinstance(events[-1], End)
    assert len(recorder.of(Start)) == 1
    assert len(recorder.of(End)) == 1
    start = events[0]
    assert start.total_env_steps == 600
    assert start.start_env_steps == 0
    assert start.hparams["strategy/num_envs"] == 2
    assert events[-1].summary == result.summary


def test_one_env_step_event_per_vector_step_advancing_by_num_envs(two_env_run: TwoEnvRun) -> None:
    recorder, result = two_env_run
    steps = recorder.of(EnvStep)
    assert [s.vector_steps for s in steps] == list(range(1, len(steps) + 1))
    assert [s.env_steps for s in steps] == [2 * s.vector_steps for s in steps]
    assert steps[-1].env_steps == result.summary.env_steps == 600
    assert len(steps) == 300


def test_episode_end_events_match_the_summary_and_follow_their_env_step(
    two_env_run: TwoEnvRun,
) -> None:
    recorder, result = two_env_run
    episodes = recorder.of(EpisodeEnd)
    assert len(episodes) == result.summary.episodes > 0
    last_env_step = None
    for event in recorder.events:
        if isinstance(event, EnvStep):
            last_env_step = event
        elif isinstance(event, EpisodeEnd):
            assert last_env_step is not None
            assert event.env_steps == last_env_step.env_steps
            assert event.env_index in (0, 1)
            assert event.episode_length >= 1
            # CartPole pays 1 per step, so return equals length.
            assert event.episode_return == float(event.episode_length)
    # Each sub-env's finished episodes cannot hold more steps than that sub-env took.
    for index in (0, 1):
        assert sum(e.episode_length for e in episodes if e.env_index == index) <= 300


def test_train_step_events_match_gradient_steps_and_start_after_warmup(
    two_env_run: TwoEnvRun,
) -> None:
    recorder, result = two_env_run
    train_steps = recorder.of(TrainStep)
    assert len(train_steps) == result.summary.gradient_steps
    assert [t.gradient_steps for t in train_steps] == list(range(1, len(train_steps) + 1))
    assert all(t.env_steps >= 100 for t in train_steps)
    # One round of 4 gradient steps at each multiple of train_interval from the warm-up on.
    rounds = sorted({t.env_steps for t in train_steps})
    assert rounds == list(range(100, 601, 50))
    assert len(train_steps) == 4 * len(rounds)
    assert set(train_steps[0].metrics) >= {"loss", "epsilon"}


def test_no_train_step_is_emitted_before_the_warmup_env_steps(two_env_run: TwoEnvRun) -> None:
    recorder, _ = two_env_run
    seen_env_steps = 0
    for event in recorder.events:
        if isinstance(event, EnvStep):
            seen_env_steps = event.env_steps
        elif isinstance(event, TrainStep):
            assert seen_env_steps >= 100
            assert event.env_steps == seen_env_steps


def test_evaluation_start_and_end_come_in_pairs_at_each_eval_interval(
    two_env_run: TwoEnvRun,
) -> None:
    recorder, result = two_env_run
    evaluation_events = [e for e in recorder.events
                         if isinstance(e, (EvaluationStart, EvaluationEnd))]
    assert [type(e) for e in evaluation_events] == [EvaluationStart, EvaluationEnd] * 3
    assert [e.env_steps for e in evaluation_events] == [200, 200, 400, 400, 600, 600]
    events = recorder.events
    for i, event in enumerate(events):
        if isinstance(event, EvaluationStart):
            # Nothing but the evaluation's own steps happens between its start and its end.
            end = next(j for j in range(i + 1, len(events))
                       if not isinstance(events[j], EvaluationStep))
            assert isinstance(events[end], EvaluationEnd)
            steps = events[i + 1:end]
            assert steps and [s.episodes_done for s in steps][-1] == 2
            assert [s.eval_env_steps for s in steps] == [2 * (k + 1) for k in range(len(steps))]
            assert event.episodes == 2
    for end in recorder.of(EvaluationEnd):
        assert end.complete
        assert len(end.returns) == len(end.lengths) == 2
    best = max(e.return_mean for e in recorder.of(EvaluationEnd))
    assert result.summary.best_eval_return == best


def test_no_interrupted_event_when_no_stop_was_requested(two_env_run: TwoEnvRun) -> None:
    recorder, result = two_env_run
    assert recorder.of(Interrupted) == []
    assert result.summary.stop_reason is None


def test_an_interrupted_event_comes_just_before_end_when_a_stop_was_requested(
    tmp_path: Path,
) -> None:
    recorder = StopAt(200)
    _, result = fit(tmp_path, recorder, num_steps=1000, eval_interval=100)
    interrupted = recorder.of(Interrupted)
    assert len(interrupted) == 1
    assert interrupted[0].reason == "enough"
    assert interrupted[0].env_steps == result.summary.env_steps == 200
    assert recorder.events[-2] is interrupted[0]
    assert isinstance(recorder.events[-1], End)
    assert result.summary.stop_reason == "enough"
    # The stop at 200 came before that step's training round and evaluation: neither ran, and
    # no final evaluation followed.
    assert max(t.env_steps for t in recorder.of(TrainStep)) == 150
    assert [e.env_steps for e in recorder.of(EvaluationStart)] == [100]
    assert [e.env_steps for e in recorder.of(EvaluationEnd)] == [100]


def test_a_final_evaluation_follows_the_loop_when_the_last_step_did_not_evaluate(
    tmp_path: Path,
) -> None:
    recorder = EventRecorder()
    _, result = fit(tmp_path, recorder, num_steps=250, eval_interval=100)
    starts, ends = recorder.of(EvaluationStart), recorder.of(EvaluationEnd)
    assert [e.env_steps for e in starts] == [100, 200, 250]
    assert [e.env_steps for e in ends] == [100, 200, 250]
    assert all(e.complete for e in ends)
    events = recorder.events
    last_env_step = max(i for i, e in enumerate(events) if isinstance(e, EnvStep))
    assert events.index(starts[-1]) > last_env_step
    # then only checkpoints (best.pt if it improved, the final save), then End
    after = events[events.index(ends[-1]) + 1:]
    assert [type(e).__name__ for e in after if not isinstance(e, Checkpoint)] == ["End"]
    assert after[-2].path.endswith("checkpoint-250.pt")
    assert result.summary.final_metrics["eval/return_mean"] == ends[-1].return_mean


# --- EventProcessor dispatch -------------------------------------------------------------------


def test_processor_calls_only_the_hooks_a_subscriber_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base_calls: list[str] = []

    def base_hook(self: Subscriber, event: Any, metrics: Metrics) -> None:
        base_calls.append(type(event).__name__)

    # If the processor called non-overridden hooks, it would reach these base-class hooks.
    monkeypatch.setattr(Subscriber, "on_train_step", base_hook)
    monkeypatch.setattr(Subscriber, "on_end", base_hook)

    class OnlyEnvSteps(Subscriber):
        def __init__(self) -> None:
            self.seen: list[EnvStep] = []

        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            self.seen.append(event)

    class Inherits(OnlyEnvSteps):
        """Overrides nothing itself: the parent's override must still be called."""

    only, inherits = OnlyEnvSteps(), Inherits()
    processor = EventProcessor([only, inherits])
    processor.emit(Start(total_env_steps=10))
    processor.emit(EnvStep(env_steps=1, vector_steps=1))
    processor.emit(TrainStep(env_steps=1, gradient_steps=1, metrics={"loss": 1.0}))
    processor.emit(EvaluationStart(env_steps=1, episodes=1))
    assert base_calls == []
    assert [e.env_steps for e in only.seen] == [1]
    assert [e.env_steps for e in inherits.seen] == [1]
    # The metrics were updated even though no subscriber handles TrainStep.
    assert processor.metrics.snapshot()["train/loss"] == 1.0


def test_processor_calls_subscribers_in_order_after_updating_metrics() -> None:
    calls: list[tuple[str, int]] = []

    class Named(Subscriber):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None:
            calls.append((self.name, metrics.snapshot()["rollout/episode_length_last"]))

    processor = EventProcessor([Named("a"), Named("b")])
    processor.emit(Start(total_env_steps=10))
    processor.emit(episode(4, 1.0, 4))
    assert calls == [("a", 4), ("b", 4)]


def test_processor_close_closes_every_subscriber_and_raises_the_first_error() -> None:
    closed: list[str] = []

    class Closing(Subscriber):
        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.fail = name, fail

        def close(self) -> None:
            closed.append(self.name)
            if self.fail:
                raise RuntimeError(self.name)

    processor = EventProcessor([Closing("a", True), Closing("b", False), Closing("c", True)])
    with pytest.raises(RuntimeError, match=r"^a$"):
        processor.close()
    assert closed == ["a", "b", "c"]


# --- Metrics fed by hand -----------------------------------------------------------------------


def episode(env_steps: int, ret: float, length: int) -> EpisodeEnd:
    return EpisodeEnd(env_steps=env_steps, env_index=0, episode_return=ret,
                      episode_length=length, terminated=True)


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


def test_run_metrics_keys_are_namespaced(two_env_run: TwoEnvRun) -> None:
    _, result = two_env_run
    final = result.summary.final_metrics
    assert {
        "rollout/episode_return", "rollout/episode_length", "rollout/episode_return_last",
        "rollout/episode_length_last", "eval/return_mean", "eval/return_std",
        "eval/length_mean", "eval/best_return", "train/loss", "train/epsilon",
        "time/sps", "time/env_steps", "time/gradient_steps", "time/episodes", "time/elapsed",
    } <= set(final)
    prefixes = ("rollout/", "eval/", "train/", "time/")
    assert all(key.startswith(prefixes) for key in final), sorted(final)
    assert all(isinstance(value, float) for value in final.values())
    assert final["time/env_steps"] == 600.0
    assert final["time/gradient_steps"] == float(result.summary.gradient_steps)
    assert final["time/episodes"] == float(result.summary.episodes)
    assert final["eval/best_return"] == result.summary.best_eval_return
    assert final["time/sps"] > 0


def test_an_event_of_a_strategys_own_type_reaches_on_event() -> None:
    @dataclasses.dataclass(frozen=True)
    class RolloutDone:
        env_steps: int

    class Listener(Subscriber):
        def __init__(self) -> None:
            self.seen: list[object] = []

        def on_event(self, event: object, metrics: Metrics) -> None:
            self.seen.append(event)

    listener, recorder = Listener(), EventRecorder()
    processor = EventProcessor([listener, recorder])
    processor.emit(RolloutDone(env_steps=128))
    processor.emit(EnvStep(env_steps=1, vector_steps=1))
    assert listener.seen == [RolloutDone(env_steps=128)]  # rltrain's own events keep their hooks
    assert [type(e) for e in recorder.events] == [EnvStep]


class MisspeltHook(Subscriber):
    """Means to count episodes, but ``on_episode_ends`` is no hook: nothing calls it."""

    def __init__(self) -> None:
        self.episodes = 0

    def on_episode_ends(self, event: EpisodeEnd, metrics: Metrics) -> None:
        self.episodes += 1

    def on_something_else_entirely(self) -> None:
        """Named like a hook, close to none."""


def test_a_misspelt_hook_is_warned_about_naming_the_closest_hook(tmp_path: Path) -> None:
    # It used to be silently never called.
    subscriber = MisspeltHook()
    trainer = Trainer(num_steps=50, strategy=OffPolicyStrategy(OffPolicyConfig(warmup_steps=10)),
                      eval_interval=None, run_dir=tmp_path, callbacks=[subscriber], **QUIET)
    with pytest.warns(UserWarning) as caught:
        trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
    messages = {str(w.message): w.filename for w in caught}
    assert messages.pop(
        "MisspeltHook.on_episode_ends is not a subscriber hook, so no event calls it. Did you "
        "mean on_episode_end? (Events of a strategy's own types reach on_event.)") == __file__
    (other,) = [m for m in messages if "on_something_else_entirely" in m]
    assert "The hooks are on_checkpoint, on_end, on_env_step, on_episode_end," in other
    assert subscriber.episodes == 0


def test_a_subscriber_of_real_hooks_only_gets_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EventProcessor([EventRecorder(), Subscriber()])

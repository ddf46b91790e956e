"""The event stream of a real off-policy run (``OffPolicyStrategy``'s cadence): Start first
and End last, one EnvStep per vector step, episodes, gradient steps after the warm-up,
evaluations at each interval and at the end, Interrupted on a stop, the run's metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
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
    EventRecorder,
    Interrupted,
    Metrics,
    Start,
    TrainStep,
)
from rltrain.strategies import RLResult

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

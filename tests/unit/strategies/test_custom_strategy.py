"""examples/custom_strategy.py runs through the Trainer as docs/custom_strategy.md describes."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import QUIET, ROOT, assert_same_tensors, env_snapshot, straight_and_resumed
from typing_extensions import override

from rltrain import DQN, DQNConfig, Subscriber, Trainer
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.observe import (
    Checkpoint,
    End,
    EnvStep,
    EpisodeEnd,
    EvaluationEnd,
    EvaluationStart,
    EventRecorder,
    Interrupted,
    Metrics,
    Start,
    TrainStep,
)

EXAMPLE = ROOT / "examples" / "custom_strategy.py"


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """examples/custom_strategy.py, imported by path (examples/ is not a package)."""
    name = "rltrain_example_custom_strategy"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up in sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def small_strategy(example: ModuleType, **overrides: Any) -> Any:
    config = example.EpisodicConfig(**{
        "updates_per_step": 0.5, "warmup_steps": 200, "buffer_size": 5_000, "batch_size": 32,
        "seed": 0, **overrides})
    return example.EpisodicStrategy(config)


#: The Trainer's evaluation settings for the example strategy in these tests.
EVALUATION: dict[str, Any] = dict(eval_interval=1_000, eval_episodes=2)


def test_episodic_strategy_trains_after_each_episode_in_template_order(
        example: ModuleType, tmp_path: Path) -> None:
    recorder = EventRecorder()
    strategy = small_strategy(example)
    trainer = Trainer(num_steps=1_500, strategy=strategy, **EVALUATION, run_dir=tmp_path,
                      callbacks=[recorder], **QUIET, gradient_clip_val=10.0)
    result = trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[32, 32])))
    summary = result.summary
    events = recorder.events

    # The template: Start first, End last, no Interrupted without a stop request.
    assert isinstance(events[0], Start) and events[0].total_env_steps == 1_500
    assert isinstance(events[-1], End) and events[-1].summary == summary
    assert recorder.of(Interrupted) == [] and summary.stop_reason is None
    assert summary.env_steps == 1_500  # one sub-env: the loop stops exactly at num_steps

    # The example decides `warm` from the env steps *before* the vector step that ended the
    # episode (`before >= warmup_steps`); with one sub-env that is `episode.env_steps - 1`.
    cfg = strategy.config
    episodes = recorder.of(EpisodeEnd)
    assert episodes and summary.episodes == len(episodes)
    expected = sum(int(e.episode_length * cfg.updates_per_step) for e in episodes
                   if e.env_steps - 1 >= cfg.warmup_steps)
    assert expected > 0
    assert summary.gradient_steps == expected == len(recorder.of(TrainStep))

    # Each burst of TrainSteps directly follows the EpisodeEnd that caused it.
    burst: dict[int, int] = {}
    current: EpisodeEnd | None = None
    for event in events:
        if isinstance(event, EpisodeEnd):
            current = event
            burst[id(event)] = 0
        elif isinstance(event, TrainStep):
            assert current is not None
            burst[id(current)] += 1
        elif isinstance(event, EnvStep):
            current = None
    for episode in episodes:
        warm = episode.env_steps - 1 >= cfg.warmup_steps
        assert burst[id(episode)] == (int(episode.episode_length * 0.5) if warm else 0)

    # An evaluation at the 1,000-env-step boundary and the final one (the run's, not the
    # example's), each with its two episodes.
    starts, ends = recorder.of(EvaluationStart), recorder.of(EvaluationEnd)
    assert [e.env_steps for e in starts] == [1_000, 1_500] and len(ends) == 2
    assert events.index(starts[0]) < events.index(ends[0])
    assert all(e.complete and len(e.returns) == 2 for e in ends)
    assert summary.best_eval_return == pytest.approx(max(e.return_mean for e in ends))

    assert (tmp_path / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "summary.json").is_file()


def test_stop_from_another_thread_ends_the_episodic_strategy_early(
        example: ModuleType, tmp_path: Path) -> None:
    recorder = EventRecorder()
    trainer = Trainer(num_steps=1_000_000, strategy=small_strategy(example), **EVALUATION,
                      run_dir=tmp_path, callbacks=[recorder], **QUIET)
    past_warmup = threading.Event()

    class SignalAfterWarmup(Subscriber):
        @override
        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            if event.env_steps >= 400:
                past_warmup.set()

    trainer.callbacks.append(SignalAfterWarmup())
    def stop_once_past_warmup() -> None:
        if past_warmup.wait(60):
            trainer.interrupter.stop("stopped by test")

    stopper = threading.Thread(target=stop_once_past_warmup)
    stopper.start()
    try:
        result = trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[32, 32])))
    finally:
        past_warmup.set()
        stopper.join()

    summary = result.summary
    assert summary.stop_reason == "stopped by test"
    assert 400 <= summary.env_steps < 1_000_000
    interrupted = recorder.of(Interrupted)
    assert [e.reason for e in interrupted] == ["stopped by test"]
    assert recorder.events[-2] is interrupted[0] and isinstance(recorder.events[-1], End)
    assert (tmp_path / "checkpoints" / "last.pt").is_file()


def test_a_custom_strategy_gets_checkpoint_interval_best_and_final_evaluation(
        example: ModuleType, tmp_path: Path) -> None:
    """The example writes none of these: the run object applies the Trainer's settings."""
    recorder = EventRecorder()
    trainer = Trainer(num_steps=1_200, strategy=small_strategy(example), eval_interval=500,
                      eval_episodes=2, checkpoint_interval=300, keep_last_checkpoints=10,
                      run_dir=tmp_path, callbacks=[recorder], **QUIET)
    result = trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[32, 32])))
    assert [e.env_steps for e in recorder.of(EvaluationStart)] == [500, 1_000, 1_200]
    saves = [(e.env_steps, e.best) for e in recorder.of(Checkpoint)]
    assert [steps for steps, best in saves if not best] == [300, 600, 900, 1_200]
    manifest = Checkpointer(tmp_path / "checkpoints").manifest()
    assert [e.file for e in manifest.checkpoints] == [
        f"checkpoint-{n}.pt" for n in (300, 600, 900, 1_200)]
    assert manifest.best is not None
    assert manifest.best.eval_return == pytest.approx(result.summary.best_eval_return)
    assert [steps for steps, best in saves if best][-1] == manifest.best.env_steps


@pytest.fixture(scope="module")
def episodic_resume(example: ModuleType, tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
        Trainer(num_steps=num_steps, strategy=small_strategy(example), **EVALUATION,
                run_dir=run_dir, **QUIET).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[32])),
                                              ckpt_path=ckpt_path)

    straight, split = straight_and_resumed(fit, tmp_path_factory, 1_200)
    return (read_checkpoint(straight / "checkpoints" / "last.pt"),
            read_checkpoint(split / "checkpoints" / "last.pt"))


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "metrics", "progress"])
def test_a_custom_strategy_resumes_bit_for_bit(
        episodic_resume: tuple[dict[str, Any], dict[str, Any]], part: str) -> None:
    straight, split = episodic_resume
    if part == "runner":
        assert env_snapshot(straight["runner"].pop("envs")) == env_snapshot(
            split["runner"].pop("envs"))
    assert_same_tensors(straight[part], split[part], part)

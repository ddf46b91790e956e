"""Exact resume: N env steps straight equal N/2, stop, resume, N/2 — bit for bit."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, small, straight_and_resumed

from rltrain import DQN, DQNConfig, OffPolicyStrategy, Trainer
from rltrain.checkpoint import Checkpointer, atomic_save, read_checkpoint
from rltrain.observe import Checkpoint, EvaluationEnd, EventRecorder

ENV = "CartPole-v1"
N = 2_400


def strategy(**overrides: Any) -> OffPolicyStrategy:
    return small(**{
        "warmup_steps": 300, "train_interval": 100, "train_steps": 20, "batch_size": 32,
        "buffer_size": 10_000, "seed": 7, **overrides})


#: The Trainer's evaluation settings in these tests (unless a test says otherwise).
EVALUATION: dict[str, Any] = dict(eval_interval=600, eval_episodes=3)


def agent() -> DQN:
    return DQN(DQNConfig(hidden_sizes=[32, 32], exploration_steps=1_500,
                         target_update_interval=40))


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None, *,
        eval_interval: int | None = 600, eval_episodes: int = 3,
        callbacks: tuple[Any, ...] = (), **overrides: Any) -> tuple[DQN, Trainer]:
    trainer = Trainer(num_steps=num_steps, strategy=strategy(**overrides), run_dir=run_dir,
                      eval_interval=eval_interval, eval_episodes=eval_episodes,
                      callbacks=callbacks, **QUIET, gradient_clip_val=10.0)
    trained = agent()
    trainer.fit(ENV, trained, ckpt_path=ckpt_path)
    return trained, trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, N)
    return {"straight": straight, "split": split}


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                 "metrics", "progress"])
def test_stop_and_resume_equals_straight_run_bit_for_bit(runs: dict[str, Path],
                                                         part: str) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")
    split = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == N
    if part == "runner":
        assert env_snapshot(straight["runner"].pop("envs")) == env_snapshot(
            split["runner"].pop("envs"))
    assert_same_tensors(straight[part], split[part], part)


def test_resumed_run_reports_the_same_final_metrics(runs: dict[str, Path]) -> None:
    import json
    a = json.loads((runs["straight"] / "summary.json").read_text())["final_metrics"]
    b = json.loads((runs["split"] / "summary.json").read_text())["final_metrics"]
    timeless = {k for k in a if not k.startswith("time/")} | {"time/env_steps",
                                                             "time/gradient_steps"}
    assert {k: a[k] for k in timeless} == {k: b[k] for k in timeless}


def test_the_counters_are_saved_once_and_the_metrics_read_them(runs: dict[str, Path]) -> None:
    import dataclasses
    import json

    from rltrain.types import Progress

    counters = {f.name for f in dataclasses.fields(Progress)}
    for run in runs.values():
        state = read_checkpoint(run / "checkpoints" / "last.pt")
        assert not counters & set(state["metrics"]), sorted(state["metrics"])
        summary = json.loads((run / "summary.json").read_text())
        final = summary["final_metrics"]
        for name in ("env_steps", "gradient_steps", "episodes"):
            assert final[f"time/{name}"] == summary[name] == state["progress"][name], name
    assert (read_checkpoint(runs["split"] / "checkpoints" / "last.pt")["progress"]
            == read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")["progress"])


def test_stop_in_the_middle_of_a_training_round_resumes_exactly(tmp_path: Path) -> None:
    straight, _ = fit(tmp_path / "straight", 900)

    class StopMidRound(EventRecorder):
        def on_train_step(self, event: Any, metrics: Any) -> None:
            if event.gradient_steps == 50:  # round 3 of 20 steps each is half done
                trainer.interrupter.stop("mid-round")

    trainer = Trainer(num_steps=900, strategy=strategy(), **EVALUATION,
                      run_dir=tmp_path / "split", callbacks=[StopMidRound()], **QUIET,
                      gradient_clip_val=10.0)
    trainer.fit(ENV, agent())
    state = read_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert state["progress"]["pending_gradient_steps"] == 10
    resumed, _ = fit(tmp_path / "split", 900, ckpt_path="last")
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name


def test_resume_with_changed_evaluation_settings_is_allowed(tmp_path: Path) -> None:
    fit(tmp_path, 400)  # evaluations every 600 env steps over 3 episodes
    recorder = EventRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # allowed silently: no warning, no error
        fit(tmp_path, 800, ckpt_path="last", eval_interval=500, eval_episodes=2,
            callbacks=(recorder,))
    assert read_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]["env_steps"] == 800
    # The resumed run evaluates with its own settings: at 500 env steps, and at the end.
    ends = recorder.of(EvaluationEnd)
    assert [e.env_steps for e in ends] == [500, 800]
    assert all(len(e.returns) == 2 for e in ends)


def test_resume_with_a_changed_learning_setting_names_the_key(tmp_path: Path) -> None:
    fit(tmp_path, 400)
    with pytest.raises(ValueError, match="strategy/batch_size: 32 in the checkpoint, 16 now"):
        fit(tmp_path, 800, ckpt_path="last", batch_size=16)


def test_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No checkpoint: No intact last checkpoint"):
        fit(tmp_path, 400, ckpt_path="last")


def test_best_checkpoint_holds_the_best_evaluation(tmp_path: Path) -> None:
    recorder = EventRecorder()
    trainer = Trainer(num_steps=N, strategy=strategy(), **EVALUATION, run_dir=tmp_path,
                      callbacks=[recorder], **QUIET, gradient_clip_val=10.0)
    trainer.fit(ENV, agent())
    evaluations = recorder.of(EvaluationEnd)
    best = max(evaluations, key=lambda e: e.return_mean)
    state = read_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert state["metrics"]["best_eval_return"] == pytest.approx(best.return_mean)
    assert state["progress"]["env_steps"] == best.env_steps


class Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(MARKER),))


MARKER = ""


def test_a_planted_pickle_never_runs_and_the_error_names_the_file(tmp_path: Path) -> None:
    global MARKER
    fit(tmp_path, 400)
    last = tmp_path / "checkpoints" / "last.pt"
    state = read_checkpoint(last)
    MARKER = str(tmp_path / "pwned")
    # 1. A pickled object in the checkpoint itself: torch.load(weights_only=True) refuses it.
    state["agent_class"] = Boom()
    evil = tmp_path / "evil.pt"
    torch.save(state, evil)
    with pytest.raises(ValueError, match=r"evil\.pt"):
        read_checkpoint(evil)
    # 2. A pickle in the environment state: the allow-listed unpickler refuses it.
    state = read_checkpoint(last)
    state["runner"]["envs"] = torch.frombuffer(bytearray(pickle.dumps(Boom())), dtype=torch.uint8)
    planted = tmp_path / "planted.pt"
    atomic_save(state, planted)
    with pytest.raises(ValueError, match=r"planted\.pt: refusing .*pathlib"):
        fit(tmp_path, 800, ckpt_path=str(planted))
    assert not Path(MARKER).exists()


def test_a_corrupt_last_checkpoint_is_reported_and_resume_falls_back(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=600, strategy=strategy(), **EVALUATION, run_dir=tmp_path,
                      **QUIET, checkpoint_interval=200, keep_last_checkpoints=2,
                      gradient_clip_val=10.0)
    trainer.fit(ENV, agent())
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.glob("checkpoint-*.pt")) == [
        "checkpoint-400.pt", "checkpoint-600.pt"]  # retention: the last 2
    newest = folder / "checkpoint-600.pt"
    data = newest.read_bytes()
    newest.unlink()  # break the last.pt hard link, then truncate the newest file
    newest.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"checkpoint-600\.pt is corrupt: .*truncated"):
        read_checkpoint(newest)
    with pytest.warns(UserWarning, match=r"Skipping checkpoint .*checkpoint-600\.pt"):
        path = Checkpointer(folder).resolve("last")
    assert path.name == "checkpoint-400.pt"
    with pytest.warns(UserWarning, match="Skipping checkpoint"):
        fit(tmp_path, 800, ckpt_path="last")
    assert read_checkpoint(folder / "last.pt")["progress"]["env_steps"] == 800


def test_checkpoint_events_report_size_and_seconds(tmp_path: Path) -> None:
    recorder = EventRecorder()
    Trainer(num_steps=600, strategy=strategy(), **EVALUATION, run_dir=tmp_path,
            callbacks=[recorder], **QUIET, checkpoint_interval=300).fit(ENV, agent())
    saves = [e for e in recorder.of(Checkpoint) if not e.best]
    assert [e.env_steps for e in saves] == [300, 600]
    for event in saves:
        assert event.size_bytes == Path(event.path).stat().st_size
        assert event.seconds > 0


def test_async_envs_are_saved_in_their_workers_and_resume_exactly(tmp_path: Path) -> None:
    """Each worker pickles its sub-env at a checkpoint and takes it back on resume (the
    allow-listed unpickling, in the worker): the resumed run is the straight one."""
    settings: dict[str, Any] = dict(vectorization="async", num_envs=2, eval_interval=None)
    straight, split = tmp_path / "straight", tmp_path / "split"
    fit(straight, 600, **settings)
    fit(split, 400, **settings)
    assert len(read_checkpoint(split / "checkpoints" / "last.pt")["runner"]["pickled_envs"]) == 2
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="The environments")
        fit(split, 600, ckpt_path="last", **settings)
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert env_snapshot(a["runner"].pop("pickled_envs")) == env_snapshot(
        b["runner"].pop("pickled_envs"))
    for part in ("agent", "optimization", "buffer", "runner", "random", "progress"):
        assert_same_tensors(a[part], b[part], part)


def test_resume_with_another_gradient_clip_is_refused(tmp_path: Path) -> None:
    fit(tmp_path, 400)  # gradient_clip_val=10.0
    trainer = Trainer(num_steps=800, strategy=strategy(), **EVALUATION, run_dir=tmp_path,
                      **QUIET)
    with pytest.raises(ValueError,
                       match=r"optim/gradient_clip_val: 10\.0 in the checkpoint, 'none' now"):
        trainer.fit(ENV, agent(), ckpt_path="last")


def test_a_run_resumed_from_best_starts_a_new_timeline_for_last(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=N, strategy=strategy(), **EVALUATION, run_dir=tmp_path,
                      **QUIET, checkpoint_interval=600, gradient_clip_val=10.0)
    trainer.fit(ENV, agent())
    folder = tmp_path / "checkpoints"
    best_steps = read_checkpoint(folder / "best.pt")["progress"]["env_steps"]
    resumed = Trainer(num_steps=best_steps + 100, strategy=strategy(), **EVALUATION,
                      run_dir=tmp_path, **QUIET, gradient_clip_val=10.0)
    resumed.fit(ENV, agent(), ckpt_path="best")
    last = Checkpointer(folder).resolve("last")
    assert read_checkpoint(last)["progress"]["env_steps"] == best_steps + 100


@pytest.mark.parametrize("how", ["fit(ckpt_path='last')", "rltrain fit --resume RUN_DIR",
                                 "rltrain fit --resume FILE"])
def test_a_resume_reads_its_checkpoint_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            how: str) -> None:
    from rltrain.cli import main

    run_dir = tmp_path / "run"
    if how.startswith("rltrain"):
        tiny = [f"trainer.run_dir={run_dir}", "trainer.eval_interval=null", "trainer.logger=false",
                "trainer.enable_progress_bar=false", "trainer.enable_console=false",
                "agent.hidden_sizes=[16]", "strategy.warmup_steps=100"]
        assert main(["fit", "trainer.num_steps=300", *tiny]) == 0
    else:
        fit(run_dir, 300, eval_interval=None)
    checkpoint = Checkpointer(run_dir / "checkpoints").resolve("last")
    reads: list[Path] = []
    load = torch.load

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(Path(path))
        return load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counted)
    if how == "fit(ckpt_path='last')":
        fit(run_dir, 600, ckpt_path="last", eval_interval=None)
    else:
        where = str(run_dir) if how.endswith("RUN_DIR") else str(checkpoint)
        assert main(["fit", "--resume", where, "trainer.num_steps=600"]) == 0
    assert reads == [checkpoint]


@pytest.mark.parametrize("resuming", [False, True])
def test_a_fit_sets_the_agent_up_once(tmp_path: Path, resuming: bool) -> None:
    calls: list[str] = []

    class Counted(DQN):
        def setup(self, **kwargs: Any) -> None:
            calls.append("setup")
            super().setup(**kwargs)

        def build(self, *args: Any) -> None:
            calls.append("build")
            super().build(*args)

    def counted_fit(num_steps: int, ckpt_path: str | None = None) -> None:
        trainer = Trainer(num_steps=num_steps, strategy=strategy(), run_dir=tmp_path,
                          eval_interval=None, **QUIET, gradient_clip_val=10.0)
        trainer.fit(ENV, Counted(DQNConfig(hidden_sizes=[32, 32], exploration_steps=1_500,
                                           target_update_interval=40)), ckpt_path=ckpt_path)

    if resuming:
        counted_fit(400)
        calls.clear()
    counted_fit(800 if resuming else 400, "last" if resuming else None)
    assert calls == ["setup", "build"]

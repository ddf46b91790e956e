"""Training that fails part-way: a :class:`~rltrain.errors.TrainingError` naming where, an
emergency checkpoint when the state allows one, and a run that resumes from it.

Real environments, agents, callbacks and files throughout; the full disk is a real tmpfs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from conftest import ROOT, NanLossDQN, assert_same_tensors, dqn, small, trainer

from rltrain import DQN, DQNConfig, Subscriber
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.envs.errors import SubEnvError
from rltrain.errors import TrainingError
from rltrain.observe import EnvStep, EpisodeEnd, EventRecorder, Metrics, Start, TrainStep
from rltrain.runtime.seeding import EVAL_SEED_OFFSET

# With small(): gradient rounds of 2 steps at env steps 50, 75, 100, ... (warm-up 50, every 25).


class RaiseAt(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole that raises ``RuntimeError`` at its ``at``-th step when it was reset with
    ``fail_seed``: the runner resets sub-env ``i`` with ``seed + i`` (the evaluator with
    ``seed + EVAL_SEED_OFFSET + i``), so this picks one sub-env, in any process."""

    def __init__(self, env: gym.Env[Any, Any], at: int, fail_seed: int) -> None:
        super().__init__(env)
        self.at, self.fail_seed = at, fail_seed
        self.armed, self.steps = False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:  # autoresets pass no seed: the sub-env keeps what it is
            self.armed = seed == self.fail_seed
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        if self.armed:
            self.steps += 1
            if self.steps == self.at:
                raise RuntimeError(f"boom at step {self.at}")
        return self.env.step(action)


def raising_cartpole(at: int, fail_seed: int) -> gym.Env[Any, Any]:
    return RaiseAt(gym.make("CartPole-v1"), at, fail_seed)


def raising(at: int, fail_seed: int) -> Callable[[], gym.Env[Any, Any]]:
    """A picklable factory (module-level function): async workers can make it."""
    return functools.partial(raising_cartpole, at, fail_seed)


class DieAt(RaiseAt):
    """The sub-env reset with ``fail_seed`` has its worker process killed (SIGKILL, as the OOM
    killer does) at its ``at``-th step instead of raising."""

    def step(self, action: Any) -> Any:
        if self.armed and self.steps + 1 == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


def dying_cartpole(at: int, fail_seed: int) -> gym.Env[Any, Any]:
    return DieAt(gym.make("CartPole-v1"), at, fail_seed)


class FailingDQN(DQN):
    """A DQN whose ``training_step`` raises at gradient step ``fail_at`` (0-based), before any
    optimizer step or (``after_update``) after a whole one."""

    def __init__(self, fail_at: int | None, *, after_update: bool = False) -> None:
        super().__init__(DQNConfig(hidden_sizes=[16]))
        self.fail_at, self.after_update = fail_at, after_update

    def training_step(self, batch: Any, optim: Any) -> Any:
        if self.progress.gradient_steps == self.fail_at:
            if self.after_update:
                super().training_step(batch, optim)
                raise RuntimeError("boom after an update")
            raise RuntimeError("boom before an update")
        return super().training_step(batch, optim)


def failure(run: Callable[[], object]) -> TrainingError:
    with pytest.raises(TrainingError) as info:
        run()
    return info.value


def checkpoints(run_dir: Path) -> Checkpointer:
    return Checkpointer(run_dir / "checkpoints")


def listed(run_dir: Path) -> list[str]:
    """The checkpoint files the manifest lists, oldest first."""
    manifest = json.loads((run_dir / "checkpoints" / "manifest.json").read_text())
    return [entry["file"] for entry in manifest["checkpoints"]]


def assert_emergency_checkpoint(error: TrainingError, run_dir: Path, env_steps: int
                                ) -> dict[str, Any]:
    """The error names an emergency checkpoint at ``env_steps`` that is ``last`` and loads;
    returns its state."""
    expected = run_dir / "checkpoints" / f"checkpoint-{env_steps}.pt"
    assert error.checkpoint == expected, str(error)
    assert f"An emergency checkpoint of the state before the failure was saved: {expected} " \
           "(it is now 'last')." in str(error)
    assert str(error).endswith("Fix the cause, then resume with ckpt_path='last' "
                               "(rltrain fit --resume RUN_DIR).")
    assert checkpoints(run_dir).resolve("last") == expected
    assert listed(run_dir)[-1] == expected.name
    state = read_checkpoint(expected)
    assert state["progress"]["env_steps"] == env_steps
    return state


def tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested checkpoint part."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from tensors(value)


# 1. An environment that raises -------------------------------------------------------------


def test_a_sub_env_that_raises_is_named_and_the_run_resumes_from_its_emergency_checkpoint(
        tmp_path: Path) -> None:
    # Sub-env 2 of 3 raises at its 30th step: vector step 30 fails after 29 (87 env steps),
    # with rounds of 2 gradient steps done at env steps 51 and 75.
    error = failure(lambda: trainer(tmp_path, 150, strategy=small(num_envs=3)).fit(
        raising(at=30, fail_seed=2), dqn()))
    assert (error.phase, error.env_steps, error.sub_env) == ("collect", 87, 2)
    message = str(error)
    assert message.startswith(
        "Training failed after 87 env steps (29 vector steps, 4 gradient steps), while "
        "collecting experience, in sub-env 2: sub-env 2 raised RuntimeError in step(): boom "
        "at step 30. An emergency checkpoint"), message
    assert "The environments were not saved with it" in message
    cause = error.__cause__
    assert isinstance(cause, SubEnvError) and cause.index == 2
    assert isinstance(cause.__cause__, RuntimeError)
    assert str(cause.__cause__) == "boom at step 30"

    state = assert_emergency_checkpoint(error, tmp_path, 87)
    assert state["progress"]["vector_steps"] == 29
    assert state["progress"]["gradient_steps"] == 4
    assert state["runner"]["envs"] is None  # stepped part-way: not saved

    # Fixed (an env that no longer raises), the run resumes at env step 87 and ends at 150.
    recorder = EventRecorder()
    with pytest.warns(UserWarning, match="environments' state is not in this checkpoint"):
        result = trainer(tmp_path, 150, strategy=small(num_envs=3),
                         callbacks=[recorder]).fit("CartPole-v1", dqn(), ckpt_path="last")
    assert [e.start_env_steps for e in recorder.of(Start)] == [87]
    steps = [e.env_steps for e in recorder.of(EnvStep)]
    assert steps == list(range(90, 151, 3))
    assert result.summary.env_steps == 150
    assert result.summary.gradient_steps == 4 + 6  # rounds at 100, 125 and 150
    last = read_checkpoint(checkpoints(tmp_path).resolve("last"))
    assert last["progress"]["env_steps"] == 150


@pytest.mark.filterwarnings("ignore:.*ERROR:UserWarning")  # gymnasium logs the worker's error
def test_a_sub_env_failure_in_an_async_worker_keeps_its_index_and_phase(tmp_path: Path) -> None:
    error = failure(lambda: trainer(tmp_path, 150, strategy=small(
        num_envs=3, vectorization="async")).fit(raising(at=10, fail_seed=2), dqn()))
    assert (error.phase, error.env_steps, error.sub_env) == ("collect", 27, 2)
    assert ("while collecting experience, in sub-env 2: sub-env 2 raised RuntimeError in "
            "step(): boom at step 10.") in str(error)
    assert isinstance(error.__cause__, SubEnvError) and error.__cause__.index == 2
    assert_emergency_checkpoint(error, tmp_path, 27)


def test_an_async_worker_that_dies_is_named_with_its_exit_status(tmp_path: Path) -> None:
    """A worker process killed from outside (the OOM killer's SIGKILL) closes its pipe: the
    error names the sub-env and how its process ended, not a bare ``EOFError``."""
    error = failure(lambda: trainer(tmp_path, 150, strategy=small(
        num_envs=3, vectorization="async")).fit(functools.partial(dying_cartpole, 10, 1), dqn()))
    assert error.phase == "collect" and error.sub_env == 1
    assert ("while collecting experience, in sub-env 1: sub-env 1's worker process died "
            "(killed by SIGKILL;") in str(error), str(error)
    assert "EOFError" not in str(error)


# 2. The agent raising in training_step -----------------------------------------------------


def test_one_gradient_step_is_counted_in_the_singular(tmp_path: Path) -> None:
    error = failure(lambda: trainer(tmp_path, 150).fit("CartPole-v1", FailingDQN(1)))
    assert "vector steps, 1 gradient step), while training" in str(error), str(error)


def test_an_agent_failing_before_its_update_is_saved_and_resumes(tmp_path: Path) -> None:
    # Gradient step 3 (the 2nd of the round at env step 75) raises before optim.step.
    error = failure(lambda: trainer(tmp_path, 150).fit("CartPole-v1", FailingDQN(3)))
    assert (error.phase, error.env_steps, error.sub_env) == ("train", 75, None)
    assert str(error).startswith(
        "Training failed after 75 env steps (75 vector steps, 3 gradient steps), while "
        "training: RuntimeError: boom before an update. An emergency checkpoint"), str(error)
    assert "environments were not saved" not in str(error)
    state = assert_emergency_checkpoint(error, tmp_path, 75)
    assert state["progress"]["gradient_steps"] == 3
    assert state["progress"]["pending_gradient_steps"] == 1  # the failed step is still owed
    assert state["runner"]["envs"] is not None  # the envs were in step: saved

    result = trainer(tmp_path, 150).fit("CartPole-v1", FailingDQN(None), ckpt_path="last")
    assert result.summary.env_steps == 150
    assert result.summary.gradient_steps == 3 + 1 + 6  # the owed step, then 100, 125, 150



def test_a_run_resumed_from_a_train_phase_emergency_checkpoint_equals_a_straight_run(
        tmp_path: Path) -> None:
    """The checkpoint holds "the state before the failure": the envs were in step (saved), so
    resuming from it continues exactly, bit for bit, like a run that never failed."""
    straight = FailingDQN(None)
    trainer(tmp_path / "straight", 150).fit("CartPole-v1", straight)
    failure(lambda: trainer(tmp_path / "split", 150).fit("CartPole-v1", FailingDQN(3)))
    resumed = FailingDQN(None)
    trainer(tmp_path / "split", 150).fit("CartPole-v1", resumed, ckpt_path="last")
    a = read_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = read_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    for part in ("buffer", "random"):
        assert_same_tensors(a[part], b[part], part)
    assert_same_tensors(straight.state_dict(), resumed.state_dict(), "agent")

def test_an_agent_failing_after_an_update_saves_nothing_and_keeps_the_last_checkpoint(
        tmp_path: Path) -> None:
    error = failure(lambda: trainer(tmp_path, 150, checkpoint_interval=50).fit(
        "CartPole-v1", FailingDQN(3, after_update=True)))
    previous = tmp_path / "checkpoints" / "checkpoint-50.pt"
    assert (error.phase, error.env_steps, error.checkpoint) == ("train", 75, None)
    assert ("while training: RuntimeError: boom after an update. No emergency checkpoint was "
            "saved: the failure came in the middle of a gradient step, after part of it was "
            f"applied. The last checkpoint, {previous}, is intact.") in str(error), str(error)
    assert not (tmp_path / "checkpoints" / "checkpoint-75.pt").exists()
    assert listed(tmp_path) == ["checkpoint-50.pt"]
    assert checkpoints(tmp_path).resolve("last") == previous
    assert read_checkpoint(previous)["progress"]["env_steps"] == 50


# 3. A callback raising ---------------------------------------------------------------------


class FailingCallback(Subscriber):
    """Raises in ``on_episode_end`` at the first episode end, or in ``on_train_step`` at
    gradient step 3; ``at`` is the env steps then."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.at: int | None = None

    def on_episode_end(self, event: EpisodeEnd, metrics: Metrics) -> None:
        if self.hook == "on_episode_end":
            self.at = event.env_steps
            raise RuntimeError("callback boom")

    def on_train_step(self, event: TrainStep, metrics: Metrics) -> None:
        if self.hook == "on_train_step" and event.gradient_steps == 3:
            self.at = event.env_steps
            raise RuntimeError("callback boom")


@pytest.mark.parametrize(("hook", "phase"), [("on_episode_end", "collect"),
                                             ("on_train_step", "train")])
def test_a_failing_callback_ends_the_run_with_an_emergency_checkpoint(
        tmp_path: Path, hook: str, phase: str) -> None:
    callback = FailingCallback(hook)
    error = failure(lambda: trainer(tmp_path, 150, callbacks=[callback]).fit(
        "CartPole-v1", dqn()))
    assert callback.at is not None
    assert (error.phase, error.env_steps, error.sub_env) == (phase, callback.at, None)
    assert ": RuntimeError: callback boom. An emergency checkpoint" in str(error), str(error)
    state = assert_emergency_checkpoint(error, tmp_path, callback.at)
    assert state["runner"]["envs"] is not None
    if hook == "on_train_step":
        # The gradient step was complete when its event went out: 3 done, 1 still owed.
        assert state["progress"]["gradient_steps"] == 3
        assert state["progress"]["pending_gradient_steps"] == 1



def test_a_failure_in_a_steps_events_still_owes_that_steps_training_round(
        tmp_path: Path) -> None:
    """The emergency checkpoint after vector step 75 (a round boundary) counts that step, so it
    must owe its round: the resumed run then does the 10 gradient steps of a straight run."""

    class FailAt75(Subscriber):
        def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
            if event.env_steps == 75:
                raise RuntimeError("callback boom")

    error = failure(lambda: trainer(tmp_path, 150, callbacks=[FailAt75()]).fit(
        "CartPole-v1", dqn()))
    assert (error.phase, error.env_steps) == ("collect", 75)
    assert_emergency_checkpoint(error, tmp_path, 75)
    result = trainer(tmp_path, 150).fit("CartPole-v1", dqn(), ckpt_path="last")
    assert result.summary.env_steps == 150
    assert result.summary.gradient_steps == 10  # rounds at 50, 75, 100, 125 and 150

# 4. The evaluation environment raising -----------------------------------------------------


def test_an_evaluation_env_that_raises_is_reported_as_evaluating(tmp_path: Path) -> None:
    # Only the evaluator's sub-env 1 (reset with seed 0 + EVAL_SEED_OFFSET + 1) raises, at the
    # 5th step of the first evaluation (env step 100); the training env is never armed.
    env = raising(at=5, fail_seed=EVAL_SEED_OFFSET + 1)
    error = failure(lambda: trainer(tmp_path, 200, eval_interval=100, eval_episodes=2).fit(
        env, dqn()))
    assert (error.phase, error.env_steps) == ("evaluate", 100)
    assert str(error).startswith(
        "Training failed after 100 env steps (100 vector steps, 6 gradient steps), while "
        "evaluating"), str(error)
    assert "sub-env 1 raised RuntimeError in step(): boom at step 5." in str(error)
    assert "environments were not saved" not in str(error)  # the training envs are fine
    state = assert_emergency_checkpoint(error, tmp_path, 100)
    assert state["progress"]["gradient_steps"] == 6
    assert state["runner"]["envs"] is not None


# 5. A non-finite loss with on_nan_loss="raise" ---------------------------------------------


def test_a_nan_loss_raises_with_finite_weights_in_the_emergency_checkpoint(
        tmp_path: Path) -> None:
    error = failure(lambda: trainer(tmp_path, 150, on_nan_loss="raise").fit(
        "CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16]))))
    assert isinstance(error.__cause__, FloatingPointError)
    assert (error.phase, error.env_steps) == ("train", 75)
    assert ("while training: FloatingPointError: Non-finite loss: the 'q' loss is nan at "
            "gradient step 3.") in str(error)
    state = assert_emergency_checkpoint(error, tmp_path, 75)
    assert state["progress"]["gradient_steps"] == 2
    weights = list(tensors(state["agent"]))
    assert weights and all(torch.isfinite(t).all() for t in weights)
    moments = [t for t in tensors(state["optimization"]) if t.is_floating_point()]
    assert moments and all(torch.isfinite(t).all() for t in moments)


# 6. A full disk ----------------------------------------------------------------------------

#: A CLI run of the small settings: checkpoints every 50 env steps, of 36,352 bytes at env step
#: 50 and 39,104 at 100 (the replay buffer grows them). The run directory's other files take
#: 5 tmpfs pages, so 80 KiB holds the first checkpoint and not the second.
DISK_KIB = 80
CLI_ARGS = ["trainer.num_steps=300", "trainer.eval_interval=null",
            "trainer.return_threshold=null", "trainer.logger=false",
            "trainer.enable_progress_bar=false", "trainer.enable_console=false",
            "trainer.enable_metrics_file=false", "trainer.checkpoint_interval=50",
            "trainer.num_threads=1", "strategy.warmup_steps=50", "strategy.train_interval=25",
            "strategy.train_steps=2", "strategy.batch_size=16", "strategy.buffer_size=1000",
            "agent.hidden_sizes=[16]"]

#: Mounts a tmpfs of "$1" at "$2" in a private mount namespace, runs the rest, copies the disk's
#: files to "$3" (the namespace and its tmpfs end with the shell) and exits with the command's
#: status.
UNSHARE_SCRIPT = ('size=$1 disk=$2 copy=$3; shift 3; '
                  'mount -t tmpfs -o size="$size" tmpfs "$disk" || exit 97; '
                  '"$@"; status=$?; cp -a "$disk/." "$copy/"; exit $status')


def _works(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def mount_method(probe: Path) -> str | None:
    """``"direct"`` when this process may mount a tmpfs, ``"unshare"`` when an unprivileged
    user namespace may, else None."""
    probe.mkdir()
    if os.geteuid() == 0 and _works(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs",
                                     str(probe)]):
        _works(["umount", str(probe)])
        return "direct"
    if shutil.which("unshare") and _works(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
             'mount -t tmpfs -o size=16k tmpfs "$0"', str(probe)]):
        return "unshare"
    return None


@contextlib.contextmanager
def fit_on_a_small_disk(tmp_path: Path, size_kib: int, args: list[str]
                        ) -> Iterator[tuple[subprocess.CompletedProcess[str], Path, Path]]:
    """``rltrain fit`` with its run directory on a tmpfs of ``size_kib``; yields the finished
    process, the run directory it wrote and where its files can be read now (the disk itself,
    still mounted, or a copy of it when the tmpfs lived in the process's own namespace)."""
    method = mount_method(tmp_path / "probe")
    if method is None:
        pytest.skip("cannot mount a tmpfs here: not root, and `unshare --user --map-root-user "
                    "--mount` is unavailable or not permitted (unprivileged user namespaces)")
    disk = tmp_path / "disk"
    disk.mkdir()
    command = [sys.executable, "-m", "rltrain.cli", "fit", f"trainer.run_dir={disk / 'run'}",
               *args]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    if method == "direct":
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(disk)],
                       check=True)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                  cwd=ROOT, env=environment)
            yield done, disk / "run", disk / "run"
        finally:
            subprocess.run(["umount", str(disk)], check=True)
    else:
        copy = tmp_path / "copy"
        copy.mkdir()
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", UNSHARE_SCRIPT,
             "sh", f"{size_kib}k", str(disk), str(copy), *command],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=environment)
        assert done.returncode != 97, done.stderr
        yield done, disk / "run", copy / "run"


@pytest.mark.slow
def test_a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    with fit_on_a_small_disk(tmp_path, DISK_KIB, CLI_ARGS) as (done, run_dir, files):
        stderr = done.stderr
        folder = run_dir / "checkpoints"
        assert done.returncode == 3, stderr
        assert "Traceback" not in stderr
        assert "rltrain: Training failed after 100 env steps" in stderr
        assert "while saving a checkpoint" in stderr
        assert (f"Cannot write {folder / 'checkpoint-100.pt'}: No space left on device"
                in stderr), stderr
        assert ("No emergency checkpoint was saved: the failure was in a save. The last "
                f"checkpoint, {folder / 'checkpoint-50.pt'}, is intact.") in stderr

        # After the process: the manifest lists the checkpoint of env step 50 only, which is
        # whole (its SHA-256), loads and is `last`; no temporary file is left behind.
        saved = files / "checkpoints"
        manifest = json.loads((saved / "manifest.json").read_text())
        assert [e["file"] for e in manifest["checkpoints"]] == ["checkpoint-50.pt"]
        assert manifest["last"] == "checkpoint-50.pt"
        entry = manifest["checkpoints"][0]
        data = (saved / "checkpoint-50.pt").read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert len(data) == entry["bytes"]
        assert Checkpointer(saved).resolve("last") == saved / "checkpoint-50.pt"
        assert read_checkpoint(saved / "checkpoint-50.pt")["progress"]["env_steps"] == 50
        assert not (saved / "checkpoint-100.pt").exists()
        left = [str(Path(top) / name) for top, _, names in os.walk(files) for name in names
                if name.endswith(".tmp")]
        assert left == []


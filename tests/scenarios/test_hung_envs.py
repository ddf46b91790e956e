"""Hung environments: ``trainer.env_step_timeout``, and SIGTERM / a second Ctrl-C ending a run
whose env step never returns (real `rltrain fit` processes, real signals, real worker
processes)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, TESTS

from rltrain import DQN, DQNConfig, Trainer
from rltrain.config.trainer_config import TrainerConfig
from rltrain.envs.errors import EnvError, EnvStepTimeout
from rltrain.errors import TrainingError
from rltrain.runtime.watchdog import STOP_GRACE, STUCK_MARGIN
from rltrain.types import Progress

pytestmark = [pytest.mark.slow,  # scenario tests: out of ``pytest -m "not slow"``
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads /proc; SIGALRM and worker ends are Linux's")]

#: Seconds from the start of `rltrain fit` to its first step, and then some, on a busy machine.
STARTUP = 60.0


class HangingEnv(gym.Env[np.ndarray, int]):
    """Steps normally (episodes of 50 steps) for ``hang_after`` steps, then hangs for good:
    ``how="sleep"`` sleeps (blocked in C, as on I/O), ``"busy"`` loops in Python, ``"system"``
    waits on ``os.system`` (a C call that retries on signals: Python cannot run); or, with
    ``"slow"``, each later step takes a second and returns. Only the
    ``hang_instance``-th env made in its process hangs (None: every one). When it starts to
    hang it writes its process id to ``marker``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    max_steps = 50
    made = 0

    def __init__(self, hang_after: int = 1, how: str = "sleep", marker: str = "",
                 hang_instance: int | None = None) -> None:
        self.hang_after, self.how, self.marker = hang_after, how, marker
        self.hangs = hang_instance is None or hang_instance == HangingEnv.made
        HangingEnv.made += 1
        self.steps = self.t = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps, self.t = self.steps + 1, self.t + 1
        if self.hangs and self.steps > self.hang_after:
            self.hang()
        return np.zeros(4, np.float32), 1.0, False, self.t >= self.max_steps, {}

    def hang(self) -> None:
        if self.marker:
            Path(self.marker).write_text(str(os.getpid()))
        if self.how == "slow":
            time.sleep(1.0)
            return
        if self.how == "busy":
            while True:
                pass
        elif self.how == "system":
            os.system("exec sleep 30")
        time.sleep(3600)


def start_fit(tmp_path: Path, *overrides: str, how: str = "sleep",
              vectorization: str = "sync") -> tuple[subprocess.Popen[str], Path]:
    """`rltrain fit` of DQN on a HangingEnv that hangs after 200 steps per sub-env (in its
    random warm-up); returns the process and the marker file the env writes as it hangs. The
    output goes to ``tmp_path/out.txt`` (a pipe would stay open in a hung env's own
    children)."""
    marker = tmp_path / "hanging"
    command = [sys.executable, "-m", "rltrain.cli", "fit",
               "env._target_=test_hung_envs.HangingEnv", "env.kwargs.hang_after=200",
               f"env.kwargs.how={how}", f"env.kwargs.marker={marker}",
               f"strategy.vectorization={vectorization}", "strategy.num_envs=2",
               "agent.hidden_sizes=[16]", f"trainer.run_dir={tmp_path / 'run'}",
               "trainer.eval_interval=null", "trainer.logger=false",
               "trainer.enable_progress_bar=false", *overrides]
    with (tmp_path / "out.txt").open("w") as out:
        process = subprocess.Popen(  # the env's module imports tests/conftest.py
            command, cwd=TESTS / "scenarios", stdout=out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(TESTS)})
    return process, marker


def output(tmp_path: Path) -> str:
    return (tmp_path / "out.txt").read_text()


def wait_until_hanging(process: subprocess.Popen[str], marker: Path, tmp_path: Path) -> None:
    deadline = time.monotonic() + STARTUP
    while not marker.exists():
        assert process.poll() is None, output(tmp_path)
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the env never started to hang")
        time.sleep(0.05)
    time.sleep(0.2)  # well inside the hung call


def finish(process: subprocess.Popen[str], within: float, tmp_path: Path) -> float:
    """Wait at most ``within`` seconds for the process to end; returns the seconds it took."""
    started = time.monotonic()
    try:
        process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        for pid in descendants(process.pid):
            kill(pid)
        process.kill()
        process.wait()
        pytest.fail(f"still running {within:g} s later:\n{output(tmp_path)}")
    return time.monotonic() - started


def descendants(pid: int) -> list[int]:
    """The process ids under ``pid`` (children, their children, ...), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def still_alive(pids: list[int], within: float = 5.0) -> list[int]:
    """Those of ``pids`` still running ``within`` seconds from now (fewer, sooner: it returns
    as soon as none is); each is killed."""
    deadline = time.monotonic() + within
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        kill(pid)
    return left


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("how", ["sleep", "busy"])
def test_env_step_timeout_fails_a_hung_sync_step_with_a_clear_message(tmp_path: Path,
                                                                      how: str) -> None:
    process, _ = start_fit(tmp_path, "trainer.env_step_timeout=0.5", how=how)
    finish(process, STARTUP, tmp_path)
    text = output(tmp_path)
    assert process.returncode == 3, text  # EXIT_TRAINING_FAILED
    assert ("rltrain: Training failed after 400 env steps (200 vector steps, "
            "0 gradient steps), while collecting experience, in sub-env 0: sub-env 0 of "
            "'test_hung_envs.HangingEnv' did not return from step() within "
            "env_step_timeout=0.5 s. It hangs or is too slow: fix the environment, or raise "
            "trainer.env_step_timeout (None: no limit). An emergency checkpoint") in text, text
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()


def test_env_step_timeout_ends_hung_async_workers(tmp_path: Path) -> None:
    process, marker = start_fit(tmp_path, "trainer.env_step_timeout=0.5",
                                vectorization="async")
    wait_until_hanging(process, marker, tmp_path)
    workers = descendants(process.pid)
    assert len(workers) >= 2
    finish(process, 30, tmp_path)
    text = output(tmp_path)
    assert process.returncode == 3, text
    assert ("sub-envs 0, 1 of 'test_hung_envs.HangingEnv' did not return from step() within "
            "env_step_timeout=0.5 s") in text, text
    assert not still_alive(workers)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_sigterm_ends_a_run_whose_env_step_hangs(tmp_path: Path, vectorization: str) -> None:
    process, marker = start_fit(tmp_path, vectorization=vectorization)
    wait_until_hanging(process, marker, tmp_path)
    workers = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    took = finish(process, STOP_GRACE + 25, tmp_path)
    text = output(tmp_path)
    assert process.returncode == 3, text
    assert STOP_GRACE - 0.5 < took < STOP_GRACE + 10, took
    assert f"did not return from step() within {STOP_GRACE:g} s of SIGTERM" in text, text
    assert "An emergency checkpoint of the state before the failure was saved" in text, text
    assert not still_alive(workers)


def test_two_sigints_end_an_async_run_with_hung_workers_and_leave_no_worker(
        tmp_path: Path) -> None:
    process, marker = start_fit(tmp_path, vectorization="async")
    wait_until_hanging(process, marker, tmp_path)
    workers = descendants(process.pid)
    assert len(workers) >= 2
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    took = finish(process, 20, tmp_path)
    assert process.returncode == 130, output(tmp_path)
    assert took < STOP_GRACE, took  # at once, not after the first signal's grace
    assert "aborted (a second Ctrl-C)" in output(tmp_path)
    assert not still_alive(workers)


def test_hung_async_workers_die_with_a_killed_main_process(tmp_path: Path) -> None:
    # SIGKILL leaves the main process no way to end its workers: the kernel does
    # (PR_SET_PDEATHSIG), even while they hang in a step.
    process, marker = start_fit(tmp_path, vectorization="async")
    wait_until_hanging(process, marker, tmp_path)
    workers = descendants(process.pid)
    assert len(workers) >= 2
    process.kill()
    process.wait()
    assert not still_alive(workers)


def test_a_step_stuck_in_c_past_its_timeout_ends_the_process(tmp_path: Path) -> None:
    # os.system retries its wait on signals: Python cannot run in the main thread, so the
    # watchdog thread ends the process.
    process, marker = start_fit(tmp_path, "trainer.env_step_timeout=0.5", how="system")
    wait_until_hanging(process, marker, tmp_path)
    children = descendants(process.pid)  # the `sleep` os.system runs
    try:
        took = finish(process, 20, tmp_path)
    finally:
        for pid in children:
            kill(pid)
    assert process.returncode == 3, output(tmp_path)
    assert took < 0.5 + STUCK_MARGIN + 8, took
    assert ("an environment call passed its deadline (env_step_timeout=0.5 s) 2 s ago and "
            "could not be interrupted: the main thread is stuck in a C call that ignores "
            "signals. Exiting now, without saving") in output(tmp_path)


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, True])
def test_env_step_timeout_must_be_finite_seconds_above_zero(value: float) -> None:
    with pytest.raises(ValueError, match=r"trainer: env_step_timeout must be a finite number "
                                         r"of seconds > 0 \(or None for no limit\); got "):
        TrainerConfig(env_step_timeout=value)
    assert TrainerConfig(env_step_timeout=2.5).env_step_timeout == 2.5
    assert TrainerConfig().env_step_timeout is None


def test_env_step_timeout_bounds_the_check_before_the_run(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=100, run_dir=tmp_path / "run", env_step_timeout=0.3, **QUIET)
    started = time.monotonic()
    with pytest.raises(EnvError, match=r"'hanging_at_once' fails the check of step: step\(\) "
                                       r"did not return within env_step_timeout=0.3 s\. Fix "
                                       r"its step, or raise trainer\.env_step_timeout"):
        trainer.fit(hanging_at_once, DQN(DQNConfig(hidden_sizes=[8])))
    assert time.monotonic() - started < 10
    assert not (tmp_path / "run").exists()


def hanging_at_once() -> HangingEnv:
    """A HangingEnv that hangs in its first step."""
    return HangingEnv(hang_after=0)


def test_evaluate_respects_env_step_timeout(tmp_path: Path) -> None:
    agent = DQN(DQNConfig(hidden_sizes=[8]))
    agent.setup(observation_space=HangingEnv.observation_space,
                action_space=HangingEnv.action_space, device=torch.device("cpu"),
                progress=Progress())
    trainer = Trainer(env_step_timeout=0.3, eval_episodes=1, **QUIET)
    started = time.monotonic()
    with pytest.raises(EnvStepTimeout, match=r"sub-env 0 of 'make_hanging' did not return from "
                                             r"step\(\) within env_step_timeout=0\.3 s"):
        trainer.evaluate(make_hanging, agent)
    assert time.monotonic() - started < 10


def make_hanging() -> HangingEnv:
    """A HangingEnv that hangs in its 11th step."""
    return HangingEnv(hang_after=10)


def test_evaluations_while_training_respect_env_step_timeout(tmp_path: Path) -> None:
    HangingEnv.made = 0  # the probe (0), the training sub-env (1), the evaluation sub-env (2)
    trainer = Trainer(num_steps=5000, eval_interval=100, eval_episodes=1, env_step_timeout=0.3,
                      run_dir=tmp_path / "run", **QUIET)
    with pytest.raises(Exception, match=r"while evaluating, in evaluation sub-env 0: sub-env 0 "
                                        r"of 'hanging_in_evaluation' did not return from "
                                        r"step\(\) within env_step_timeout=0\.3 s"):
        trainer.fit(hanging_in_evaluation, DQN(DQNConfig(hidden_sizes=[8])))


def hanging_in_evaluation() -> HangingEnv:
    """The third HangingEnv made in the process hangs in its 11th step."""
    return HangingEnv(hang_after=10, hang_instance=2)


def test_a_slow_sync_step_outside_the_main_thread_fails_when_it_returns(tmp_path: Path) -> None:
    # Signals reach the main thread only: a fit in another thread cannot interrupt a sync
    # step, and says so; a step that returns past the timeout fails the run then.
    trainer = Trainer(num_steps=5000, eval_interval=None, env_step_timeout=0.3,
                      run_dir=tmp_path / "run", **QUIET)
    errors: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit(slow_after_ten_steps, DQN(DQNConfig(hidden_sizes=[8])))
        except BaseException as error:
            errors.append(error)

    with pytest.warns(UserWarning, match=r"env_step_timeout=0\.3 s cannot interrupt a step of "
                                         r"sync vector envs outside the main thread"):
        thread = threading.Thread(target=fit)
        thread.start()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], TrainingError), errors
    assert ("sub-env 0 of 'slow_after_ten_steps' did not return from step() within "
            "env_step_timeout=0.3 s (it returned after 1") in str(errors[0])


def slow_after_ten_steps() -> HangingEnv:
    """A HangingEnv whose steps after the 10th take a second each."""
    return HangingEnv(hang_after=10, how="slow")

"""Ctrl-C and SIGTERM stop a run cleanly: real signals to a real `rltrain fit` process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import QUIET

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.checkpoint import read_checkpoint
from rltrain.runtime.interrupt import Interrupter, stop_on_signals

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow


def start_fit(run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "fit", "trainer.num_steps=1000000",
         "trainer.return_threshold=null", f"trainer.run_dir={run_dir}",
         "trainer.enable_progress_bar=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_until_training(process: subprocess.Popen[str], run_dir: Path) -> None:
    """Wait until the run has written its first metrics row (past warm-up setup)."""
    deadline = time.monotonic() + 120
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            return
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run never started training")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_fit_cleanly_with_last_checkpoint_saved(tmp_path: Path,
                                                              sig: signal.Signals) -> None:
    run_dir = tmp_path / "run"
    process = start_fit(run_dir)
    wait_until_training(process, run_dir)
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert f"{sig.name} received" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == f"{sig.name} received"
    assert 0 < summary["env_steps"] < 1_000_000
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["progress"]["env_steps"] == summary["env_steps"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["event"] == "end"
    assert any(row["event"] == "interrupted" for row in rows)
    # no evaluation ran at the stop: an earlier one's return is never called final
    assert "final evaluation return" not in output
    if any(row["event"] == "evaluation" for row in rows):
        assert "last evaluation return: " in output and "(from before the stop" in output


def test_second_sigint_aborts_at_once(tmp_path: Path) -> None:
    interrupter = Interrupter()
    with stop_on_signals(interrupter):
        signal.raise_signal(signal.SIGINT)
        assert interrupter.reason == "SIGINT received"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)


def test_fit_restores_the_previous_signal_handlers(tmp_path: Path) -> None:
    def mine(signum: int, frame: object) -> None:
        raise AssertionError("must not be called")

    previous = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        trainer = Trainer(num_steps=200, run_dir=tmp_path, **QUIET, eval_interval=None,
                          strategy=OffPolicyStrategy(OffPolicyConfig(
                              warmup_steps=100, buffer_size=1000)))
        trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_fit_in_a_worker_thread_leaves_signal_handlers_alone(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            torch.set_num_threads(1)
            Trainer(num_steps=200, run_dir=tmp_path, **QUIET, eval_interval=None,
                    strategy=OffPolicyStrategy(OffPolicyConfig(
                        warmup_steps=100, buffer_size=1000))
                    ).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not errors
    assert signal.getsignal(signal.SIGINT) is before

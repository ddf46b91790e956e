"""Exact resume of Atari runs: `dqn_atari` and `ppo_atari` on two games, with sync and async
vector envs, SIGKILLed mid-episode (PPO mid-rollout) after a checkpoint and resumed with
`rltrain fit --resume`, end bit for bit where the straight run ends (agent, optimizer, replay
or rollout, runner with the emulators' state, generators, metrics, counters), and the episodes
running at the checkpoint go on: the first one to end after the resume ends at the same env
step with the same score as in the straight run (rltrain.envs.emulator)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import assert_same_tensors

from rltrain.checkpoint import read_checkpoint

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop.
pytestmark = pytest.mark.slow

#: Small networks on the flattened frames (the CNN's cost would only slow the test), two
#: sub-envs, a metrics row every vector step (each episode's end is read from it).
COMMON = ["agent.encoder=mlp", "agent.hidden_sizes=[16]", "trainer.eval_interval=null",
          "trainer.enable_progress_bar=false", "trainer.enable_console=false",
          "trainer.num_threads=1", "strategy.num_envs=2", "trainer.log_interval=2"]

#: Per preset: its overrides, the env steps of the run and the checkpoint interval (PPO's
#: checkpoint at 96 env steps falls in the middle of its second 64-step rollout).
PRESETS: dict[str, tuple[list[str], int, int]] = {
    "dqn_atari": (["strategy.buffer_size=1000", "strategy.warmup_steps=100",
                   "agent.exploration_steps=300"], 480, 160),
    "ppo_atari": (["strategy.n_steps=32", "strategy.batch_size=32"], 320, 96),
}

#: Checkpoint parts that describe the run rather than its state.
DESCRIPTIONS = ("config", "format", "versions", "hparams", "agent_class", "spaces")


def command(preset: str, game: str, vectorization: str, run_dir: Path) -> list[str]:
    overrides, num_steps, interval = PRESETS[preset]
    return [sys.executable, "-m", "rltrain.cli", "fit", preset, f"env.id=ALE/{game}-v5",
            f"strategy.vectorization={vectorization}", *COMMON, *overrides,
            f"trainer.num_steps={num_steps}", f"trainer.checkpoint_interval={interval}",
            f"trainer.run_dir={run_dir}"]


def killed_after_first_checkpoint(cmd: list[str], run_dir: Path, interval: int) -> None:
    """Run ``cmd`` and SIGKILL it as soon as its first periodic checkpoint is on disk."""
    first = run_dir / "checkpoints" / f"checkpoint-{interval}.pt"
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 300
    while not first.exists():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint in 300 s"
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()  # killed before its end


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of the run's metrics file written by its last process (after its last start
    row: a killed process may have logged past the checkpoint its successor resumed from)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last_start = max(i for i, r in enumerate(rows) if r.get("event") == "start")
    return rows[last_start:]


def episode_rows(rows: list[dict[str, Any]]) -> list[tuple[int, float, float, float]]:
    """(env steps, episodes, last episode's length, its return) of each metrics row."""
    return [(r["env_steps"], r["time/episodes"], r["rollout/episode_length_last"],
             r["rollout/episode_return_last"]) for r in rows
            if r.get("event") == "metrics" and "rollout/episode_length_last" in r]


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("game", ["Pong", "Breakout"])
@pytest.mark.parametrize("preset", ["dqn_atari", "ppo_atari"])
def test_an_atari_run_killed_and_resumed_equals_the_straight_run_bit_for_bit(
        tmp_path: Path, preset: str, game: str, vectorization: str) -> None:
    _, num_steps, interval = PRESETS[preset]
    straight, split = tmp_path / "straight", tmp_path / "split"
    running = subprocess.Popen(command(preset, game, vectorization, straight),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed_after_first_checkpoint(command(preset, game, vectorization, split), split, interval)
    resumed = subprocess.run([sys.executable, "-m", "rltrain.cli", "fit", "--resume",
                              str(split)], capture_output=True, text=True, timeout=600,
                             check=False)
    _, errors = running.communicate(timeout=600)
    assert running.returncode == 0, errors
    assert resumed.returncode == 0, resumed.stderr
    assert "not an exact continuation" not in resumed.stderr + errors
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == num_steps
    assert "emulator" in b["runner"] and len(b["runner"]["emulator"]) == 2
    for part in a:
        if part not in DESCRIPTIONS:
            assert_same_tensors(a[part], b[part], part)

    # The run resumed from a checkpoint at or after the first; the episodes running there
    # went on: the first to end after it ends as in the straight run and began before it.
    resumed_rows = metrics_rows(split)
    resumed_at = resumed_rows[0]["env_steps"]
    assert interval <= resumed_at < num_steps
    after = episode_rows(resumed_rows)
    straight_rows = episode_rows(metrics_rows(straight))
    assert after == [row for row in straight_rows if row[0] > resumed_at]
    if game == "Breakout":  # lives are lost within the run (Pong's points take longer)
        assert after
        before = max(row[1] for row in straight_rows if row[0] <= resumed_at)
        first = next(row for row in after if row[1] > before)
        env_steps, _, length, _ = first
        assert length > (env_steps - resumed_at) / 2  # it was running at the checkpoint



def test_a_checkpoint_with_altered_emulator_state_is_refused_and_nothing_is_changed(
        tmp_path: Path) -> None:
    """Emulator bytes changed in every checkpoint, the manifest's checksums updated to match (as
    someone who can write the run could): `--resume` refuses, naming the sub-env and the part,
    before it writes anything."""
    run = tmp_path / "run"
    short = [*command("dqn_atari", "Pong", "sync", run)[:-3], "trainer.num_steps=200",
             "trainer.checkpoint_interval=100", f"trainer.run_dir={run}"]
    first = subprocess.run(short, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr
    manifest_path = run / "checkpoints" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["checkpoints"]:
        path = run / "checkpoints" / entry["file"]
        state = torch.load(path, weights_only=True)
        state["runner"]["emulator"][1]["emulator"][300] ^= 0xFF
        torch.save(state, path)
        data = path.read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    manifest_path.write_text(json.dumps(manifest))
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    resumed = subprocess.run([sys.executable, "-m", "rltrain.cli", "fit", "--resume", str(run),
                              "trainer.num_steps=400"], capture_output=True, text=True,
                             timeout=600, check=False)
    assert resumed.returncode != 0
    assert "sub-env 1: its emulator state does not match its digest" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before

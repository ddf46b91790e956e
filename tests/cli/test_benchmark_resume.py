"""``benchmarks.mujoco_offpolicy --run-dir``: a seed's run stopped by a real SIGTERM after its
first evaluation continues where it stopped when the same command runs again, for rltrain (from
its checkpoint) and for Stable-Baselines3 (from the model and replay buffer saved at each
evaluation), and the results file holds the whole curve and both calls (each with the commit
it ran and the env steps it continued from)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("stable_baselines3")

REPO = Path(__file__).resolve().parents[2]
STEPS, INTERVAL = 3_000, 500


def command(run_dir: Path, results: Path, sb3: bool) -> list[str]:
    return [sys.executable, "-m", "benchmarks.mujoco_offpolicy", "--config", "td3_pendulum",
            "--seeds", "0", "--steps", str(STEPS), "--eval-interval", str(INTERVAL),
            "--eval-episodes", "1", "--run-dir", str(run_dir), "--results", str(results),
            *(["--sb3"] if sb3 else []), "strategy.warmup_steps=200",
            "strategy.buffer_size=5000", "agent.hidden_sizes=[16,16]"]


@pytest.mark.slow
@pytest.mark.parametrize("sb3", [False, True], ids=["rltrain", "sb3"])
def test_a_stopped_seed_continues_and_keeps_its_curve(tmp_path: Path, sb3: bool) -> None:
    run_dir, results = tmp_path / "runs", tmp_path / "result"
    saved = run_dir / "seed0" / ("sb3_curve.json" if sb3 else "checkpoints/last.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(command(run_dir, results, sb3), cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not saved.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)  # after the first evaluation, before the budget's end
    out, _ = first.communicate(timeout=120)
    assert first.returncode != 0, out  # stopped: no results file yet
    assert not (tmp_path / "result.json").exists()
    if not sb3:  # the checkpoint the second call continues from
        from benchmarks._util import last_checkpoint_steps
        stopped_at = last_checkpoint_steps(run_dir / "seed0" / "checkpoints")

    second = subprocess.run(command(run_dir, results, sb3), cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    run = json.loads((tmp_path / "result.json").read_text())["runs"][0]
    assert run["env_steps"] >= STEPS
    steps = [point[0] for point in run["curve"]]
    assert steps == list(range(INTERVAL, STEPS + 1, INTERVAL))  # before the stop and after
    assert f"seed 0: {INTERVAL:,} env steps" not in second.stdout  # not evaluated again
    calls = run["calls"]
    assert len(calls) == 2 and calls[0]["from_env_steps"] == 0
    assert INTERVAL <= calls[1]["from_env_steps"] < STEPS  # the second call continued
    if not sb3:
        assert calls[1]["from_env_steps"] == stopped_at
    assert all("commit" in call and "uncommitted_changes" in call for call in calls)
    assert json.loads((run_dir / "seed0" / "calls.json").read_text()) == calls


def test_a_save_that_fails_part_way_leaves_the_previous_set_to_load(tmp_path: Path) -> None:
    """A Stable-Baselines3 save that fails after the model is written (here the replay cannot
    be pickled) loads as the previous save, model and replay of one evaluation; the next save
    that succeeds removes what the failed one left."""
    import threading

    import gymnasium as gym
    import stable_baselines3

    from benchmarks._util import SB3Run

    env = gym.make("CartPole-v1")
    model = stable_baselines3.DQN("MlpPolicy", env, learning_starts=50, buffer_size=1_000,
                                  seed=0, device="cpu")
    saved = SB3Run(tmp_path / "run")

    def train_and_save(steps: int) -> None:
        model.learn(steps, reset_num_timesteps=False)
        saved.save(model, [(model.num_timesteps, 0.0)])

    train_and_save(100)
    first = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.replay_buffer.lock = threading.Lock()  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        train_and_save(100)
    assert saved.files(200)[0].exists()  # the failed save's model is on disk...
    loaded, curve = saved.load(stable_baselines3.DQN, env)
    assert curve == [(100, 0.0)]  # ...but the previous set is the one loaded
    assert loaded.num_timesteps == 100 and loaded.replay_buffer.size() == 100
    for name, value in loaded.policy.state_dict().items():
        assert torch.equal(value, first[name]), name
    del model.replay_buffer.lock  # type: ignore[union-attr]
    train_and_save(100)
    assert sorted(p.name for p in saved.directory.iterdir()) == [
        "sb3_curve.json", "sb3_model-300.zip", "sb3_replay-300.pkl"]

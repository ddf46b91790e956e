"""``rltrain fit ... --seeds 0-2 --jobs N``: real ``rltrain`` processes, one run directory per
seed under one parent, a failed seed reported without losing the others, and a group killed
part-way (SIGKILL to the launcher, whose seeds die with it) continued by ``--resume PARENT``,
where every seed finishes once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rltrain

from rltrain.cli.seeds import parse_seeds

QUICK = ["dqn_cartpole", "trainer.num_steps=400", "strategy.warmup_steps=100",
         "strategy.train_steps=8", "agent.hidden_sizes=[32]", "trainer.eval_interval=200",
         "trainer.eval_episodes=2", "trainer.logger=false"]


def test_seed_lists_and_ranges() -> None:
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("5,1,3-4,1") == [1, 3, 4, 5]
    for bad in ("", "a", "3-1", "0-99999", "1,,2", "-1"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)


@pytest.mark.slow
def test_every_seed_trains_in_its_own_run_and_a_failed_one_is_reported(tmp_path: Path) -> None:
    parent = tmp_path / "group"
    parent.mkdir()
    (parent / "seed-1").write_text("in the way")  # seed 1's run directory cannot be made
    done = rltrain("fit", *QUICK, f"trainer.run_dir={parent}", "--seeds", "0-2", "--jobs", "2",
                   cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr  # seed 1's bad-input status
    assert "seed 1: failed (exit 2)" in done.stdout
    for seed in (0, 2):
        summary = json.loads((parent / f"seed-{seed}" / "summary.json").read_text())
        assert summary["env_steps"] == 400
        config = (parent / f"seed-{seed}" / "config.yaml").read_text()
        assert f"seed: {seed}" in config
        assert f"seed {seed}: done" in done.stdout
    assert "2 of 3 finished" in done.stdout
    again = rltrain("fit", *QUICK, f"trainer.run_dir={parent}", "--seeds", "0-2", cwd=tmp_path)
    assert again.returncode == 2 and "already holds" in again.stderr  # never two groups


@pytest.mark.slow
def test_a_killed_group_resumes_only_its_unfinished_seeds(tmp_path: Path) -> None:
    parent = tmp_path / "group"
    steps = ["trainer.num_steps=1500", "trainer.checkpoint_interval=300"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "fit", *QUICK, *steps, f"trainer.run_dir={parent}",
         "--seeds", "0-2", "--jobs", "1"], cwd=tmp_path, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while not (parent / "seed-1" / "checkpoints" / "manifest.json").exists():
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.01)
    # Seed 1 is held where it is (it could otherwise finish its few steps before the kill
    # lands), then the launcher is killed: SIGKILL to the launcher alone, its seed dies with it.
    os.kill(json.loads((parent / "seed-1" / ".rltrain.lock").read_text())["pid"],
            signal.SIGSTOP)
    launcher.kill()
    launcher.wait()
    first = (parent / "seed-0" / "summary.json").stat().st_mtime_ns
    assert not (parent / "seed-1" / "summary.json").exists()
    assert not (parent / "seed-2").exists()
    done = rltrain("fit", "--resume", str(parent), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "seed 0: finished before, left as it is" in done.stdout
    assert "seed 1: resumed" in done.stdout and "seed 2: started" in done.stdout
    assert (parent / "seed-0" / "summary.json").stat().st_mtime_ns == first
    for seed in (0, 1, 2):
        assert json.loads((parent / f"seed-{seed}" / "summary.json").read_text())[
            "env_steps"] == 1500
    again = rltrain("fit", "--resume", str(parent), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("finished before") == 3


@pytest.mark.slow
def test_a_group_from_a_cluster_resumes_on_a_machine_without_slurm(tmp_path: Path) -> None:
    """A group whose record names Slurm jobs (run on a cluster, copied here) finishes on a
    machine with no ``squeue``: its unfinished seed resumes locally, with a note."""
    parent = tmp_path / "group"
    done = rltrain("fit", *QUICK, f"trainer.run_dir={parent}", "--seeds", "0-1",
                   cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (parent / "seed-1" / "summary.json").unlink()  # seed 1 as if cancelled before its end
    record = json.loads((parent / "seeds.json").read_text())
    record["slurm"] = {"0": {"job": "41_0", "node": "node-a"}, "1": {"job": "41_1"}}
    (parent / "seeds.json").write_text(json.dumps(record))
    bare = tmp_path / "bin"  # a PATH without Slurm's commands
    bare.mkdir()
    resumed = rltrain("fit", "--resume", parent, cwd=tmp_path, timeout=300,
                      env={"PATH": str(bare)})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "no Slurm here (squeue)" in resumed.stdout
    assert "seed 0: finished before" in resumed.stdout and "seed 1: resumed" in resumed.stdout
    on_slurm = rltrain("fit", "--resume", parent, "--launcher", "slurm", cwd=tmp_path,
                       env={"PATH": str(bare)})
    assert on_slurm.returncode == 2 and "squeue is not installed here" in on_slurm.stderr


def test_a_seed_whose_process_dies_after_its_run_ended_is_reported_done(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SIGTERM to a group as a seed finishes: the seed's run wrote its end (``summary.json``,
    no stop reason) and its process was then killed. It is reported done, as the group's
    count says, never as failed."""
    from rltrain.cli.seeds import Seed, _report

    run_dir = tmp_path / "seed-3"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps(
        {"env_steps": 400, "best_eval_return": 21.5, "stop_reason": None}))
    log = (tmp_path / "seed-3.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", "import os, signal; "
                                "os.kill(os.getpid(), signal.SIGTERM)"])
    process.wait()
    seed = Seed(3, run_dir, process, log, time.monotonic())
    assert seed.finished and _report(seed) == 0
    out = capsys.readouterr().out
    assert "seed 3: done in" in out and "best evaluation 21.50" in out
    assert "its process then ended: killed by SIGTERM" in out and "failed" not in out
    (run_dir / "summary.json").write_text(json.dumps({"env_steps": 100,
                                                      "stop_reason": "SIGTERM received"}))
    seed.log = (tmp_path / "seed-3.log").open("ab")
    assert _report(seed) == 1  # stopped part-way: failed, in words
    assert "seed 3: failed (killed by SIGTERM)" in capsys.readouterr().out

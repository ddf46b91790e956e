"""``benchmarks.groups``: a peer group's runs, written as run directories, are what ``rltrain
compare`` reads back: every run, both libraries apart, each run's last evaluation, and the
env steps to the threshold with a run that never reached it censored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from benchmarks.groups import Group, write_group

pytest.importorskip("rliable")

CURVES = {
    "rltrain": {0: [(100, 5.0), (200, 21.0)], 1: [(100, 22.0), (200, 25.0)],
                2: [(100, 1.0), (200, 3.0)]},
    "sb3": {0: [(100, 2.0), (200, 10.0)], 1: [(100, 4.0), (200, 12.0)]},
}


def test_a_group_written_out_is_compared_run_for_run(tmp_path: Path) -> None:
    from rltrain.cli.compare import compare

    group = Group(lambda library: CURVES[library], "ALE/Breakout-v5", "ppo", 200,
                  threshold=20.0)
    folders = write_group(group, tmp_path)
    assert [f.name for f in folders] == ["rltrain", "sb3"]
    result = compare(folders, threshold=20.0, reps=200)
    by_size = {len(g.runs): g for g in result.groups}
    assert set(by_size) == {3, 2}  # two groups: the libraries, each with its seeds
    assert sorted(r.final for r in by_size[3].runs) == [3.0, 21.0, 25.0]
    assert sorted(r.final for r in by_size[2].runs) == [10.0, 12.0]
    reached = sorted((r.reached, r.steps_to) for r in by_size[3].runs)
    assert reached[0][0] is False  # seed 2 never reached 20: censored, not a number of steps
    assert [steps for ok, steps in reached if ok] == [100, 200]
    assert not any(r.reached for r in by_size[2].runs)


def test_two_groups_of_rltrain_runs_are_written_apart_and_compared(tmp_path: Path) -> None:
    from rltrain.cli.compare import compare

    curves = {"rltrain-gymnasium": CURVES["rltrain"], "rltrain": CURVES["sb3"]}
    group = Group(lambda library: curves[library], "ALE/Breakout-v5", "ppo", 200,
                  threshold=20.0, ours="rltrain-gymnasium", peer="rltrain")
    folders = write_group(group, tmp_path)
    assert [f.name for f in folders] == ["rltrain-gymnasium", "rltrain"]
    result = compare(folders, threshold=20.0, reps=200)
    assert sorted(len(g.runs) for g in result.groups) == [2, 3]  # not merged into one group


def test_the_command_prints_compares_table_for_each_group(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.groups", "sac", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "sac"
    assert f"rltrain compare {out}/rltrain {out}/sb3 --threshold 90" in done.stdout
    assert len(list((tmp_path / "sac" / "rltrain").glob("seed-*"))) == 5
    assert "| group | runs |" in done.stdout
    wrong = subprocess.run([sys.executable, "-m", "benchmarks.groups", "nosuch"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "no group nosuch" in wrong.stderr

"""Two real ``rltrain fit`` processes on one run directory: one writes it, the other is refused.

The short version of ``scripts/concurrency_check.py`` (which repeats the two races 20 times):
two fresh fits of different seeds, then two ``--resume`` of the run they left (to different
``num_steps``), each pair started at the same instant (both import rltrain first, then wait
for a "go" file); and a fit killed with SIGKILL while it trains, whose lock the kernel
releases so that ``--resume`` runs. The scenarios and the checks of the run directory live in
the script; these tests assert on what they found.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import load_script

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

check = load_script("concurrency_check")
run_checks = load_script("run_checks")


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """Two fresh fits (seeds 1 and 2, 2,000 env steps) raced on one new run directory."""
    result, run_dir = check.racing_fits(tmp_path_factory.mktemp("fits"))
    return result, run_dir


@pytest.fixture(scope="module")
def resumes(fits: tuple[Any, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Any, Path]:
    """Two ``--resume`` (to 4,000 and 4,500 env steps) raced on a copy of the fits' run."""
    result, run_dir = fits
    if result.winner is None or result.mixed:
        pytest.skip("the fits race left no single unmixed run to resume:\n" + result.report())
    work = tmp_path_factory.mktemp("resumes")
    copy = work / "run"
    shutil.copytree(run_dir, copy)
    return check.racing_resumes(copy, work), copy


def rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def winner_and_refusal(result: Any) -> tuple[Any, str]:
    """The winning process of a race, and the loser's one-line refusal (exit 2)."""
    report = result.report()
    assert sorted(o.code for o in result.outcomes) == [0, 2], report
    error = result.loser.stderr.strip().splitlines()[-1]
    assert error.startswith("rltrain: error: "), report
    return result.winner, error


def test_two_fresh_fits_one_trains_to_the_end_the_other_is_refused(
    fits: tuple[Any, Path],
) -> None:
    result, _ = fits
    report = result.report()
    winner, error = winner_and_refusal(result)
    assert f"done: {check.FIT_STEPS:,} env steps" in winner.stdout, report
    # Refused for the lock while the winner trained (naming the winner's PID), or because the
    # directory already holds the winner's run (rltrain checks that before the lock too).
    assert (f"is in use by another rltrain run (PID {winner.pid} on " in error
            or "already holds a run" in error), report
    assert result.unexpected == [], report


def test_the_fits_race_leaves_one_run_of_the_winners_seed(fits: tuple[Any, Path]) -> None:
    result, run_dir = fits
    report = result.report()
    assert result.mixed == [], report  # every check of scripts/concurrency_check.check_run
    seed = check.SEEDS[result.outcomes.index(result.winner)]
    table = rows(run_dir)
    starts = [row for row in table if row["event"] == "start"]
    assert len(starts) == 1 and starts[0]["config"]["strategy.seed"] == seed, report
    steps = [row["env_steps"] for row in table]
    assert steps == sorted(steps) and table[-1]["event"] == "end", report
    assert table[-1]["env_steps"] == check.FIT_STEPS
    manifest = json.loads((run_dir / "checkpoints" / "manifest.json").read_text())
    for name in (manifest["last"], manifest["best"]["file"]):
        facts = run_checks.checkpoint_facts(run_dir / "checkpoints" / name)
        assert facts["seed"] == seed, (name, facts, report)
    assert run_checks.checkpoint_facts(run_dir / "checkpoints" / manifest["last"])["env_steps"] \
        == check.FIT_STEPS
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == check.FIT_STEPS


def test_the_loser_is_refused_before_it_prints_or_writes_anything(
    fits: tuple[Any, Path],
) -> None:
    result, run_dir = fits
    report = result.report()
    loser, winner = result.loser, result.winner
    assert loser is not None and winner is not None, report
    assert loser.stdout == "", report  # no model summary, no "training for ..." line
    for mark in ("q_network", "Total: ", "Traceback"):
        assert mark not in loser.stderr, report
    assert [row["event"] for row in rows(run_dir)].count("start") == 1, report
    # The lock file names the winner: the loser never held the lock, so never wrote it.
    assert json.loads((run_dir / ".rltrain.lock").read_text())["pid"] == winner.pid, report
    assert not list(run_dir.glob(f".write-test-{loser.pid}")), report


def test_two_resumes_one_proceeds_the_other_is_refused_naming_the_holder(
    resumes: tuple[Any, Path],
) -> None:
    result, _ = resumes
    report = result.report()
    winner, error = winner_and_refusal(result)
    assert f"resuming at {check.FIT_STEPS:,}" in winner.stdout, report
    assert result.loser.stdout == "", report
    assert f"is in use by another rltrain run (PID {winner.pid} on " in error, report
    assert result.unexpected == [], report


def test_the_resumes_race_leaves_one_consistent_timeline(resumes: tuple[Any, Path]) -> None:
    result, run_dir = resumes
    report = result.report()
    assert result.mixed == [], report
    target = check.RESUME_STEPS[result.outcomes.index(result.winner)]
    table = rows(run_dir)
    starts = [(row["env_steps"], row["config"]["trainer.num_steps"])
              for row in table if row["event"] == "start"]
    ends = [row["env_steps"] for row in table if row["event"] == "end"]
    assert starts == [(0, check.FIT_STEPS), (check.FIT_STEPS, target)], report
    assert ends == [check.FIT_STEPS, target], report
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == target
    manifest = json.loads((run_dir / "checkpoints" / "manifest.json").read_text())
    last = run_checks.checkpoint_facts(run_dir / "checkpoints" / manifest["last"])
    assert (last["env_steps"], last["num_steps"]) == (target, target), report


def test_the_lock_of_a_sigkilled_run_is_released_and_resume_succeeds(tmp_path: Path) -> None:
    result = check.killed_holder(tmp_path)
    report = result.report()
    assert result.killed.code == -9, report
    # The dead run's PID is still written in the lock file: the kernel's lock is what counts.
    assert json.loads(result.lock_text)["pid"] == result.killed.pid, report
    assert result.killed_at >= 200, report
    assert result.resumed.code == 0, report
    assert f"resuming at {result.killed_at:,}" in result.resumed.stdout, report
    assert result.problems == [], report

"""``rltrain tune --storage``: one study, several real ``rltrain tune`` workers on a real
PostgreSQL server (initdb'd in a temporary folder, on a free port), one worker SIGKILLed twice
mid-trial: every trial completes once, each killed trial resumes its own run directory from a
checkpoint (its metrics show the segments), ``best.yaml`` is the best trial's config and every
recorded objective is the mean of the run's evaluations read back from its ``metrics.jsonl``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from benchmarks.servers import postgres, postgres_missing

optuna = pytest.importorskip("optuna")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(postgres_missing() is not None,
                                 reason=f"no PostgreSQL here: {postgres_missing()}")]

from rltrain.cli.tune_record import read_record  # noqa: E402

TRIALS, STEPS, INTERVAL = 6, 2048, 256
CONFIG = ["ppo_cartpole", f"trainer.num_steps={STEPS}", f"trainer.eval_interval={INTERVAL}",
          "trainer.eval_episodes=2", "trainer.logger=false", "strategy.num_envs=4",
          "strategy.n_steps=16", "strategy.batch_size=64", "agent.hidden_sizes=[16]",
          "trainer.return_threshold=null", "trainer.num_threads=1"]


def worker(study: Path, url: str, *, first: bool = False) -> subprocess.Popen[str]:
    args = [*CONFIG, "--trials", str(TRIALS), "--no-pruning", "--heartbeat", "1"] if first \
        else []
    return subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "tune", *args, "--study", str(study),
         "--storage", url], cwd=study.parent, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)


def held_with_checkpoint(study: Path, pid: int) -> int | None:
    """The run number of a trial that worker ``pid`` runs now (its ``rltrain fit`` is the
    worker's child) and that has a checkpoint past its start, else ``None``."""
    for run in sorted(study.glob("trial-*")):
        try:
            holder = json.loads((run / ".rltrain.lock").read_text())["pid"]
            parent = int(Path(f"/proc/{holder}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, KeyError, IndexError):
            continue
        if parent == pid and len(list((run / "checkpoints").glob("*.pt"))) >= 2:
            return int(run.name.removeprefix("trial-"))
    return None


def kill_mid_trial(study: Path, process: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 240
    while (number := held_with_checkpoint(study, process.pid)) is None:
        assert time.monotonic() < deadline and process.poll() is None, process.poll()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return number


def evaluations(run: Path) -> dict[int, float]:
    """The run's complete evaluations by env step, a resumed segment's replacing the killed
    one's for the steps both ran (read here, not with rltrain's reader)."""
    found: dict[int, float] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("event") == "evaluation" and row.get("complete", True):
            found[int(row["env_steps"])] = float(row["eval/return_mean"])
    return found


def test_workers_on_postgres_take_over_a_killed_workers_trials(tmp_path: Path) -> None:
    study = tmp_path / "study"
    with postgres() as url:
        first = worker(study, url, first=True)
        deadline = time.monotonic() + 60
        while not (study / "tune.json").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.1)
        others = [worker(study, url) for _ in range(2)]
        killed = [kill_mid_trial(study, first)]
        again = worker(study, url)  # the killed worker's machine comes back, and is lost again
        killed.append(kill_mid_trial(study, again))
        outputs = [p.communicate(timeout=600)[0] for p in others]
        assert all(p.returncode == 0 for p in others), outputs

        setup = read_record(study / "tune.json")
        assert setup.storage == url and "password" not in (study / "tune.json").read_text()
        loaded = optuna.load_study(study_name=setup.name, storage=url)
        trials = loaded.trials
    complete = Counter(t.system_attrs.get("failed_trial", t.number) for t in trials
                       if t.state.name == "COMPLETE")
    first_attempts = [t.number for t in trials if "failed_trial" not in t.system_attrs]
    assert len(first_attempts) == TRIALS  # no trial asked twice, none beyond --trials
    assert complete == Counter(first_attempts), complete  # each completed exactly once
    taken = [t for t in trials if "failed_trial" in t.system_attrs]
    assert {t.system_attrs["failed_trial"] for t in taken} == set(killed)
    assert all(t.state.name == "FAIL" for t in trials if t.number in killed)
    joined = "".join(outputs)
    for number in killed:  # resumed under its own run number, from a checkpoint
        assert f"trial {number}: resumed" in joined and "taken over" in joined
        rows = [json.loads(r) for r in (study / f"trial-{number:04d}" / "metrics.jsonl")
                .read_text().splitlines()]
        starts = [r["env_steps"] for r in rows if r["event"] == "start"]
        assert len(starts) >= 2 and starts[0] == 0 and all(s > 0 for s in starts[1:]), starts
    for t in trials:  # every recorded objective, recomputed from the run's own metrics
        if t.state.name == "COMPLETE":
            run = study / f"trial-{t.system_attrs.get('failed_trial', t.number):04d}"
            found = evaluations(run)
            assert sorted(found) == list(range(INTERVAL, STEPS + 1, INTERVAL))
            assert json.loads((run / "summary.json").read_text())["env_steps"] == STEPS
            assert t.value == pytest.approx(sum(found.values()) / len(found), abs=1e-9)
    best = max((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    written = yaml.safe_load((study / "best.yaml").read_text())
    expected = setup.compose(best.params)
    for key, value in best.params.items():
        section, name = key.split(".", 1)
        assert written[section][name] == pytest.approx(value)
        assert expected[section][name] == pytest.approx(value)
    assert written["trainer"]["num_steps"] == STEPS and written["trainer"]["run_dir"] is None
    assert os.path.exists(study / "trial-0000.log")

"""``--launcher slurm`` on a real single-node Slurm (``slurmctld``, ``slurmd`` and ``munged``
started here): a study's workers as Slurm jobs on a shared PostgreSQL database; a 6-seed group
submitted through submitit, one seed's job cancelled part-way with ``scancel``, ``fit --resume
PARENT --launcher slurm`` resubmitting only that seed, which resumes from its checkpoint, the
record naming each seed's job and node, and ``compare`` of the group against a second one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.servers import postgres, postgres_missing, slurm, slurm_missing
from rltrain.cli.study_storage import run_number

pytest.importorskip("submitit")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(slurm_missing() is not None,
                                 reason=f"no Slurm here: {slurm_missing()}")]

STEPS = 6144
#: Seeds of the group on Slurm (enough that two run at once while others wait in the array).
SEEDS = 6
QUICK = ["ppo_cartpole", f"trainer.num_steps={STEPS}", "trainer.eval_interval=1024",
         "trainer.checkpoint_interval=512", "trainer.eval_episodes=2", "trainer.logger=false",
         "trainer.return_threshold=null", "strategy.num_envs=4", "strategy.n_steps=16",
         "strategy.batch_size=64", "agent.hidden_sizes=[16]"]


def rltrain(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrain.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=600)


def queued(env: dict[str, str]) -> list[str]:
    listed = subprocess.run(["squeue", "--noheader", "--format=%i %T"], text=True,
                            capture_output=True, env={**os.environ, **env}, check=True)
    return [line.split()[0] for line in listed.stdout.splitlines()
            if line.split()[1] in ("PENDING", "RUNNING", "COMPLETING")]


def wait_until(condition: object, seconds: float = 400) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_seed_group_on_slurm_resubmits_only_its_cancelled_seed(tmp_path: Path) -> None:
    group = tmp_path / "ppo"
    with slurm() as env:
        started = rltrain("fit", *QUICK, "--seeds", f"0-{SEEDS - 1}", "--jobs", "2",
                          "--launcher", "slurm", "--slurm", "time=20",
                          f"trainer.run_dir={group}", cwd=tmp_path, env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        jobs = json.loads((group / "seeds.json").read_text())["slurm"]
        assert sorted(jobs, key=int) == [str(s) for s in range(SEEDS)]
        array = {entry["job"].split("_")[0] for entry in jobs.values()}
        assert len(array) == 1  # one array job

        def running_with_checkpoint() -> int | None:
            for seed in range(SEEDS):
                run = group / f"seed-{seed}"
                if not (run / "summary.json").exists() and len(
                        list((run / "checkpoints").glob("*.pt"))) >= 2:
                    return seed
            return None

        wait_until(lambda: running_with_checkpoint() is not None)
        cancelled = running_with_checkpoint()
        assert cancelled is not None
        subprocess.run(["scancel", jobs[str(cancelled)]["job"]], check=True,
                       env={**os.environ, **env})
        wait_until(lambda: not queued(env), 600)
        summary = json.loads((group / f"seed-{cancelled}" / "summary.json").read_text())
        assert summary["env_steps"] < STEPS and "SIGTERM" in summary["stop_reason"]

        resumed = rltrain("fit", "--resume", str(group), "--launcher", "slurm", "--wait",
                          cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        submitted = [line for line in resumed.stdout.splitlines() if "submitted as" in line]
        again = json.loads((group / "seeds.json").read_text())["slurm"][str(cancelled)]["job"]
        assert submitted == [f"seed {cancelled}: submitted as slurm job {again}"]
        assert again != jobs[str(cancelled)]["job"]
        assert resumed.stdout.count("finished before, left as it is") == SEEDS - 1
        assert f"{SEEDS} of {SEEDS} finished" in resumed.stdout

    record = json.loads((group / "seeds.json").read_text())["slurm"]
    assert all(entry["node"] for entry in record.values())  # where each seed ran
    rows = [json.loads(r) for r in (group / f"seed-{cancelled}" / "metrics.jsonl")
            .read_text().splitlines()]
    starts = [r["env_steps"] for r in rows if r["event"] == "start"]
    assert len(starts) == 2 and starts[1] > 0  # resumed from its checkpoint, not rerun
    for seed in range(SEEDS):
        assert json.loads((group / f"seed-{seed}" / "summary.json").read_text())[
            "env_steps"] == STEPS

    other = tmp_path / "ppo-lr"  # a second group, on this machine, to compare with
    local = subprocess.run([sys.executable, "-m", "rltrain.cli", "fit", *QUICK, "agent.lr=2.5e-4",
                            "--seeds", "0-2", "--jobs", "2", f"trainer.run_dir={other}"],
                           cwd=tmp_path, text=True, capture_output=True, timeout=600)
    assert local.returncode == 0, local.stdout + local.stderr
    compared = subprocess.run([sys.executable, "-m", "rltrain.cli", "compare", str(group),
                               str(other)], cwd=tmp_path, text=True, capture_output=True,
                              timeout=300)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    first_table = compared.stdout.split("\n\n")[0]
    runs = sorted(int(line.split("|")[2]) for line in first_table.splitlines()
                  if line.startswith("| G"))
    assert runs == [3, SEEDS], compared.stdout  # two groups: the Slurm one counts every seed


@pytest.mark.skipif(postgres_missing() is not None, reason=f"{postgres_missing()}")
def test_a_study_s_workers_run_as_slurm_jobs_on_a_shared_database(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    study = tmp_path / "study"
    with postgres() as url, slurm() as env:
        done = rltrain("tune", *QUICK, "trainer.num_steps=1024", "trainer.num_threads=1",
                       "--trials", "4", "--no-pruning", "--study", str(study), "--storage", url,
                       "--launcher", "slurm", "--workers", "2", "--slurm", "time=20", "--wait",
                       cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 workers of" in done.stdout
        name = json.loads((study / "tune.json").read_text())["name"]
        trials = optuna.load_study(study_name=name, storage=url).trials
    # four runs, each completed once: a trial whose worker's heartbeats came late under load is
    # failed, queued again by Optuna as a new trial (which takes the next Optuna number, so the
    # run numbers may skip one) and completed as the same run
    shown = [(t.number, run_number(t), t.state.name) for t in trials]
    complete = Counter(run_number(t) for t in trials if t.state.name == "COMPLETE")
    assert len(complete) == 4 and set(complete.values()) == {1}, shown
    assert {run_number(t) for t in trials} == set(complete), shown
    assert all(t.state.name == "COMPLETE" or (t.state.name == "FAIL" and any(
        run_number(u) == run_number(t) and u.number > t.number for u in trials))
        for t in trials), shown  # a failed trial is one that was taken over
    logs = [(study / f"worker-{k}.log").read_text() for k in range(2)]
    assert all("rltrain: slurm job" in log for log in logs)
    begun = {int(m) for log in logs for m in re.findall(r"\btrial (\d+): (?:started|resumed) \(",
                                                          log, flags=re.M)}
    assert begun == set(complete), logs  # each run begun by one worker or the other
    assert (study / "best.yaml").exists()
    refused = rltrain("tune", "--study", str(study), "--launcher", "slurm", cwd=tmp_path, env=env)
    assert refused.returncode == 2 and "need a database they share" in refused.stderr

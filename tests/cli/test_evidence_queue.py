"""``benchmarks.evidence``: a job whose pid file names a live process is another queue's, so a
queue started again beside runs still going skips it; a dead or missing one is not. ``--only``
orders the groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.evidence import Job, jobs, queued, running_elsewhere

JOB = Job("td3", "td3_halfcheetah_rltrain_seed0", ("benchmarks.mujoco_offpolicy",))


def test_a_live_pid_file_marks_a_job_run_elsewhere(tmp_path: Path) -> None:
    assert not running_elsewhere(tmp_path, JOB)  # no pid file
    (tmp_path / f"{JOB.results}.pid").write_text(str(os.getpid()))
    assert running_elsewhere(tmp_path, JOB)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    (tmp_path / f"{JOB.results}.pid").write_text(ended.stdout.strip())  # a process that ended
    assert not running_elsewhere(tmp_path, JOB)
    (tmp_path / f"{JOB.results}.pid").write_text("not a pid")
    assert not running_elsewhere(tmp_path, JOB)


def test_only_runs_the_groups_it_names_in_its_order() -> None:
    every = jobs(Path("runs"), None)
    order = queued(every, ["pong", "td3"])
    groups = [job.group for job in order]
    assert groups == ["pong"] * groups.count("pong") + ["td3"] * groups.count("td3")
    assert groups.count("pong") == 2 and groups.count("td3") == 10
    assert [job for job in order if job.group == "td3"] == [
        job for job in every if job.group == "td3"]  # a group keeps its own order
    assert queued(every, None) == every

"""The long learning runs behind the results page, as one queue: each is its own benchmark
command, resumable where its script is (rerun to continue), two at a time by default; a run
whose results file is already in ``benchmarks/results/`` is skipped, so starting the queue
again at the start of each sitting continues it.

    python -m benchmarks.evidence [--jobs 2] [--only pong td3 ...] [--dry-run]

``--only`` names the groups to run and their order: ``--only pong td3`` starts Pong's runs first.

Each command's output goes to ``--logs`` (default ``runs/evidence``), its run directory under
``--runs`` (default ``runs/evidence``). One torch thread per run. A running job's process id is
in ``--logs``/``<results>.pid`` while it runs: another queue on the same logs skips that job and
counts it in its ``--jobs`` (so a queue started again beside runs still going neither runs
them twice nor more than ``--jobs`` at once).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks._util import RESULTS


@dataclass(frozen=True)
class Job:
    """One benchmark run: its group, the results file it writes, and its arguments."""

    group: str
    results: str
    args: tuple[str, ...]


def jobs(runs: Path, cleanrl: str | None) -> list[Job]:
    """Every run of the queue: TD3 first (its runs are the shortest, so its group reaches a
    verdict soonest), then the long Atari runs."""
    out = []
    for seed in range(5):  # TD3 on HalfCheetah-v5, 100k env steps, beside SB3
        for library in ("rltrain", "sb3"):
            out.append(Job("td3", f"td3_halfcheetah_{library}_seed{seed}", (
                "benchmarks.mujoco_offpolicy", "--config", "td3_halfcheetah", "--seeds",
                str(seed), "--results", f"td3_halfcheetah_{library}_seed{seed}",
                "--run-dir", str(runs / f"td3-halfcheetah-{library}"),
                *(["--sb3"] if library == "sb3" else []))))
    # PPO on Breakout, 1M env steps, beside SB3; the group began with the preset's value
    # weight of then, 0.5. rltrain's runs again since its evaluations restart lives as envpool
    # does (new run directories), every evaluation's checkpoint kept to be played again; then
    # rltrain on Gymnasium's envs (SB3's env frame for frame) as a group of its own; then
    # envpool's envs again, their frames stacked by rltrain (refilled at each life's start);
    # then envpool's envs with games and lives started by rltrain, SB3's way.
    breakout = [("breakout", "rltrain", "breakout-rltrain-life-noops", (), ()),
                ("breakout", "sb3", "breakout-sb3", (), ()),
                ("breakout-gymnasium", "rltrain-gymnasium", "breakout-rltrain-gymnasium",
                 ("--backend", "gymnasium"), ()),
                ("breakout-envpool-refill", "rltrain-envpool-refill",
                 "breakout-rltrain-envpool-refill", ("--label", "rltrain-envpool-refill"), ()),
                ("breakout-envpool-sb3-starts", "rltrain-envpool-sb3-starts",
                 "breakout-rltrain-envpool-sb3-starts",
                 ("--label", "rltrain-envpool-sb3-starts"), ("env.atari.life_noops=false",))]
    for group, label, folder, extra, overrides in breakout:
        library = label.split("-")[0]
        keep = ("trainer.keep_last_checkpoints=10",) if library == "rltrain" else ()
        out += [Job(group, f"atari_ppo_breakout_{label}_seed{seed}", (
            "benchmarks.atari_ppo", "--library", library, *extra, "--seed", str(seed),
            "--run-dir", str(runs / f"{folder}-s{seed}"), "agent.vf_coef=0.5", *overrides,
            *keep)) for seed in range(5)]
    for group, library, folder in (("pong", "rltrain", "pong-dqn"),
                                   ("pong-sb3", "sb3", "pong-dqn-sb3")):  # DQN on Pong, 1M
        out += [Job(group, f"atari_dqn_pong_{library}_seed{seed}", (
            "benchmarks.atari_ppo", "--library", library, "--preset", "dqn_atari", "--game",
            "ALE/Pong-v5", "--seed", str(seed), "--run-dir", str(runs / f"{folder}-s{seed}")))
            for seed in (0, 1)]
    for seed in range(5):  # SAC with gSDE on MountainCarContinuous, RL-Zoo's entry, 50k
        for library in ("rltrain", "sb3"):
            name = f"sac_mountaincar_gsde_{library}_seed{seed}"
            out.append(Job("sac", name, (
                "benchmarks.sac_learning", "--config", "zoo:sac/MountainCarContinuous-v0",
                "--seeds", str(seed), "--threshold", "90", "--eval-interval", "2500",
                "--results", name, *(["--sb3"] if library == "sb3" else []))))
    if cleanrl is not None:  # DQN with CleanRL's settings beside CleanRL's dqn.py
        out.append(Job("cleanrl", "cleanrl_dqn", (
            "benchmarks.cleanrl_dqn", "--cleanrl", cleanrl, "--out", str(runs / "cleanrl-dqn"))))
    return out


def queued(every: list[Job], only: Sequence[str] | None) -> list[Job]:
    """The jobs of the groups in ``only`` (every job: None), group by group in the order
    ``only`` names them, each group's jobs in their own order."""
    if only is None:
        return every
    return sorted((job for job in every if job.group in only),
                  key=lambda job: list(only).index(job.group))


def running_elsewhere(logs: Path, job: Job) -> bool:
    """Whether another queue's process runs ``job`` now (its pid file names a live process)."""
    try:
        pid = int((logs / f"{job.results}.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="+",
                        help="groups, in the order to run them: breakout breakout-gymnasium "
                        "breakout-envpool-refill breakout-envpool-sb3-starts pong pong-sb3 td3 sac "
                        "cleanrl")
    parser.add_argument("--runs", type=Path, default=Path("runs/evidence"))
    parser.add_argument("--logs", type=Path, default=Path("runs/evidence"))
    parser.add_argument("--cleanrl", help="a CleanRL checkout (the cleanrl group needs one)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    todo = [job for job in queued(jobs(args.runs, args.cleanrl), args.only)
            if not (RESULTS / f"{job.results}.json").exists()]
    args.logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: list[tuple[Job, subprocess.Popen[bytes]]] = []
    while todo or running:
        todo = [job for job in todo if not (RESULTS / f"{job.results}.json").exists()]
        elsewhere = [job for job in todo if running_elsewhere(args.logs, job)]
        waiting = [job for job in todo if job not in elsewhere]
        while waiting and len(running) + len(elsewhere) < args.jobs:
            job = waiting.pop(0)
            todo.remove(job)
            print(f"{time.strftime('%H:%M:%S')} start {job.results}", flush=True)
            if args.dry_run:
                print("   python -m " + " ".join(job.args), flush=True)
                continue
            log = (args.logs / f"{job.results}.log").open("ab")
            process = subprocess.Popen([sys.executable, "-m", *job.args], stdout=log,
                                       stderr=subprocess.STDOUT, env=env)
            (args.logs / f"{job.results}.pid").write_text(str(process.pid))
            running.append((job, process))
        if args.dry_run:
            return
        if not running and not waiting:
            time.sleep(30)  # only jobs another queue runs: wait for them to end
            continue
        time.sleep(5)
        for job, process in [r for r in running if r[1].poll() is not None]:
            running.remove((job, process))
            (args.logs / f"{job.results}.pid").unlink(missing_ok=True)
            print(f"{time.strftime('%H:%M:%S')} end {job.results} (exit {process.returncode})",
                  flush=True)


if __name__ == "__main__":
    main()

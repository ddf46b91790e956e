"""SIGKILL one rank of a real two-process run around its first checkpoint save, and check that
the run directory it leaves is always resumable, or restartable with a message saying how.

Each trial launches ``torchrun --standalone --nproc-per-node=2 -m rltrain.cli fit`` (a DQN on
CartPole whose first save, a ``best`` then a ``checkpoint``, comes at 512 env steps), waits for
the first file of that save to appear in the checkpoint folder, waits a seeded random delay
(0 to ``--window`` ms: before, during or after the writes of the shards, the shared parts, the
manifest), and SIGKILLs a randomly chosen rank; torchrun then ends the other. The directory is
then judged with the real command line, as a user would meet it:

* **resumable**: ``Checkpointer.resolve("last")`` finds an intact checkpoint, and
  ``torchrun ... rltrain fit --resume RUN`` continues from it (exit status 0);
* **restartable (new fit)**: there is nothing to resume; ``rltrain fit --resume RUN`` says so
  (exit status 2, "nothing to resume", the command to start again), and the same
  ``torchrun ... rltrain fit`` as the killed one takes the directory (exit status 0);
* **restartable (--overwrite)**: as above, but the new fit is refused with advice to add
  ``--overwrite`` (never to resume), and the command ``--resume`` gave works;
* **BROKEN**: anything else (a refusal that says to resume what cannot be resumed, a resume that
  fails, a restart that fails).

    python scripts/kill_during_save.py [--trials 10] [--seed 0] [--window 60] [--keep]

Prints a line per trial and the counts; exits with status 1 when a trial ends BROKEN.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rltrain.checkpoint import Checkpointer, read_checkpoint  # noqa: E402
from rltrain.runtime.distributed import TORCHRUN_VARIABLES  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
#: The killed run: evaluated and saved every 512 env steps (first save: best-512, then
#: checkpoint-512), networks big enough (2 MB) that a save takes some milliseconds.
FIT = ["fit", "dqn_cartpole", "trainer.num_steps=1024", "trainer.checkpoint_interval=512",
       "trainer.eval_interval=512", "trainer.eval_episodes=2", "trainer.enable_progress_bar=false",
       "trainer.logger=false", "agent.hidden_sizes=[512,512]"]


@dataclass
class Trial:
    """One kill and how the directory it left ended."""

    index: int
    rank: int
    delay_ms: float
    left: list[str]
    outcome: str = "BROKEN"
    detail: str = ""


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=environment(), text=True, capture_output=True,
                          timeout=timeout)


#: What a rank sometimes prints when it aborts in torch's teardown at exit, after the run
#: ended (seen without any kill too): such a run counts as finished when rank 0 reported it.
TEARDOWN_ABORT = "terminate called without an active exception"


def finished(done: subprocess.CompletedProcess[str]) -> bool:
    """The torchrun ``rltrain fit`` ran to its end (see :data:`TEARDOWN_ABORT`)."""
    return done.returncode == 0 or ("run directory:" in done.stdout
                                    and TEARDOWN_ABORT in done.stdout + done.stderr)


def rank_processes(launcher: subprocess.Popen[bytes]) -> dict[int, psutil.Process]:
    """The launcher's worker processes by rank (from the RANK torchrun gives each)."""
    found: dict[int, psutil.Process] = {}
    try:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            try:
                rank = child.environ().get("RANK")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if rank is not None and rank.isdigit():
                found[int(rank)] = child
    except psutil.NoSuchProcess:
        pass
    return found


def kill_around_first_save(run_dir: Path, rank: int, delay: float, cwd: Path) -> str:
    """Launch the run; SIGKILL ``rank`` ``delay`` seconds after its first save starts. Returns
    what happened, when it did not go as planned ('' when it did)."""
    launcher = subprocess.Popen([*TORCHRUN, "-m", "rltrain.cli", *FIT,
                                 f"trainer.run_dir={run_dir}"], cwd=cwd, env=environment(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    folder, deadline = run_dir / "checkpoints", time.monotonic() + 120
    try:
        ranks: dict[int, psutil.Process] = {}
        while not (folder.is_dir() and any(os.scandir(folder))):
            if launcher.poll() is not None or time.monotonic() > deadline:
                return f"the run ended (status {launcher.poll()}) before its first save"
            if len(ranks) < 2:
                ranks = rank_processes(launcher)
            time.sleep(0.0005)
        time.sleep(delay)
        if rank not in ranks:
            return "rank processes not found"
        try:
            ranks[rank].send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            return f"rank {rank} had already ended"
        launcher.wait(timeout=90)
        return ""
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def judge(run_dir: Path, cwd: Path) -> tuple[str, str]:
    """The outcome of a killed run's directory, and its evidence (see the module docstring)."""
    folder = run_dir / "checkpoints"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            last: Path | None = Checkpointer(folder).resolve("last")
        except FileNotFoundError:
            last = None
    if last is not None:
        steps = read_checkpoint(last)["progress"]["env_steps"]
        done = run([*TORCHRUN, "-m", "rltrain.cli", "fit", "--resume", str(run_dir),
                    f"trainer.num_steps={steps + 256}"], cwd)
        warned = f", warned: {caught[0].message}" if caught else ""
        if finished(done):
            return "resumable", f"resumed from {last.name}{warned}"
        return "BROKEN", (f"resume from {last.name} failed (status {done.returncode}): "
                          f"{_error(done.stderr)}\n{_tail(done)}")
    resumed = run([sys.executable, "-m", "rltrain.cli", "fit", "--resume", str(run_dir)], cwd)
    said = _error(resumed.stderr)
    advice = re.search(r"\(rltrain fit (--overwrite \S+ trainer\.run_dir=\S+),", said)
    if resumed.returncode != 2 or "nothing to resume" not in said:
        return "BROKEN", f"--resume: status {resumed.returncode}: {said}\n{_tail(resumed)}"
    fresh = run([*TORCHRUN, "-m", "rltrain.cli", *FIT, f"trainer.run_dir={run_dir}"], cwd)
    if finished(fresh):
        note = re.search(r"rltrain: warning: (\S+ holds no complete checkpoint[^\n]*)",
                         fresh.stderr)
        return "restartable (new fit)", (f"--resume: {said}; new fit: "
                                         + (f"warned: {note.group(1)}" if note else "no warning"))
    refused = _error(fresh.stderr)
    if "--overwrite" not in refused or "Resume it" in refused or advice is None:
        return "BROKEN", f"new fit refused: {refused}\n{_tail(fresh)}"
    overwritten = run([*TORCHRUN, "-m", "rltrain.cli", "fit", *advice.group(1).split()], cwd)
    if finished(overwritten):
        return "restartable (--overwrite)", f"new fit refused: {refused}; --resume: {said}"
    return "BROKEN", (f"the advised {advice.group(1)} failed: {_error(overwritten.stderr)}"
                      f"\n{_tail(overwritten)}")


def _tail(done: subprocess.CompletedProcess[str], chars: int = 3000) -> str:
    """The end of a failed command's output, for the report."""
    return f"--- its output ends:\n{(done.stdout + done.stderr)[-chars:]}"


def _error(stderr: str) -> str:
    """The ``rltrain: error:`` line of a command's output (or its last line)."""
    lines = stderr.splitlines()
    said = ([line for line in lines if "rltrain: error:" in line]
            or [line for line in lines if re.search(r"\w+Error\b", line)]
            or [line for line in lines if line.strip() and not line.startswith("=")][-1:])
    return said[0].strip() if said else ""


def trial(index: int, rng: random.Random, window_ms: float, work: Path) -> Trial:
    rank, delay_ms = rng.choice((0, 1)), rng.uniform(0.0, window_ms)
    cwd = work / f"trial-{index}"
    cwd.mkdir(parents=True)
    run_dir = cwd / "run"
    result = Trial(index, rank, delay_ms, [])
    problem = kill_around_first_save(run_dir, rank, delay_ms / 1000, cwd)
    folder = run_dir / "checkpoints"
    result.left = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if problem:
        result.outcome, result.detail = "not killed", problem
        return result
    result.outcome, result.detail = judge(run_dir, cwd)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=float, default=60.0,
                        help="kill within this many ms after the first save's first file")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--json", type=Path, default=None, help="write the trials here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kill-during-save-"))
    trials: list[Trial] = []
    try:
        for index in range(args.trials):
            result = trial(index, rng, args.window, work)
            trials.append(result)
            print(f"#{index:<2} rank {result.rank} killed {result.delay_ms:5.1f} ms after the "
                  f"first file; left {', '.join(result.left) or 'nothing'}\n    -> "
                  f"{result.outcome}: {result.detail}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    counts: dict[str, int] = {}
    for result in trials:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    print("counts: " + ", ".join(f"{name}: {n}" for name, n in sorted(counts.items())))
    if args.keep:
        print(f"run directories kept in {work}")
    if args.json is not None:
        args.json.write_text(json.dumps([vars(t) for t in trials], indent=2) + "\n")
    return 1 if counts.get("BROKEN") else 0


if __name__ == "__main__":
    sys.exit(main())

"""Several ``rltrain tune`` workers on one study in a real PostgreSQL database, one worker
SIGKILLed twice mid-trial (it comes back once in between): the evidence that a dead worker's
trials are taken over and resumed from their checkpoints, each trial completed once.

    python -m benchmarks.study_workers --trials 24 --workers 3

prints each trial's attempts (Optuna's numbers), its run's segments (the env step each
``fit`` started from), its recorded objective beside the one recomputed here from the run's
``metrics.jsonl``, and whether ``best.yaml`` is the best trial's config.
``tests/cli/test_tune_workers.py`` runs it small.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.servers import postgres


def config(steps: int, interval: int) -> list[str]:
    """PPO on CartPole, small, evaluated every ``interval`` env steps (a checkpoint each)."""
    return ["ppo_cartpole", f"trainer.num_steps={steps}", f"trainer.eval_interval={interval}",
            "trainer.eval_episodes=2", "trainer.logger=false", "strategy.num_envs=4",
            "strategy.n_steps=16", "strategy.batch_size=64", "agent.hidden_sizes=[16]",
            "trainer.return_threshold=null", "trainer.num_threads=1"]


def worker(study: Path, url: str, first: list[str] | None = None) -> subprocess.Popen[str]:
    """An ``rltrain tune`` worker of ``study``; ``first``: the config and options of the one
    that creates it."""
    return subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "tune", *(first or []), "--study", str(study),
         "--storage", url], cwd=study.parent, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)


def held_with_checkpoint(study: Path, pid: int, seen: dict[Path, int]) -> int | None:
    """The run number of a trial that worker ``pid`` runs now (its ``rltrain fit`` is the
    worker's child) and that saved a checkpoint since it was first seen held (``seen``: the
    length of each such run's metrics then; only the holder appends to them), else ``None``."""
    for run in sorted(study.glob("trial-*")):
        try:
            holder = json.loads((run / ".rltrain.lock").read_text())["pid"]
            parent = int(Path(f"/proc/{holder}/stat").read_text().rsplit(")", 1)[1].split()[1])
            text = (run / "metrics.jsonl").read_text() if parent == pid else ""
        except (OSError, ValueError, KeyError, IndexError):
            continue
        if parent != pid:
            continue
        since = seen.setdefault(run, len(text))
        if '"event": "checkpoint"' in text[since:]:  # written whole by this run's process
            return int(run.name.removeprefix("trial-"))
    return None


def kill_mid_trial(study: Path, process: subprocess.Popen[str], timeout: float = 600) -> int:
    """SIGKILL ``process`` (a worker) once a trial it runs saved a checkpoint; that trial's
    run number."""
    deadline = time.monotonic() + timeout
    seen: dict[Path, int] = {}
    while (number := held_with_checkpoint(study, process.pid, seen)) is None:
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"worker {process.pid} ran no trial with a checkpoint to kill")
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


@dataclass
class Outcome:
    """What the study left: Optuna's trials, the run numbers killed, the workers' output."""

    study: Path
    trials: list[Any]
    killed: list[int]
    outputs: list[str]
    setup: Any


def run_study(folder: Path, trials: int, workers: int, steps: int, interval: int,
              journal: bool = False) -> Outcome:
    """The study (module docstring) in ``folder``, on a PostgreSQL server started for it, or
    with ``journal`` in Optuna's journal file beside it."""
    import optuna

    from rltrain.cli.study_storage import open_storage
    from rltrain.cli.tune_record import read_record

    study = folder / "study"
    server = contextlib.nullcontext(f"journal:{folder / 'journal.log'}") if journal \
        else postgres()
    with server as url:
        first = worker(study, url, [*config(steps, interval), "--trials", str(trials),
                                    "--no-pruning", "--heartbeat", "2"])
        deadline = time.monotonic() + 120
        while not (study / "tune.json").exists():
            if time.monotonic() > deadline or first.poll() is not None:
                raise RuntimeError(f"the first worker did not start the study: "
                                   f"{first.communicate()[0][-2000:]}")
            time.sleep(0.1)
        others = [worker(study, url) for _ in range(workers - 1)]
        killed = [kill_mid_trial(study, first)]
        again = worker(study, url)  # the killed worker's machine comes back, and is lost again
        killed.append(kill_mid_trial(study, again))
        outputs = [p.communicate(timeout=3600)[0] for p in others]
        if any(p.returncode for p in others):
            raise RuntimeError("a worker failed:\n" + "\n".join(o[-2000:] for o in outputs))
        setup = read_record(study / "tune.json")
        loaded = optuna.load_study(study_name=setup.name,
                                   storage=open_storage(optuna, url, setup.heartbeat))
        return Outcome(study, loaded.trials, killed, outputs, setup)


def first_attempt(trial: Any) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


def report(outcome: Outcome) -> list[str]:
    """One line per run (a trial and its attempts): the attempts' states; for a completed run,
    its segments and its recorded and recomputed objective."""
    lines = []
    attempts: dict[int, list[Any]] = {}
    for t in sorted(outcome.trials, key=lambda t: t.number):
        attempts.setdefault(first_attempt(t), []).append(t)
    for number, tried in sorted(attempts.items()):
        line = (f"trial-{number:04d}: attempts "
                + ", ".join(f"{t.number} {t.state.name}" for t in tried))
        done = [t for t in tried if t.state.name == "COMPLETE"]
        if done:
            run = outcome.study / f"trial-{number:04d}"
            rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
            starts = [r["env_steps"] for r in rows if r["event"] == "start"]
            found = evaluations(run)
            line += (f"; segments from env steps {starts}; objective {done[-1].value:.4f} "
                     f"recorded, {sum(found.values()) / len(found):.4f} recomputed")
        lines.append(line)
    return lines


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--interval", type=int, default=512)
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the study folder there (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        outcome = run_study(folder, args.trials, args.workers, args.steps, args.interval)
        print(f"{args.trials} trials, {args.workers} workers, on PostgreSQL; worker SIGKILLed "
              f"twice, mid-trial in runs {outcome.killed}")
        print("\n".join(report(outcome)))
        complete = Counter(first_attempt(t) for t in outcome.trials
                           if t.state.name == "COMPLETE")
        once = set(complete.values()) == {1}
        print(f"runs completed: {len(complete)} of {args.trials}, each once: {once}")
        best = max((t for t in outcome.trials if t.state.name == "COMPLETE"),
                   key=lambda t: t.value)
        written = (outcome.study / "best.yaml").read_text()
        composed = outcome.setup.compose(best.params)
        same = all(f"{key.split('.', 1)[1]}: {composed[key.split('.')[0]][key.split('.', 1)[1]]}"
                   in written for key in best.params)
        print(f"best: trial-{first_attempt(best):04d}, {best.value:.4f}; best.yaml holds its "
              f"settings: {same}")
        if len(complete) != args.trials or not once or not same:
            print("FAILED: every run must complete once and best.yaml be the best's settings; "
                  "the workers' output follows", file=sys.stderr)
            print("\n\n".join(outcome.outputs), file=sys.stderr)
            raise SystemExit(1)


if __name__ == "__main__":
    main()

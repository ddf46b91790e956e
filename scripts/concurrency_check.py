"""Concurrency check: two real ``rltrain fit`` processes race for one run directory.

Two scenarios, each with two child processes started at the same instant (each imports rltrain,
says it is ready, then waits for a "go" file; the parent creates it once both are ready, and
both call ``rltrain.cli.app.main``, what the ``rltrain`` console script runs):

* ``fits``: two fresh ``rltrain fit`` on one new run directory, seeds 1 and 2;
* ``resumes``: two ``rltrain fit --resume RUN_DIR`` of the finished run the ``fits`` scenario
  left, to different ``trainer.num_steps`` (4,000 and 4,500), so that each one's results can be
  told apart.

Exactly one of the two must train to the end (exit status 0); the other must be refused with
exit status 2 and one ``rltrain: error:`` line naming the winner's PID ("... is in use by
another rltrain run (PID 1234 on host, since ...)"), or, for fresh fits only, saying that the
directory already holds a run (rltrain checks that before it touches the lock file: a loser
that gets there after the winner's first files is refused so), before it prints or writes
anything (no model summary, no second ``start`` row in metrics.jsonl). The run directory
must then hold one run, not a mix: every ``start`` row of metrics.jsonl has the winner's seed,
env steps never go back within a run and each resume starts where the run before it ended, the
last row is the winner's ``end`` at its ``num_steps``; manifest.json's ``last`` and ``best``
checkpoints (and every listed checkpoint) load and hold the winner's seed and step counts;
summary.json and config.yaml agree.

:func:`killed_holder` is a third scenario (used by tests/scenarios/test_concurrency.py): a fit
killed
with SIGKILL while it trains leaves its lock released, and ``--resume`` then succeeds.

    python scripts/concurrency_check.py [--repeat 20] [--keep]

Each repetition runs in a fresh temporary folder (kept when something failed). Prints a line per
repetition and scenario (who won, how the loser was refused, whether the run is mixed), how
often each refusal was seen, how many repetitions ended as they must, and last ``N/N runs
unmixed`` (a repetition's run counts when neither race mixed it); exits with status 1 on any
mixed run or unexpected outcome.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from rltrain.checkpoint import MANIFEST, Checkpointer  # noqa: E402
from scripts.run_checks import check_run  # noqa: E402

#: Overrides that keep every run small and quiet on disk (no TensorBoard, no progress bar).
SMALL = ["agent.hidden_sizes=[16]", "strategy.warmup_steps=100", "trainer.eval_interval=500",
         "trainer.logger=false", "trainer.enable_progress_bar=false",
         "trainer.return_threshold=null"]
#: Env steps of a fresh run (a few seconds of training: the loser arrives while it trains).
FIT_STEPS = 2_000
#: The seeds of the two fresh fits.
SEEDS = (1, 2)
#: The num_steps the two resumes continue the finished run to.
RESUME_STEPS = (4_000, 4_500)

#: The racing child: import rltrain, say so, wait for the go file, run the rltrain command.
CHILD = """\
import os
import sys
import time

go, ready = sys.argv[1], sys.argv[2]
from rltrain.cli import main

open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.0005)
began = time.time()
try:
    code = main(sys.argv[3:])
finally:  # when this process went and when it ended (seconds since the epoch)
    with open(ready + ".times", "w") as times:
        times.write(f"{began} {time.time()}")
raise SystemExit(code)
"""

#: What a refused process's stderr says, by refusal.
LOCKED = re.compile(r"is in use by another rltrain run \(PID (\d+) on ")
HOLDS_RUN = "already holds a run"
NOT_WRITTEN = "its PID is not yet written"
#: Lines that show a process got as far as training (the model summary, the console).
STARTED_MARKS = ("q_network", "Total: ", "training for ", "resuming at ")


def rltrain_command(*args: str) -> list[str]:
    """``python -m rltrain.cli ARGS``."""
    return [sys.executable, "-m", "rltrain.cli", *args]


def fit_args(run_dir: Path, seed: int, num_steps: int = FIT_STEPS,
             extra: Sequence[str] = ()) -> list[str]:
    """``rltrain fit`` arguments of a small fresh run."""
    return ["fit", "dqn_cartpole", f"trainer.num_steps={num_steps}", f"strategy.seed={seed}",
            f"trainer.run_dir={run_dir}", *SMALL, *extra]


def resume_args(run_dir: Path, num_steps: int) -> list[str]:
    """``rltrain fit --resume RUN_DIR`` arguments continuing the run to ``num_steps``."""
    return ["fit", "--resume", str(run_dir), f"trainer.num_steps={num_steps}",
            "trainer.enable_progress_bar=false"]


def child_env() -> dict[str, str]:
    """The children's environment: unbuffered output, this checkout's rltrain first."""
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(path)}


@dataclass
class Outcome:
    """How one child process ended."""

    label: str
    args: list[str]
    pid: int = 0
    code: int | None = None
    stdout: str = ""
    stderr: str = ""
    #: When a racing child saw the go file and when its command returned (``time.time()``).
    went: float | None = None
    ended: float | None = None

    def output(self) -> str:
        took = f", {self.ended - self.went:.3f} s after go" if self.went and self.ended else ""
        return (f"--- {self.label} (PID {self.pid}, exit {self.code}{took}) stdout:\n"
                f"{self.stdout}\n--- stderr:\n{self.stderr}")


class Process:
    """A child process whose output goes to two files in ``work``."""

    def __init__(self, command: list[str], outcome: Outcome, work: Path, name: str) -> None:
        self.outcome = outcome
        self.out_path, self.err_path = work / f"{name}.out", work / f"{name}.err"
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.process = subprocess.Popen(command, cwd=work, env=child_env(), stdout=out,
                                            stderr=err)
        outcome.pid = self.process.pid

    def wait(self, timeout: float) -> Outcome:
        try:
            self.outcome.code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.outcome.code = self.process.wait()
            self.outcome.stderr += f"\n[killed: still running after {timeout:.0f} s]"
        self.outcome.stdout = self.out_path.read_text() + self.outcome.stdout
        self.outcome.stderr = self.err_path.read_text() + self.outcome.stderr
        return self.outcome

    def kill(self) -> Outcome:
        os.kill(self.process.pid, signal.SIGKILL)
        return self.wait(timeout=30)


def race(work: Path, commands: Sequence[tuple[str, list[str]]], *,
         timeout: float = 120.0) -> list[Outcome]:
    """Start one child per ``(label, rltrain args)``, let all of them go at the same instant
    (once each has imported rltrain), and wait for them to end."""
    gate = Path(tempfile.mkdtemp(prefix="gate-", dir=work))
    go = gate / "go"
    processes = []
    for number, (label, args) in enumerate(commands):
        ready = gate / f"ready-{number}"
        command = [sys.executable, "-c", CHILD, str(go), str(ready), *args]
        processes.append((ready, Process(command, Outcome(label, args), work,
                                         f"{gate.name}-{number}")))
    deadline = time.monotonic() + timeout
    while not all(ready.exists() or p.process.poll() is not None for ready, p in processes):
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    go.touch()
    outcomes = [p.wait(max(1.0, deadline - time.monotonic())) for _, p in processes]
    for (ready, _), outcome in zip(processes, outcomes, strict=True):
        times = Path(f"{ready}.times")
        if times.is_file():
            outcome.went, outcome.ended = map(float, times.read_text().split())
    return outcomes


@dataclass
class RaceResult:
    """One scenario's outcome: who won, how the other was refused, what the run holds."""

    scenario: str
    outcomes: list[Outcome]
    winner: Outcome | None = None
    loser: Outcome | None = None
    refusal: str = ""
    #: The loser's refusal or the processes' exit statuses were not as they must be.
    unexpected: list[str] = field(default_factory=list)
    #: The run directory holds something else than the winner's run alone.
    mixed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.mixed

    def describe(self) -> str:
        if self.winner is None or self.loser is None:
            codes = ", ".join(f"{o.label} exit {o.code}" for o in self.outcomes)
            head = f"no single winner ({codes})"
        else:
            head = (f"{self.winner.label} won (PID {self.winner.pid}); {self.loser.label} "
                    f"refused: {self.refusal}")
        state = "MIXED: " + "; ".join(self.mixed) if self.mixed else "unmixed"
        extra = f"; UNEXPECTED: {'; '.join(self.unexpected)}" if self.unexpected else ""
        return f"{head}; {state}{extra}"

    def report(self) -> str:
        return "\n".join([self.describe(), *(o.output() for o in self.outcomes)])


def judge(scenario: str, outcomes: list[Outcome], *, allow_holds_run: bool) -> RaceResult:
    """Find the winner (exit 0) and the loser (exit 2), and check how the loser was refused."""
    result = RaceResult(scenario, outcomes)
    winners = [o for o in outcomes if o.code == 0]
    if len(winners) != 1 or len(outcomes) != 2:
        result.unexpected.append(
            f"{len(winners)} of {len(outcomes)} processes exited 0 (exactly one must): "
            + ", ".join(f"{o.label} exit {o.code}" for o in outcomes))
        return result
    winner = result.winner = winners[0]
    loser = result.loser = next(o for o in outcomes if o is not winner)
    if loser.code != 2:
        result.unexpected.append(f"the loser ({loser.label}) exited {loser.code}, not 2")
    if "Traceback" in loser.stderr or "Traceback" in winner.stderr:
        result.unexpected.append("a traceback on stderr")
    errors = [line for line in loser.stderr.splitlines() if line.startswith("rltrain: ")]
    lines = [line for line in loser.stderr.splitlines() if line.strip()]
    if len(errors) != 1 or lines[-1:] != errors:
        result.unexpected.append("the loser's stderr does not end with one 'rltrain: error:' "
                                 "line")
    message = errors[-1] if errors else ""
    locked = LOCKED.search(message)
    if locked and int(locked.group(1)) == winner.pid:
        result.refusal = "in use, names the winner's PID"
    elif locked:
        result.refusal = "in use, names another PID"
        result.unexpected.append(f"the refusal names PID {locked.group(1)}, not the winner's "
                                 f"PID {winner.pid} (a stale PID left in the lock file?)")
    elif NOT_WRITTEN in message:
        result.refusal = "in use, names no PID"
        result.unexpected.append(f"the refusal names no PID ({NOT_WRITTEN!r}): the winner held "
                                 "the lock but had not yet written its PID into the lock file")
    elif HOLDS_RUN in message:
        # rltrain refuses an existing run before it touches the lock file (and again under
        # the lock): a loser that gets there after the winner's first files is refused so.
        listed = message.split(HOLDS_RUN, 1)[1].split(")", 1)[0]
        result.refusal = ("already holds a run (the winner had finished)"
                          if "summary.json" in listed  # written at the end, under the lock
                          else "already holds a run (the winner's first files, pre-lock)")
        if not allow_holds_run:
            result.unexpected.append(f"refused with 'already holds a run': {message}")
    else:
        result.refusal = "other"
        result.unexpected.append("the loser was not refused for the lock: "
                                 f"{message or loser.stderr.strip()[-300:]!r}")
    started = [mark for mark in STARTED_MARKS if mark in loser.stdout + loser.stderr]
    if started:
        result.unexpected.append(f"the loser printed {started} before it was refused: it got "
                                 "past the point where it must be refused")
    if loser.stdout.strip():
        result.unexpected.append(f"the loser printed on stdout: {loser.stdout.strip()[:200]!r}")
    if "done: " not in winner.stdout:
        result.unexpected.append("the winner did not print its 'done:' line")
    return result


def racing_fits(work: Path, seeds: tuple[int, int] = SEEDS, num_steps: int = FIT_STEPS
                ) -> tuple[RaceResult, Path]:
    """Two fresh fits of different seeds on one new run directory; returns the result and the
    run directory."""
    run_dir = work / "run"
    outcomes = race(work, [(f"seed {seed}", fit_args(run_dir, seed, num_steps))
                           for seed in seeds])
    result = judge("fits", outcomes, allow_holds_run=True)
    if result.winner is not None:
        seed = seeds[outcomes.index(result.winner)]
        result.mixed = check_run(run_dir, seed=seed, num_steps=num_steps, starts=1)
    return result, run_dir


def racing_resumes(run_dir: Path, work: Path, steps: tuple[int, int] = RESUME_STEPS
                   ) -> RaceResult:
    """Two ``--resume run_dir`` of one finished run, to different num_steps."""
    saved = OmegaConf.load(run_dir / "config.yaml")
    seed, before = int(saved.strategy.seed), int(saved.trainer.num_steps)
    outcomes = race(work, [(f"to {n:,}", resume_args(run_dir, n)) for n in steps])
    result = judge("resumes", outcomes, allow_holds_run=False)
    if result.winner is not None:
        num_steps = steps[outcomes.index(result.winner)]
        if f"resuming at {before:,}" not in result.winner.stdout:
            result.unexpected.append(f"the winner did not print 'resuming at {before:,}'")
        result.mixed = check_run(run_dir, seed=seed, num_steps=num_steps, starts=2)
    return result


@dataclass
class KillResult:
    """A fit killed with SIGKILL while it trained, then resumed."""

    killed: Outcome
    lock_text: str
    killed_at: int
    resumed: Outcome
    problems: list[str]

    def report(self) -> str:
        return "\n".join([*self.problems, f"lock file after the kill: {self.lock_text}",
                          self.killed.output(), self.resumed.output()])


def killed_holder(work: Path, seed: int = 3, timeout: float = 120.0) -> KillResult:
    """Start a long fit, SIGKILL it once its first checkpoint is listed (it trains on), then
    ``--resume`` it 1,000 env steps further: the kernel released the lock, so the resume runs."""
    run_dir = work / "run"
    checkpoints = run_dir / "checkpoints"
    fitting = Process(rltrain_command(*fit_args(run_dir, seed, 50_000,
                                                ["trainer.checkpoint_interval=200"])),
                      Outcome("killed fit", []), work, "killed")
    deadline = time.monotonic() + timeout
    problems: list[str] = []
    while not (checkpoints / MANIFEST).is_file() or not Checkpointer(checkpoints).manifest(
            ).checkpoints:
        if fitting.process.poll() is not None or time.monotonic() > deadline:
            problems.append("the fit ended or stalled before its first checkpoint")
            break
        time.sleep(0.01)
    killed = fitting.kill()
    if killed.code != -signal.SIGKILL:
        problems.append(f"the fit exited {killed.code} (not killed)")
    lock_text = (run_dir / ".rltrain.lock").read_text() if (run_dir / ".rltrain.lock"
                                                            ).exists() else ""
    killed_at = max((e.env_steps for e in Checkpointer(checkpoints).manifest().checkpoints),
                    default=0)
    target = killed_at + 1_000
    resuming = Process(rltrain_command(*resume_args(run_dir, target)),
                       Outcome("resume", resume_args(run_dir, target)), work, "resume")
    resumed = resuming.wait(timeout)
    if resumed.code != 0:
        problems.append(f"the resume exited {resumed.code}, not 0")
    if f"resuming at {killed_at:,}" not in resumed.stdout:
        problems.append(f"the resume did not print 'resuming at {killed_at:,}'")
    problems += check_run(run_dir, seed=seed, num_steps=target, starts=2)
    return KillResult(killed, lock_text, killed_at, resumed, problems)


def repetition(work: Path) -> tuple[RaceResult, RaceResult | None]:
    """One repetition: the fits race in ``work``, then the resumes race of the run it left
    (not run when that run has no single winner or is mixed)."""
    fits, run_dir = racing_fits(work)
    if fits.winner is None or fits.mixed:
        return fits, None
    return fits, racing_resumes(run_dir, work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true",
                        help="keep every repetition's folder (failed ones are always kept)")
    args = parser.parse_args()
    began = time.monotonic()
    unmixed = expected = 0
    refusals: dict[str, int] = {}
    for number in range(1, args.repeat + 1):
        work = Path(tempfile.mkdtemp(prefix=f"concurrency-{number:02d}-"))
        fits, resumes = repetition(work)
        for result in (fits, resumes):
            if result is None:
                print(f"rep {number:2d} resumes: not run (the fits race left no single "
                      "unmixed run)", flush=True)
                continue
            print(f"rep {number:2d} {result.scenario + ':':8} {result.describe()}", flush=True)
            key = f"{result.scenario}: {result.refusal or 'no single winner'}"
            refusals[key] = refusals.get(key, 0) + 1
            if not result.ok:
                print(result.report(), file=sys.stderr, flush=True)
        ok = resumes is not None and fits.ok and resumes.ok
        unmixed += resumes is not None and not fits.mixed and not resumes.mixed
        expected += ok
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"       kept {work}", flush=True)
    print()
    print("how the loser was refused:")
    for refusal, count in sorted(refusals.items()):
        print(f"  {count:3d} x {refusal}")
    print(f"{expected}/{args.repeat} repetitions ended as they must (one winner, the other "
          f"refused before writing); {time.monotonic() - began:.0f} s")
    print(f"{unmixed}/{args.repeat} runs unmixed")
    return 0 if expected == unmixed == args.repeat else 1


if __name__ == "__main__":
    raise SystemExit(main())

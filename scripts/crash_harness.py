"""Crash harness: SIGKILL a real training process again and again, and check it always recovers.

A small DQN CartPole-v1 run (checkpoint every 100 env steps, keep the last 3, best.pt on every
better evaluation) is started in a child process, killed with SIGKILL at seeded random moments,
and resumed with ``ckpt_path="last"``, until it has been killed ``--kills`` times; then it is
let to finish. Kills are of three kinds:

* ``write``: the harness polls the checkpoint folder and kills the moment a temporary file of
  a checkpoint write appears (``.checkpoint-*.pt.*.tmp``, ``.best.pt.*.tmp``,
  ``.manifest.json.*.tmp``), at once or a few milliseconds later (to land in the rename, the
  manifest rewrite, the ``last.pt`` link or the retention step);
* ``training``: a random moment while training;
* ``startup``: a random moment after launch, often while the process starts or loads the
  checkpoint it resumes from.

The table's *moment* is what the harness saw when it sent the signal ("writing manifest.json":
that file's temporary file had just appeared); a kill counts as *during a write* when a new
temporary file is still there once the process is dead (it was killed between creating and
renaming it). A kill that lands just after the rename hits the steps that follow it (the
manifest rewrite, the ``last.pt`` link, retention). After every kill the harness checks:

* every checkpoint listed in ``manifest.json`` (and its ``best`` entry) loads with
  ``read_checkpoint``, has the listed size and SHA-256 and holds the listed env steps; no
  listed file is a temporary file; ``last`` is one of the listed checkpoints; the ``last.pt``
  and ``best.pt`` links, when present, load;
* ``Checkpointer(run_dir / "checkpoints").resolve("last")`` returns the manifest's ``last``
  checkpoint, without skipping anything;
* the next run resumes from it: its Start event's env steps equal that checkpoint's.

At the end the run must finish with exit status 0 and its last checkpoint (and summary.json)
must hold ``--steps`` env steps. Leftover ``.tmp`` files are allowed (and counted).

    python scripts/crash_harness.py [--kills 20] [--seed 0] [--steps N] [--keep]

Prints a table and ``N/N kills recovered``, writes benchmarks/results/crash_harness.json and
exits with status 1 on any failure.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._util import table, write_results  # noqa: E402
from rltrain.checkpoint import MANIFEST, Checkpointer, file_sha256, read_checkpoint  # noqa: E402

#: Env steps between checkpoints in the child run.
CHECKPOINT_INTERVAL = 100

#: The child: the Trainer the brief describes, resuming from "last" when a checkpoint exists.
CHILD = '''\
import inspect
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.checkpoint import Checkpointer
from rltrain.observe.processor import Subscriber


class ReportStart(Subscriber):
    def on_start(self, event, metrics):
        print(f"CRASH-HARNESS START {event.start_env_steps}", flush=True)


run_dir, num_steps = Path(sys.argv[1]), int(sys.argv[2])
checkpoints = run_dir / "checkpoints"
ckpt_path = None
try:
    resolved = Checkpointer(checkpoints).resolve("last")
    ckpt_path = "last"
    print(f"CRASH-HARNESS RESUME {resolved.name}", flush=True)
except FileNotFoundError:
    listed = Checkpointer(checkpoints).manifest().checkpoints
    if listed or list(checkpoints.glob("checkpoint-*.pt")):
        print("CRASH-HARNESS ERROR checkpoints exist but none resolves", flush=True)
        sys.exit(3)
    print("CRASH-HARNESS FRESH", flush=True)
extra = {}
if ckpt_path is None and "overwrite" in inspect.signature(Trainer).parameters:
    extra["overwrite"] = True  # a run killed before its first checkpoint left logs behind
trainer = Trainer(
    num_steps=num_steps,
    checkpoint_interval=CHECKPOINT_INTERVAL,
    keep_last_checkpoints=3,
    run_dir=run_dir,
    logger=False,
    enable_progress_bar=False,
    callbacks=[ReportStart()],
    strategy=OffPolicyStrategy(OffPolicyConfig(
        warmup_steps=200, train_interval=50, train_steps=8, buffer_size=20000)),
    eval_interval=500,
    eval_episodes=2,
    **extra,
)
trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[64, 64])), ckpt_path=ckpt_path)
print("CRASH-HARNESS DONE", flush=True)
'''.replace("CHECKPOINT_INTERVAL", str(CHECKPOINT_INTERVAL))

#: Temporary files of a write in progress, by kind.
TMP_PATTERNS = {
    "link": re.compile(r"^\.(last|best)\.pt\.\d+\.tmp$"),  # last.pt / best.pt swapped in
    "checkpoint": re.compile(r"^\.checkpoint-\d+\.pt\..*\.tmp$"),
    "best": re.compile(r"^\.best(-\d+)?\.pt\..*\.tmp$"),
    "manifest": re.compile(r"^\.manifest\.json\..*\.tmp$"),
}
#: Convenience links to the last and best checkpoints.
ALIASES = ("last.pt", "best.pt")


def tmp_kind(name: str) -> str | None:
    """Which write a temporary file belongs to (None: not a temporary file)."""
    for kind, pattern in TMP_PATTERNS.items():
        if pattern.match(name):
            return kind
    return None


def tmp_files(directory: Path) -> set[str]:
    """The temporary files in ``directory`` now."""
    try:
        with os.scandir(directory) as entries:
            return {e.name for e in entries if e.name.endswith(".tmp")}
    except FileNotFoundError:
        return set()


@dataclass
class KillPlan:
    """When one kill happens.

    ``mode``: ``"write"`` (at a temporary file of ``kind``, ``jitter_ms`` later), ``"training"``
    (``delay`` seconds after the run's first checkpoint), ``"startup"`` (``delay`` seconds
    after launch). ``arm``: seconds after the run's first checkpoint before a write kill
    watches for files.
    """

    mode: str
    delay: float = 0.0
    kind: str = "any"
    arm: float = 0.0
    jitter_ms: float = 0.0


@dataclass
class KillRecord:
    """What one kill did and what the checks found."""

    kill: int
    plan: dict[str, Any]
    moment: str = ""
    start_env_steps: int | None = None
    seconds_after_launch: float = 0.0
    during_write: bool = False
    tmp_left: list[str] = field(default_factory=list)
    intact: bool = False
    problems: list[str] = field(default_factory=list)
    resume_from: int | None = None
    resume_file: str | None = None
    resumed_at: int | None = None
    resume_ok: bool | None = None

    @property
    def recovered(self) -> bool:
        return bool(self.intact and self.resume_ok)


def plan_kills(kills: int, rng: random.Random, *, quick: bool = False) -> list[KillPlan]:
    """About half the kills during writes (of every kind), the rest at random moments."""
    if quick:  # the test's short version: a write kill first, then alternating
        return [KillPlan("write", kind="checkpoint", arm=rng.uniform(0.1, 0.4))
                if i % 2 == 0 else KillPlan("training", delay=rng.uniform(0.1, 0.5))
                for i in range(kills)]
    kinds = ["checkpoint", "manifest", "best", "manifest-after-best"]
    n_write = (kills + 1) // 2
    n_startup = max(1, kills // 7) if kills >= 4 else 0
    plans = []
    for i in range(n_write):
        kind = kinds[i % len(kinds)]
        if kind == "manifest-after-best":  # at once, or a little later: the best.pt link
            jitter = 0.0 if i % 8 == 3 else rng.uniform(0.5, 5.0)
        else:
            jitter = 0.0 if i % 3 != 2 else rng.uniform(0.5, 15.0)
        plans.append(KillPlan("write", kind=kind, arm=rng.uniform(0.0, 1.2), jitter_ms=jitter))
    plans += [KillPlan("startup", delay=rng.uniform(0.3, 4.0)) for _ in range(n_startup)]
    plans += [KillPlan("training", delay=rng.uniform(0.0, 1.5))
              for _ in range(kills - len(plans))]
    rng.shuffle(plans)
    return plans


def verify(checkpoints: Path) -> dict[str, Any]:
    """Check the checkpoint folder after a kill; returns the problems and where a resume starts.

    ``resume_from`` is the env steps of the checkpoint ``resolve("last")`` picks (0 when there
    is no checkpoint yet, None when none resolves although some exist).
    """
    problems: list[str] = []
    manifest_path = checkpoints / MANIFEST
    manifest: dict[str, Any] = {"checkpoints": [], "last": None, "best": None}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except ValueError as error:
            problems.append(f"manifest.json unreadable: {error}")
    entries = list(manifest.get("checkpoints") or [])
    listed = [("checkpoint", e) for e in entries]
    if manifest.get("best"):
        listed.append(("best", manifest["best"]))
    for role, entry in listed:
        name = str(entry["file"])
        path = checkpoints / name
        if name.endswith(".tmp") or name.startswith("."):
            problems.append(f"{role} entry lists a temporary file {name}")
            continue
        if not path.is_file():
            problems.append(f"{name} ({role}) is listed but missing")
            continue
        if path.stat().st_size != int(entry["bytes"]) or file_sha256(path) != entry["sha256"]:
            problems.append(f"{name} ({role}) does not match its manifest size/SHA-256")
        try:
            state = read_checkpoint(path)
        except (ValueError, OSError) as error:
            problems.append(f"{name} ({role}) does not load: {error}")
            continue
        if int(state["progress"]["env_steps"]) != int(entry["env_steps"]):
            problems.append(f"{name} ({role}) holds {state['progress']['env_steps']} env steps, "
                            f"the manifest says {entry['env_steps']}")
    if entries and manifest.get("last") not in {e["file"] for e in entries}:
        problems.append(f"manifest 'last' ({manifest.get('last')}) is not a listed checkpoint")
    for alias in ALIASES:
        link = checkpoints / alias
        if link.exists() and (entries or manifest.get("best")):
            try:
                read_checkpoint(link)
            except (ValueError, OSError) as error:
                problems.append(f"{alias} does not load: {error}")

    any_checkpoint = bool(entries) or any(checkpoints.glob("checkpoint-*.pt"))
    resume_from: int | None = 0
    resume_file: str | None = None
    if any_checkpoint:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                resolved = Checkpointer(checkpoints).resolve("last")
            except FileNotFoundError as error:
                problems.append(f"resolve('last') failed: {error}")
                resolved = None
        problems += [f"resolve('last') warned: {w.message}" for w in caught]
        if resolved is None:
            resume_from = None
        else:
            resume_file = resolved.name
            if entries and resolved.name != manifest.get("last"):
                problems.append(f"resolve('last') gave {resolved.name}, not the manifest's "
                                f"last, {manifest.get('last')}")
            try:
                resume_from = int(read_checkpoint(resolved)["progress"]["env_steps"])
            except (ValueError, OSError) as error:
                problems.append(f"resolved {resolved.name} does not load: {error}")
                resume_from = None
    return {"problems": problems, "resume_from": resume_from, "resume_file": resume_file,
            "listed": [e["file"] for e in entries],
            "best": manifest["best"]["file"] if manifest.get("best") else None}


def unlisted(checkpoints: Path) -> list[str]:
    """Checkpoint files neither listed in the manifest nor a temporary file (orphans)."""
    listed = Checkpointer(checkpoints).manifest().names()
    if not checkpoints.is_dir():
        return []
    return sorted(p.name for p in checkpoints.iterdir()
                  if p.name not in listed | {MANIFEST, *ALIASES} and not p.name.endswith(".tmp"))


class Child:
    """One run of the child script, its output in a log file."""

    def __init__(self, script: Path, run_dir: Path, steps: int, log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.launched = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, str(script), str(run_dir), str(steps)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        self.started: float | None = None
        self.start_env_steps: int | None = None

    def poll_start(self) -> bool:
        """Read the log for the Start line; True once seen."""
        if self.started is None:
            match = re.search(r"CRASH-HARNESS START (\d+)", self.log_path.read_text())
            if match:
                self.started = time.monotonic()
                self.start_env_steps = int(match.group(1))
        return self.started is not None

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        self._log.close()
        self.poll_start()
        return code

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])


def mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def kill_during(child: Child, plan: KillPlan, checkpoints: Path,
                leftovers: set[str]) -> tuple[str, bool]:
    """Kill ``child`` as ``plan`` says; returns a description of the moment, and False when
    the child exited by itself first.

    ``training`` and ``write`` plans count from this run's first checkpoint write (the
    manifest changing), so that each run makes progress before it is killed; ``startup``
    plans count from the launch.
    """
    watch_timeout = 3.0  # best.pt is written only when an evaluation improves: then any write
    kind = plan.kind
    seen_best = False
    last_log_read = 0.0
    manifest = checkpoints / MANIFEST
    manifest_before = mtime_ns(manifest)
    anchor: float | None = None  # when this run's first checkpoint was listed
    while True:
        now = time.monotonic()
        if child.process.poll() is not None:
            return "exited by itself", False
        if child.started is None and now - last_log_read > 0.02:
            last_log_read = now
            child.poll_start()
        if plan.mode == "startup":
            if now - child.launched >= plan.delay:
                phase = "startup" if child.started is None else (
                    "setup after Start" if mtime_ns(manifest) == manifest_before else "training")
                child.kill()
                return f"{phase}, {plan.delay:.2f} s after launch", True
            time.sleep(0.005)
            continue
        if anchor is None:
            if child.started is not None and mtime_ns(manifest) != manifest_before:
                anchor = time.monotonic()
            else:
                time.sleep(0.002)
                continue
        if plan.mode == "training":
            if now - anchor >= plan.delay:
                child.kill()
                return f"training, {plan.delay:.2f} s after 1st save", True
            time.sleep(0.002)
            continue
        # A write kill: watch for a new temporary file once armed.
        if now - anchor < plan.arm:
            time.sleep(0.002)
            continue
        if kind != "any" and now - anchor > plan.arm + watch_timeout:
            kind = "any"
        target = None
        for name in tmp_files(checkpoints) - leftovers:
            found = tmp_kind(name)
            if kind == "manifest-after-best":
                if found == "best":
                    seen_best = True
                elif found == "manifest" and seen_best:
                    target = name
            elif found is not None and kind in ("any", found):
                target = name
        if target is not None:
            if plan.jitter_ms:
                time.sleep(plan.jitter_ms / 1000)
            child.kill()
            label = f"writing {target[1:-len('.tmp')].rsplit('.', 1)[0]}"
            if kind == "manifest-after-best":
                label += " (after best.pt)"
            elif kind != plan.kind:
                label += f" (no {plan.kind} write in {watch_timeout:.0f} s)"
            if plan.jitter_ms:
                label += f", +{plan.jitter_ms:.1f} ms"
            return label, True
        time.sleep(0.0002)


def run(kills: int = 20, seed: int = 0, steps: int | None = None, work_dir: Path | None = None,
        quick: bool = False, verbose: bool = True, final_timeout: float = 300.0
        ) -> dict[str, Any]:
    """Run the harness; returns the results (``ok`` is True when everything recovered)."""
    rng = random.Random(seed)
    steps = steps if steps is not None else 1_500 * kills + 2_000
    own_dir = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="crash-harness-")) if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    script = work / "crash_child.py"
    script.write_text(CHILD)
    run_dir = work / "run"
    checkpoints = run_dir / "checkpoints"
    plans = plan_kills(kills, rng, quick=quick)
    records: list[KillRecord] = []
    pending: list[KillRecord] = []  # kills whose resume is checked by the next started run
    failures: list[str] = []
    expected_start = 0
    began = time.monotonic()

    def say(message: str) -> None:
        if verbose:
            print(message, flush=True)

    def check_resume(child: Child) -> None:
        if child.start_env_steps is None:
            return
        for record in pending:
            record.resumed_at = child.start_env_steps
            record.resume_ok = (record.resume_from is not None
                                and child.start_env_steps == record.resume_from)
        pending.clear()

    life = 0
    grown: list[str] = []
    number = 0
    while number < len(plans):
        plan = plans[number]
        leftovers = tmp_files(checkpoints)
        child = Child(script, run_dir, steps, work / f"life-{life:03d}.log")
        life += 1
        moment, killed = kill_during(child, plan, checkpoints, leftovers)
        check_resume(child)
        if not killed:
            code = child.wait(timeout=60)
            checked = verify(checkpoints)
            if code == 0 and checked["resume_from"] == steps and len(grown) < 3:
                # The run finished before all kills: resume it with more steps (num_steps may
                # grow on resume), as `rltrain fit --resume last --steps MORE` would.
                old = steps
                steps += 1_500 * (len(plans) - number)
                grown.append(f"the run finished at {old:,} env steps before kill {number + 1}:"
                             f" --steps raised to {steps:,}")
                say(grown[-1])
                if checked["problems"]:
                    failures.append(f"after the run finished: {checked['problems']}")
                    break
                expected_start = old
                continue
            failures.append(f"kill {number + 1}: the run exited with status {code} before it "
                            f"was killed\n{child.tail()}")
            break
        number += 1
        record = KillRecord(kill=number, plan=asdict(plan), moment=moment,
                            start_env_steps=child.start_env_steps,
                            seconds_after_launch=time.monotonic() - child.launched)
        record.tmp_left = sorted(tmp_files(checkpoints) - leftovers)
        record.during_write = bool(record.tmp_left)
        checked = verify(checkpoints)
        record.problems = checked["problems"]
        record.intact = not record.problems
        record.resume_from = checked["resume_from"]
        record.resume_file = checked["resume_file"]
        if record.resume_from is not None:
            expected_start = record.resume_from
        records.append(record)
        pending.append(record)
        say(f"kill {number:2d}: {moment}; during write: {'yes' if record.during_write else 'no'}"
            f"; resume from {record.resume_from}; "
            + ("intact" if record.intact else "PROBLEMS: " + "; ".join(record.problems)))

    final: dict[str, Any] = {"num_steps": steps}
    if not failures:
        child = Child(script, run_dir, steps, work / f"life-{life:03d}.log")
        code = child.wait(timeout=final_timeout)
        check_resume(child)
        checked = verify(checkpoints)
        manifest = Checkpointer(checkpoints).manifest()
        last_steps = None
        if manifest.checkpoints:
            last_steps = max(e.env_steps for e in manifest.checkpoints)
        summary_steps = None
        summary_path = run_dir / "summary.json"
        if summary_path.exists():
            summary_steps = json.loads(summary_path.read_text())["env_steps"]
        final.update(exit_code=code, resumed_at=child.start_env_steps,
                     expected_resume=expected_start, problems=checked["problems"],
                     last_checkpoint_env_steps=checked["resume_from"],
                     manifest_last_env_steps=last_steps, summary_env_steps=summary_steps)
        final["ok"] = (code == 0 and not checked["problems"]
                       and child.start_env_steps == expected_start
                       and checked["resume_from"] == steps and last_steps == steps
                       and summary_steps == steps)
        if not final["ok"]:
            failures.append(f"final run: {json.dumps(final)}\n{child.tail()}")
        say(f"final run: resumed at {child.start_env_steps} (expected {expected_start}), exit "
            f"{code}, last checkpoint at {checked['resume_from']} of {steps} env steps")
    for record in pending:  # never resumed (a failure stopped the harness)
        record.resume_ok = False

    recovered = sum(r.recovered for r in records)
    during_write = sum(r.during_write for r in records)
    if len(records) < kills:
        failures.append(f"only {len(records)} of {kills} kills happened")
    for r in records:
        if not r.recovered:
            failures.append(f"kill {r.kill} ({r.moment}) not recovered: resume_from="
                            f"{r.resume_from}, resumed_at={r.resumed_at}, problems={r.problems}")
    leftover = sorted(tmp_files(checkpoints))
    rows = [[str(r.kill), r.moment, "yes" if r.during_write else "no",
             f"{'yes' if r.resume_ok else 'NO'} ({r.resume_from} -> {r.resumed_at})",
             "yes" if r.intact else "NO: " + "; ".join(r.problems)] for r in records]
    result = {
        "args": {"kills": kills, "seed": seed, "steps": steps, "quick": quick,
                 "checkpoint_interval": CHECKPOINT_INTERVAL},
        "kills": len(records),
        "resumed_ok": sum(bool(r.resume_ok) for r in records),
        "intact": sum(r.intact for r in records),
        "recovered": recovered,
        "during_write": during_write,
        "leftover_tmp_files": len(leftover),
        "leftover_tmp_bytes": sum((checkpoints / n).stat().st_size for n in leftover),
        "unlisted_files": unlisted(checkpoints),
        "steps_raised": grown,
        "seconds": time.monotonic() - began,
        "final": final,
        "records": [{**asdict(r), "recovered": r.recovered} for r in records],
        "failures": failures,
        "ok": not failures,
        "table": table(["kill #", "moment", "during write", "resume OK (from -> at)",
                        "checkpoints intact"], rows),
    }
    if own_dir and not failures:
        shutil.rmtree(work, ignore_errors=True)
    else:
        result["work_dir"] = str(work)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None,
                        help="the run's total env steps (default: 1,500 per kill + 2,000; "
                             "raised when the run finishes before the last kill)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the run goes (default: a temporary folder, removed on "
                             "success)")
    args = parser.parse_args()
    result = run(kills=args.kills, seed=args.seed, steps=args.steps, work_dir=args.work_dir)
    print()
    print(result["table"])
    print()
    print(f"{result['during_write']} of {result['kills']} kills landed during a checkpoint "
          f"write; {result['leftover_tmp_files']} leftover .tmp files "
          f"({result['leftover_tmp_bytes'] / 1e6:.1f} MB); unlisted checkpoint files: "
          f"{result['unlisted_files'] or 'none'}")
    resumed = sum(bool(r["resume_ok"]) for r in result["records"])
    intact = sum(bool(r["intact"]) for r in result["records"])
    print(f"resumed from the right checkpoint: {resumed}/{args.kills}; checkpoints intact "
          f"after the kill: {intact}/{args.kills}")
    print(f"{result['recovered']}/{args.kills} kills recovered; final run "
          f"{'OK' if result['final'].get('ok') else 'FAILED'}; {result['seconds']:.0f} s")
    for failure in result["failures"]:
        print(f"FAILURE: {failure}", file=sys.stderr)
    if "work_dir" in result:
        print(f"run kept in {result['work_dir']}")
    path = write_results("crash_harness", {k: v for k, v in result.items() if k != "table"})
    print(f"results: {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

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
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._util import table, write_results  # noqa: E402
from rltrain.checkpoint import Checkpointer  # noqa: E402
from scripts.checkpoint_folder import tmp_files, unlisted, verify  # noqa: E402
from scripts.kills import Child, KillRecord, kill_during, plan_kills  # noqa: E402

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

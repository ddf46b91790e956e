"""When and how ``scripts/crash_harness.py`` kills its child run: the kill plans (during a
checkpoint write, while training, at start-up), the child process and its log, and the kill
itself at the planned moment, with what the harness saw then."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltrain.checkpoint import MANIFEST
from scripts.checkpoint_folder import tmp_files, tmp_kind

ROOT = Path(__file__).resolve().parent.parent

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

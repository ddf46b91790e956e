"""Child processes of the commands that run several trainings (``fit --seeds``, ``tune``):
started so that they end with the command, and stopped together on Ctrl-C or SIGTERM."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

#: ``prctl`` option: the signal the kernel sends a process when its parent dies.
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before ``exec``: be killed when the command that started it dies (SIGKILL
    included), so that no orphan keeps writing a run directory the command will continue."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def fit_command(run_dir: Path, fresh: list[str], resumed: list[str],
                passthrough: list[str]) -> tuple[list[str], bool]:
    """The ``rltrain fit`` command of the run in ``run_dir``, and whether it resumes: ``--resume
    run_dir`` with the ``resumed`` overrides where it has a checkpoint; else the ``fresh``
    configs and overrides into ``run_dir`` (its progress bar off; ``--overwrite`` where the
    folder exists, a run stopped before its first checkpoint). ``passthrough``: flags both
    take (``--trust``, ``--import``)."""
    resume = any((run_dir / "checkpoints").glob("*.pt"))
    command = [sys.executable, "-m", "rltrain.cli", "fit", *passthrough]
    if resume:
        return [*command, "--resume", str(run_dir), *resumed], True
    return [*command, *fresh, f"trainer.run_dir={run_dir}", "trainer.enable_progress_bar=false",
            *(["--overwrite"] if run_dir.exists() else [])], False


def start(command: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``command`` started with its output in ``log``, to end with this process."""
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)


class Stops:
    """While in its ``with`` block: Ctrl-C or SIGTERM sets :attr:`requested` and sends SIGINT
    to every child :attr:`children` yields (each saves a checkpoint and ends); the previous
    handlers come back afterwards."""

    def __init__(self, children: Callable[[], Iterable[subprocess.Popen[bytes] | None]]):
        self.children = children
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Stops:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        for child in self.children():
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGINT)


def summary(run_dir: Path) -> dict[str, Any]:
    """The run's ``summary.json`` (empty when it has none yet, or an unreadable one)."""
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ended_on_signal(run_dir: Path) -> bool:
    """Whether the run's last ``fit`` ended on Ctrl-C or SIGTERM (its stop reason): it is
    continued, not finished."""
    reason = summary(run_dir).get("stop_reason")
    return isinstance(reason, str) and reason.endswith("received")


def last_line(log: Path) -> str:
    """The last non-empty line of ``log`` (at most 300 characters), for a failure's report."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(no output)"

"""Child processes of the commands that run several trainings (``fit --seeds``, ``tune``):
started so that they end with the command, and stopped together on Ctrl-C or SIGTERM."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from rltrain.cli.records import bounded_int, read_bounded

#: The ``rltrain`` command of a child process: this Python with ``-P``, so that the current
#: directory is not put first on its search path while rltrain's own imports run.
RLTRAIN = [sys.executable, "-P", "-m", "rltrain.cli"]
#: ``prctl`` option: the signal the kernel sends a process when its parent dies.
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before ``exec``: be killed when the command that started it dies (SIGKILL
    included), so that no orphan keeps writing a run directory the command will continue."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def fit_command(run_dir: Path, overrides: list[str], passthrough: list[str]
                ) -> tuple[list[str], bool]:
    """The ``rltrain fit --resume RUN_DIR`` command of a run of a group or a study, and whether
    it resumes from a checkpoint (else it starts from the config :func:`prepare_run` stored
    there). ``overrides``: the command line's ``key=value``s; ``passthrough``: flags the child
    takes (``--trust``, ``--import``), each from the command line, never from a record."""
    resume = has_checkpoint(run_dir)
    return [*RLTRAIN, "fit", *passthrough, "--resume", str(run_dir), *overrides], resume


def has_checkpoint(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` has a checkpoint file to resume from."""
    return any((run_dir / "checkpoints").glob("*.pt"))


def confirmations(trusted: Sequence[str], imports: Sequence[str], named: Sequence[str] = ()
                  ) -> list[str]:
    """The flags a child process takes from this command line: ``--trust`` of each module the
    user trusts or names (``named``: the modules of the user's own config, which the child
    reads as a stored one) and ``--import`` of each module to import."""
    modules = dict.fromkeys([*trusted, *named])
    return [*(f"--trust={m}" for m in modules), *(f"--import={m}" for m in imports)]


def open_log(path: Path) -> IO[bytes]:
    """``path`` opened to append a child's output, never through a symbolic link (a group's or
    a study's folder is untrusted)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise OSError(error.errno, f"Cannot write the log {path}: {error.strerror} (a "
                                   "symbolic link is never followed)") from None
    return os.fdopen(fd, "ab")


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
        data = json.loads(read_bounded(run_dir / "summary.json"), parse_int=bounded_int)
    except (OSError, ValueError, RecursionError):
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

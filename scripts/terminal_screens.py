"""What a short ``rltrain fit`` looks like in a real terminal: the run in a pseudo-terminal of
a given width, its raw output, and the screen a VT100 terminal shows (through ``pyte``).

    python scripts/terminal_screens.py            # writes docs/screens/terminal-{80,120}.txt

``tests/unit/observe/test_terminal.py`` runs the same run at 80 and 120 columns and checks the
output.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A short run with a console line every 0.5 s, two evaluations and checkpoints.
FIT = ["dqn_cartpole", "trainer.num_steps=3000", "trainer.console_interval=0.5",
       "trainer.eval_interval=1500", "trainer.eval_episodes=3", "trainer.logger=false",
       "trainer.num_threads=auto", "trainer.run_dir=run"]
#: The terminal's escape sequences (colours, cursor moves), removed before lines are measured.
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def fit_command(*overrides: str) -> list[str]:
    """``python -m rltrain.cli fit`` with :data:`FIT` and ``overrides``."""
    return [sys.executable, "-m", "rltrain.cli", "fit", *FIT, *overrides]


def fit_env() -> dict[str, str]:
    """The environment of a run: this checkout's ``rltrain`` first, no ``COLUMNS``/``LINES``
    (the width comes from the terminal itself)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm", PYTHONPATH=str(ROOT))
    return env


def run_in_pty(command: list[str], columns: int, rows: int, cwd: Path,
               timeout: float = 300.0) -> bytes:
    """Everything ``command`` writes to a pseudo-terminal of ``columns`` x ``rows`` (its
    stdin, stdout and stderr, as in a terminal window)."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower,
                               cwd=cwd, env=fit_env(), start_new_session=True)
    os.close(follower)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:
                raise TimeoutError(f"{command} wrote nothing for {timeout} s")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        process.wait(timeout)
        os.close(leader)
    if process.returncode != 0:
        raise RuntimeError(f"exit {process.returncode}: {b''.join(chunks).decode()[-2000:]}")
    return b"".join(chunks)


def raw_lines(output: str) -> list[str]:
    """Every piece of ``output`` between line feeds and carriage returns, escapes removed:
    what each write puts on one terminal row."""
    return [ESCAPES.sub("", piece) for piece in re.split(r"[\r\n]", output)]


def screen(output: str, columns: int, rows: int) -> list[str]:
    """The rows a VT100 terminal of ``columns`` x ``rows`` shows after ``output``."""
    import pyte

    terminal = pyte.Screen(columns, rows)
    pyte.Stream(terminal).feed(output)
    lines = [line.rstrip() for line in terminal.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def during_and_after(output: str, columns: int, rows: int) -> str:
    """The screen during the run (as its first evaluation starts, half-way, the bar live at
    the bottom) and after it, as text."""
    start = output.index("evaluating 0/")
    during = output[:output.index("\r", start)]
    return "\n".join([f"--- {columns} columns, during the run (its first evaluation) ---",
                      *screen(during, columns, rows), "",
                      f"--- {columns} columns, after the run ---",
                      *screen(output, columns, rows)]) + "\n"


def main() -> None:
    out = ROOT / "docs" / "screens"
    out.mkdir(parents=True, exist_ok=True)
    for columns in (80, 120):
        with tempfile.TemporaryDirectory() as cwd:
            output = run_in_pty(fit_command(), columns, 60, Path(cwd)).decode()
        text = during_and_after(output, columns, 60)
        (out / f"terminal-{columns}.txt").write_text(text, encoding="utf-8")
        print(f"docs/screens/terminal-{columns}.txt:\n{text}")


if __name__ == "__main__":
    main()

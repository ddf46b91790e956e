"""``rltrain fit`` in a real pseudo-terminal at 80 and 120 columns, and redirected to a file.

In a terminal the console's lines are written through the progress bar (the bar cleared, the
line written whole, the bar redrawn below): no line loses its first character to the bar, no
bar is glued to a line, nothing is wider than the window. Redirected, there is no bar and no
carriage return. The screens themselves: ``python scripts/terminal_screens.py``
(docs/screens/).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import load_script

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

screens = load_script("terminal_screens")
#: A whole bar, nothing before or after it: `` 50%|█████     | 1.50k/3.00k [00:01<00:01, ...]``.
BAR = re.compile(r"(evaluating \d+/\d+ episodes: )?[ \d]{3}%\|[^|]*\| \S+/\S+ \[[^\]]*\]")
ROWS = 200  # tall enough that nothing scrolls off: the screen holds the whole run


def console_lines(output: str) -> list[str]:
    """The lines the console renderer and the CLI write (not the bar's)."""
    return [line for line in output.replace("\r", "\n").split("\n")
            if line.startswith(("[", "evaluation at", "saved ", "training for", "done:",
                                "torch threads:"))]


@pytest.fixture(scope="module", params=[80, 120])
def terminal(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    columns: int = request.param
    cwd = tmp_path_factory.mktemp(f"terminal{columns}")
    output = screens.run_in_pty(screens.fit_command(), columns, ROWS, cwd)
    return columns, output.decode()


def test_no_line_is_wider_than_the_terminal(terminal: tuple[int, str]) -> None:
    columns, output = terminal
    assert "%|" in output  # the bar is drawn: stderr is the terminal
    too_wide = [line for line in screens.raw_lines(output) if len(line) > columns]
    assert not too_wide, too_wide[:3]


def test_console_lines_are_whole_and_no_bar_is_glued_to_them(terminal: tuple[int, str]) -> None:
    _, output = terminal
    rows = [line for line in screens.raw_lines(output) if line.strip()]
    # Every row is a bar, or a line of text: never both (a bar left before a console line).
    glued = [row for row in rows if "%|" in row and not BAR.fullmatch(row.rstrip())]
    assert not glued, glued[:3]
    status = [row for row in rows if "env_steps=" in row]
    assert status and all(row.startswith("[") and row[1:7].strip().endswith("%")
                          for row in status), status[:3]  # "[ 34.2%] ...": first character kept
    assert any(row.startswith("evaluation at 1,500 env steps: return ") for row in rows)
    assert any(row.startswith("saved run/checkpoints/best-1500.pt") for row in rows)


def test_the_screen_shows_each_console_line_whole(terminal: tuple[int, str]) -> None:
    pytest.importorskip("pyte")
    columns, output = terminal
    shown = screens.screen(output, columns, ROWS)
    assert all(len(line) <= columns for line in shown)
    text = "\n".join(shown)
    for line in console_lines(output):  # each as written, at the start of a screen row
        assert "\n" + line.strip() in "\n" + text, line
    bars = [row for row in shown if "%|" in row]
    assert len(bars) == 1 and bars[0].startswith("100%|")  # only the final bar is left
    assert "sps=" in bars[0] and "step/s" not in text  # one speed figure
    assert shown[shown.index(bars[0]) + 1].startswith("[100.0%] env_steps=3,000/3,000")


def test_a_redirected_run_writes_plain_lines_without_carriage_returns(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with log.open("wb") as out:
        subprocess.run(screens.fit_command(), stdout=out, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, cwd=tmp_path, env=screens.fit_env(),
                       check=True, timeout=300)
    text = log.read_bytes().decode()  # not read_text(), which turns "\r" into "\n"
    assert "\r" not in text and "%|" not in text
    lines = text.splitlines()
    assert sum(line.startswith("[") and "env_steps=" in line for line in lines) >= 2
    assert any(line.startswith("[100.0%] env_steps=3,000/3,000 sps=") for line in lines)
    assert any(line.startswith("evaluation at 3,000 env steps: return ") for line in lines)


def test_a_terminal_that_does_not_know_its_width_gets_whole_lines(tmp_path: Path) -> None:
    """A pseudo-terminal never sized reports 0 columns (``script``, some container and CI
    terminals): the run goes on, its lines unwrapped, where it once failed with "invalid width
    0 (must be > 0)"."""
    output = screens.run_in_pty(screens.fit_command(), 0, 0, tmp_path).decode()
    assert "invalid width" not in output and "error" not in output.lower(), output[-2000:]
    assert any(line.startswith("done:") for line in console_lines(output)), output[-2000:]

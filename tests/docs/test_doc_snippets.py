"""Every ```python block of README.md and docs/*.md runs, so that the docs cannot drift.

The blocks of one page run in order, each in a fresh namespace of one ``python`` subprocess
per page (``doc_snippets/run_blocks.py``: rltrain is imported once per page, not once per
block), all in one temporary folder (the cwd; the repository and its ``examples/`` are on the
PYTHONPATH): a block may use what an earlier block of its page wrote (a run directory), as a
reader following the page would. They are shortened, not rewritten: ``tests/doc_snippets`` is
first on the subprocess' PYTHONPATH, and its ``sitecustomize`` caps every Trainer at
``RLTRAIN_DOCS_QUICK`` env steps (evaluations, episodes and warm-up with it; rltrain itself
never reads that variable).

Markers, HTML comments on the line(s) just before a block (invisible on the rendered page):

- ``<!-- no-run: reason -->``: the block is not run (a fragment of a method, or it needs a GPU,
  W&B or a long benchmark); this test counts and lists them.
- ``<!-- setup: python code -->``: runs first, in the same folder (e.g. a short run that the
  block loads).

Cheap command lines of bash blocks run too: ``rltrain list`` and every ``rltrain ...
--print-config`` line (what follows ``#`` dropped; ``...`` placeholders skipped).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, TESTS

from rltrain.cli import main

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SITECUSTOMIZE = TESTS / "doc_snippets"
QUICK_STEPS = "300"
#: A block, with the comments just before its opening fence (blank lines allowed between).
BLOCK = re.compile(r"((?:^<!--.*?-->\n\s*)*)^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*(no-run|setup):\s*(.*?)\s*-->", re.DOTALL)
TIMEOUT_S = 600  # one page, all its blocks


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    no_run: str | None
    setup: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        markers = MARKER.findall(match.group(1))
        no_run = next((reason for kind, reason in markers if kind == "no-run"), None)
        setup = [code for kind, code in markers if kind == "setup"]
        line = text.count("\n", 0, match.start(2)) + 1
        found.append(Block(page, line, match.group(2), match.group(3), no_run, setup))
    return found


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language == "python"]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SITECUSTOMIZE), str(ROOT), str(ROOT / "examples"),
         *filter(None, [env.get("PYTHONPATH")])])
    env["RLTRAIN_DOCS_QUICK"] = QUICK_STEPS
    env["OMP_NUM_THREADS"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def run(argv: list[str], cwd: Path, where: str) -> None:
    done = subprocess.run(argv, cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        pytest.fail(f"{where} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                    f"{done.stderr[-6000:]}", pytrace=False)


def test_the_markers_are_well_formed() -> None:
    """A marker is a `no-run` or `setup` comment directly before a block, with a reason."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        attached = sum(len(MARKER.findall(m.group(1))) for m in BLOCK.finditer(text))
        assert attached == len(MARKER.findall(text)), (
            f"{page.name}: a no-run/setup comment is not directly before a ``` block")
        for block in blocks(page):
            assert block.no_run != "", f"{block.where}: `no-run:` needs a reason"


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    started = time.perf_counter()
    ordered = []
    for block in python_blocks(page):
        if block.no_run is None:
            ordered += [(f"{block.where} (setup)", code) for code in block.setup]
            ordered.append((block.where, block.code))
    listing = tmp_path.parent / f"{tmp_path.name}-blocks.json"
    listing.write_text(json.dumps(ordered))
    run([sys.executable, str(SITECUSTOMIZE / "run_blocks.py"), str(listing)], tmp_path,
        page.relative_to(ROOT).as_posix())
    print(f"{page.name}: {time.perf_counter() - started:.1f} s")


def test_the_blocks_that_do_not_run_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = [b for p in PAGES for b in python_blocks(p) if b.no_run is not None]
    ran = sum(1 for p in PAGES for b in python_blocks(p) if b.no_run is None)
    with capsys.disabled():
        print(f"\ndocs: {ran} python blocks run, {len(skipped)} not run:")
        for block in skipped:
            print(f"  {block.where}: {block.no_run}")
    assert ran > len(skipped)


def command_lines() -> list[tuple[str, str]]:
    """(where, line) of the cheap rltrain command lines of the bash blocks."""
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.language not in ("bash", "sh", "shell", "console") or block.no_run:
                continue
            for offset, raw in enumerate(block.code.splitlines(), start=1):
                line = raw.removeprefix("$ ").split(" #")[0].strip()
                if not line.startswith("rltrain ") or "..." in line:
                    continue
                if line == "rltrain list" or line.endswith("--print-config"):
                    found.append((f"{block.where}+{offset}", line))
    return found


@pytest.mark.parametrize(("where", "line"), command_lines(), ids=lambda v: v)
def test_the_cheap_command_lines_run(where: str, line: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (rltrain.cli.app.main), which is what the ``rltrain`` script calls."""
    monkeypatch.chdir(tmp_path)
    status = main(shlex.split(line)[1:])
    assert status == 0, f"{where}: `{line}` exited {status}:\n{capsys.readouterr().err}"

def quoted_errors() -> list[tuple[str, str]]:
    """(command, message) of configs.md's "Errors, with suggestions" sample, for the commands
    that need no file of their own (bad.yaml and the like are described, not shipped)."""
    text = (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")
    sample = re.search(r"## Errors, with suggestions.*?```\n(.*?)```", text, re.DOTALL)
    assert sample is not None, "docs/configs.md has no `Errors, with suggestions` sample"
    pairs = re.findall(r"^\$ (rltrain [^\n]*)\n(rltrain: error: [^\n]*)", sample.group(1),
                       re.MULTILINE)
    return [(command.split(" #")[0].strip(), message) for command, message in pairs
            if not re.search(r"\b(bad|py|interp)\.yaml|\$\{", command)]


@pytest.mark.parametrize(("command", "message"), quoted_errors(), ids=lambda v: v[:40])
def test_the_quoted_error_messages_are_what_rltrain_prints(
        command: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(shlex.split(command)[1:])
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("rltrain: error:")]
    assert status == 2 and errors, stderr
    assert errors[-1] == message, (
        f"docs/configs.md quotes for `{command}`:\n  {message}\nbut rltrain prints:\n  "
        f"{errors[-1]}")

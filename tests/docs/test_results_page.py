"""docs/results.md is what scripts/results_page.py writes from benchmarks/results/: a result
file added or changed without the page written again fails here."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import ROOT

pytest.importorskip("rliable")


@pytest.mark.slow
def test_the_results_page_is_written_from_the_result_files() -> None:
    spec = importlib.util.spec_from_file_location("results_page",
                                                  ROOT / "scripts" / "results_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_page"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    page = module.page()
    assert "## PPO on Atari Breakout" in page and "| rltrain |" in page
    assert (ROOT / "docs" / "results.md").read_text(encoding="utf-8") == page, (
        "docs/results.md is out of date: python scripts/results_page.py > docs/results.md")

"""The docs site (mkdocs.yml: MkDocs Material + mkdocstrings) builds in strict mode, and its
pages render in a headless Chromium when there is one.

Skipped without mkdocs (``pip install -e ".[docs]"``); the rendering checks are skipped without
a ``chromium`` executable (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow


pytest.importorskip("mkdocs")
pytest.importorskip("material")
pytest.importorskip("mkdocstrings_handlers.python")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    return out


def test_the_site_builds_in_strict_mode_with_the_reference(site: Path) -> None:
    for page in ["index.html", "howto/index.html", "architecture/index.html",
                 *(f"reference/{name}/index.html"
                   for name in ["trainer", "configs", "agents", "strategies", "run"])]:
        assert (site / page).is_file(), page
    reference = (site / "reference" / "trainer" / "index.html").read_text(encoding="utf-8")
    assert 'id="rltrain.Trainer.fit"' in reference  # generated from the docstring
    for page in (site / "reference").rglob("*.html"):  # no raw reST left in the reference
        html = page.read_text(encoding="utf-8")
        assert "::</p>" not in html, page
        assert not re.search(r":(class|func|meth|mod|data|attr|exc):<code>", html), page


def test_a_broken_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    """mkdocs.yml's validation makes a link to a missing anchor a warning, which --strict
    turns into a failed build."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "howto.md").write_text((docs / "howto.md").read_text(encoding="utf-8")
                                   + "\n[broken](trainer.md#no-such-heading)\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace(
        "docs_dir: docs", f"docs_dir: {docs}").replace(
        "- scripts/mkdocs_hooks.py", f"- {ROOT / 'scripts' / 'mkdocs_hooks.py'}")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode != 0 and "no-such-heading" in done.stderr, done.stderr[-2000:]


def chromium() -> str | None:
    return next(filter(None, map(shutil.which, ["chromium", "chromium-browser"])), None)


def dump_dom(url: str) -> str:
    browser = chromium()
    if browser is None:
        pytest.skip("no headless chromium here (apt-get install chromium)")
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", url], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_home_page_renders(site: Path) -> None:
    dom = dump_dom((site / "index.html").as_uri())
    assert "<title>rltrain</title>" in dom
    assert "Where to go" in dom and "md-nav" in dom  # the page body and Material's navigation


def test_the_trainer_reference_page_renders_trainer_fit(site: Path) -> None:
    dom = dump_dom((site / "reference" / "trainer" / "index.html").as_uri())
    assert "<title>Trainer - rltrain</title>" in dom
    assert 'id="rltrain.Trainer.fit"' in dom and "Train <code>agent</code> on" in dom

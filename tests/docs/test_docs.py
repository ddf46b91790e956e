"""The docs say what the code does: samples of output and named signatures, checked against it."""

from __future__ import annotations

import inspect
import re

import pytest
from conftest import ROOT

from rltrain.checkpoint import Checkpointer
from rltrain.cli.app import SHIPPED_CONFIGS, main

DOCS = ROOT / "docs"


def test_the_rltrain_list_sample_in_configs_md_is_what_rltrain_list_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    printed = capsys.readouterr().out.replace(str(SHIPPED_CONFIGS),
                                              "/path/to/rltrain/config/shipped")
    text = (DOCS / "configs.md").read_text(encoding="utf-8")
    sample = re.search(r"```\n\$ rltrain list\n(.*?)```", text, re.DOTALL)
    assert sample is not None, "docs/configs.md has no `rltrain list` sample"
    assert sample.group(1) == printed, (
        "docs/configs.md's `rltrain list` sample is out of date: paste what `rltrain list` "
        "prints (with the configs folder as /path/to/rltrain/config/shipped)")


def test_the_custom_strategy_guide_calls_save_best_with_its_real_arguments() -> None:
    guide = (DOCS / "custom_strategy.md").read_text(encoding="utf-8")
    calls = re.findall(r"checkpointer\.save_best\(([^`]*)\)", guide.replace("\n", " "))
    assert calls, "docs/custom_strategy.md does not say how to write a best checkpoint"
    parameters = list(inspect.signature(Checkpointer.save_best).parameters)[1:]
    for call in calls:
        keywords = re.findall(r"(\w+)=", call)
        assert keywords == parameters[1:], (call, parameters)
    assert "run_hparams(agent, components)" in guide


def test_the_readme_install_says_the_python_pyproject_requires_and_how_to_get_a_cpu_build(
) -> None:
    """README's Python version is pyproject's ``requires-python``, said nowhere as 3.10, and
    its quickstart installs PyTorch's CPU build from PyTorch's CPU wheel index (a plain
    ``pip install torch`` from PyPI is the multi-GB CUDA build on Linux)."""
    import tomllib

    root = DOCS.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())
    required = project["project"]["requires-python"]
    assert required == ">=3.11"
    readme = (root / "README.md").read_text()
    assert "Python 3.11 or newer" in readme
    assert not re.search(r"Python 3\.10\+|3\.10 or newer", readme)
    quickstart = readme[readme.index("## Quickstart"):readme.index("`rltrain fit` trains with")]
    fit_line = next(line for line in quickstart.splitlines() if line.endswith("rltrain fit"))
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in (
        fit_line)
    assert "NVIDIA GPU" in quickstart and "CUDA build" in quickstart
    assert project["tool"]["mypy"]["python_version"] == "3.11"


def test_every_rltrain_path_the_docs_name_exists() -> None:
    """Each ``rltrain/...`` file or folder named in README.md and docs/*.md is there."""
    root = DOCS.parent
    pages = [root / "README.md", *DOCS.glob("*.md")]
    named = {(page.name, path) for page in pages
             for path in re.findall(r"\brltrain/[A-Za-z0-9_/]+(?:\.py|/)",
                                    page.read_text(encoding="utf-8"))}
    assert named, "the docs name no rltrain/ path: the pattern is wrong"
    missing = sorted((page, path) for page, path in named if not (root / path).exists())
    assert not missing, missing

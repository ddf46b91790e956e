"""The docs say what the code does: samples of output and named signatures, checked against it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from rltrain.checkpoint import Checkpointer
from rltrain.cli import SHIPPED_CONFIGS, main

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_rltrain_list_sample_in_configs_md_is_what_rltrain_list_prints(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    printed = capsys.readouterr().out.replace(str(SHIPPED_CONFIGS), "/path/to/rltrain/configs")
    text = (DOCS / "configs.md").read_text(encoding="utf-8")
    sample = re.search(r"```\n\$ rltrain list\n(.*?)```", text, re.DOTALL)
    assert sample is not None, "docs/configs.md has no `rltrain list` sample"
    assert sample.group(1) == printed, (
        "docs/configs.md's `rltrain list` sample is out of date: paste what `rltrain list` "
        "prints (with the configs folder as /path/to/rltrain/configs)")


def test_the_custom_strategy_guide_calls_save_best_with_its_real_arguments() -> None:
    guide = (DOCS / "custom_strategy.md").read_text(encoding="utf-8")
    calls = re.findall(r"checkpointer\.save_best\(([^`]*)\)", guide.replace("\n", " "))
    assert calls, "docs/custom_strategy.md does not say how to write a best checkpoint"
    parameters = list(inspect.signature(Checkpointer.save_best).parameters)[1:]
    for call in calls:
        keywords = re.findall(r"(\w+)=", call)
        assert keywords == parameters[1:], (call, parameters)
    assert "run_hparams(agent, components)" in guide

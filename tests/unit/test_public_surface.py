"""The public surface: about 20 names in ``rltrain``, everything else from the public package of
its extension point; the earlier layout's names gone from where they were (no shims)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import rltrain


def test_the_package_exports_about_twenty_names_each_importable() -> None:
    assert 18 <= len(rltrain.__all__) <= 25
    for name in rltrain.__all__:
        assert getattr(rltrain, name) is not None
    assert {"Trainer", "Dreamer", "Run", "LearningAgent", "load_policy"} <= set(rltrain.__all__)
    assert "Runner" not in rltrain.__all__ and "Optimization" not in rltrain.__all__


@pytest.mark.parametrize(("package", "name"), [
    ("rltrain", "Runner"), ("rltrain", "Checkpointer"), ("rltrain", "TrainerConfig"),
    ("rltrain.config", "compose"), ("rltrain.envs", "make_vector_env")])
def test_the_earlier_layout_s_names_are_gone_from_where_they_were(package: str,
                                                                  name: str) -> None:
    """No shims at 0.1: a name is found in one place."""
    with pytest.raises(AttributeError):
        getattr(importlib.import_module(package), name)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = rltrain.Nothing  # type: ignore[attr-defined]


#: The public packages: one per extension point (docs/architecture.md).
PUBLIC = ("rltrain", "rltrain.agents", "rltrain.strategies", "rltrain.envs", "rltrain.observe",
          "rltrain.checkpoint", "rltrain.settings")


def test_the_custom_strategy_example_imports_public_names_only() -> None:
    """A loop of one's own needs nothing from inside a module: each name the example imports
    from rltrain is in the ``__all__`` of the package it is imported from."""
    example = Path(__file__).parents[2] / "examples" / "custom_strategy.py"
    imported = [(node.module, alias.name) for node in ast.walk(ast.parse(example.read_text()))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rltrain")
                for alias in node.names]
    assert {"RLComponents", "RLStrategy", "Run", "Policy", "EnvInit"} <= {n for _, n in imported}
    for module, name in imported:
        assert module in PUBLIC, f"{module} is not a public package"
        assert name in importlib.import_module(module).__all__, f"{module}.{name}"


#: The classes one extends to add an agent, a loop, a renderer or callback, or a store.
EXTENSION_BASES = {"LearningAgent", "Policy", "DQN", "RLStrategy", "Subscriber", "CheckpointIO"}
DOCS = Path(__file__).parents[2] / "docs"


def extension_blocks() -> list[tuple[str, str]]:
    """Every ```python block of the docs that defines a class on an extension base or
    registers one for configs."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"),
                                re.DOTALL):
            try:
                tree = ast.parse(block)
            except SyntaxError:  # an outline with "..." where code goes
                continue
            bases = {getattr(b, "id", getattr(b, "attr", None)) for node in ast.walk(tree)
                     if isinstance(node, ast.ClassDef) for b in node.bases}
            if bases & EXTENSION_BASES or "register_" in block:
                found.append((page.name, block))
    return found


def test_the_docs_write_each_extension_against_public_names() -> None:
    """A custom agent, loop, renderer and store, as the docs write them, import nothing from
    inside a module."""
    blocks = extension_blocks()
    pages = {page for page, _ in blocks}
    assert {"configs.md", "custom_strategy.md", "events.md", "checkpoints.md"} <= pages, pages
    for page, block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rltrain"):
                assert node.module in PUBLIC, f"{page}: {node.module} is not a public package"
                for alias in node.names:
                    assert alias.name in importlib.import_module(node.module).__all__, (
                        f"{page}: {node.module}.{alias.name}")

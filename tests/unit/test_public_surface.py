"""The public surface: about 20 names in ``rltrain``, everything else from its folder; names of
the earlier layout still found where they were (the top level warns with the new home)."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import rltrain


def test_the_package_exports_about_twenty_names_each_importable() -> None:
    assert 18 <= len(rltrain.__all__) <= 25
    for name in rltrain.__all__:
        assert getattr(rltrain, name) is not None
    assert {"Trainer", "Dreamer", "Run", "LearningAgent", "load_policy"} <= set(rltrain.__all__)
    assert "Runner" not in rltrain.__all__ and "Optimization" not in rltrain.__all__


@pytest.mark.parametrize(("name", "home"), [("Runner", "rltrain.envs.runner"),
                                            ("Checkpointer", "rltrain.checkpoint.store"),
                                            ("Interrupter", "rltrain.runtime.interrupt"),
                                            ("TrainerConfig", "rltrain.config.trainer_config")])
def test_a_name_of_the_earlier_top_level_warns_with_its_new_home(name: str, home: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"rltrain.{name} moved"):
        found = getattr(rltrain, name)
    assert found.__module__ == home


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = rltrain.Nothing  # type: ignore[attr-defined]


@pytest.mark.parametrize(("package", "name", "home"), [
    ("rltrain.config", "compose", "rltrain.config.schema"),
    ("rltrain.config", "ConfigError", "rltrain.config.files"),
    ("rltrain.config", "AGENTS", "rltrain.config.registry"),
    ("rltrain.envs", "make_vector_env", "rltrain.envs.make"),
    ("rltrain.envs", "SubEnvError", "rltrain.envs.errors"),
    ("rltrain.cli", "main", "rltrain.cli.app")])
def test_the_earlier_modules_names_are_found_in_their_folders(package: str, name: str,
                                                              home: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = getattr(importlib.import_module(package), name)
    assert found is getattr(importlib.import_module(home), name)


#: The public packages: one per extension point (docs/architecture.md).
PUBLIC = ("rltrain", "rltrain.agents", "rltrain.strategies", "rltrain.envs", "rltrain.observe",
          "rltrain.checkpoint")


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

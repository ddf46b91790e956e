"""The public surface: about 20 names in ``rltrain``, everything else from its folder; names of
the earlier layout still found where they were (the top level warns with the new home)."""

from __future__ import annotations

import importlib
import warnings

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

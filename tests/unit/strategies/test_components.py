"""``RLComponents``: built once and never reassigned; what its checkpoint holds read once,
kept for the resume's checks and parts, then released."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from rltrain.checkpoint import Checkpointer
from rltrain.strategies.components import RLComponents


def test_components_cannot_be_reassigned_once_built() -> None:
    components = RLComponents(num_steps=10, device="cpu")  # type: ignore[arg-type]
    assert components.device == torch.device("cpu")  # converted once, at construction
    for name, value in [("num_steps", 20), ("checkpoint", Path("x.pt")), ("config", {})]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(components, name, value)


def test_the_checkpoint_is_read_once_and_released_after_the_resume(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    saved = checkpointer.save({"agent_class": "DQN", "weights": torch.arange(3.0)}, env_steps=5)
    components = RLComponents(num_steps=10, checkpoint=saved.path, checkpointer=checkpointer)
    first = components.saved_state()
    assert first["agent_class"] == "DQN" and torch.equal(first["weights"], torch.arange(3.0))
    assert components.saved_state() is first  # kept: every check reads the same state
    components.release_saved_state()
    again = components.saved_state()  # released: a later call reads the file again
    assert again is not first and torch.equal(again["weights"], torch.arange(3.0))


def test_a_state_read_by_the_caller_is_not_read_again(tmp_path: Path) -> None:
    given = {"agent_class": "PPO"}
    components = RLComponents(num_steps=10, checkpoint=tmp_path / "absent.pt",
                              resume_state=given)
    assert components.saved_state() is given  # the file (absent) is never opened
    components.release_saved_state()
    with pytest.raises(Exception, match=r"absent\.pt"):
        components.saved_state()


def test_without_a_checkpoint_there_is_nothing_saved_to_read() -> None:
    with pytest.raises(ValueError, match="no checkpoint"):
        RLComponents(num_steps=10).saved_state()

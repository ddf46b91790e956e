"""What a checkpoint holds: the union of a run's ``Stateful`` parts, and loading it back."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rltrain.checkpoint.manifest import CHECKPOINT_FORMAT
from rltrain.checkpoint.spaces import spaces_state
from rltrain.checkpoint.store import read_checkpoint
from rltrain.envs.make import EnvInit, make_probe_env

if TYPE_CHECKING:
    from rltrain.agents.base import LearningAgent
    from rltrain.types import Progress


def _version() -> str:
    from rltrain._version import __version__

    return __version__


class Stateful(Protocol):
    """Anything a checkpoint holds: it turns itself into tensors and plain data and back."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


def training_state(agent: LearningAgent, parts: Mapping[str, Stateful], progress: Progress,
                   hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint: the union of ``parts``' state dicts, the counters and what made the run.

    ``parts`` names every component with state (``"agent"``, ``"optimization"``, ``"buffer"``,
    ``"runner"``, ``"random"``, ``"metrics"`` for the off-policy strategy); ``hparams`` are the
    strategy's and agent's settings, compared on resume. The agent's spaces are kept as
    ``"spaces"`` (plain data, :mod:`rltrain.checkpoint.spaces`), for :func:`rltrain.load_policy`.
    """
    spaces = {} if agent.spaces is None else {"spaces": spaces_state(*agent.spaces)}
    return {
        "format": CHECKPOINT_FORMAT,
        "agent_class": type(agent).__name__,
        "versions": {"rltrain": _version(), "torch": str(torch.__version__)},
        "hparams": dict(hparams),
        "progress": dataclasses.asdict(progress),
        **spaces,
        **{name: part.state_dict() for name, part in parts.items()},
    }


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint file and what it holds, read once: ``Trainer.fit(ckpt_path=...)`` takes one,
    so a caller that read the file (the command line reads its config) does not read it again.

    Attributes:
        path: The file.
        state: Its contents (:func:`~rltrain.checkpoint.store.read_checkpoint`).
    """

    path: Path
    state: dict[str, Any]

    @classmethod
    def read(cls, path: str | Path) -> LoadedCheckpoint:
        return cls(Path(path), read_checkpoint(path))


def load_agent(agent: LearningAgent, path: str | Path, env: EnvInit) -> dict[str, Any]:
    """Load a checkpoint's networks into ``agent``, building it for ``env``'s spaces first.

    Returns the whole checkpoint (counters and optimizer states included). Raises ``ValueError``
    when the checkpoint holds another agent type or networks of other shapes.
    """
    state = read_checkpoint(path)
    saved_class = state.get("agent_class")
    if saved_class != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {saved_class} checkpoint; it cannot be loaded into a "
            f"{type(agent).__name__}. Build a {saved_class} to load it."
        )
    probe = make_probe_env(env)
    try:
        agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                    device=agent.device, progress=agent.progress)
    finally:
        probe.close()
    try:
        agent.load_state_dict(state["agent"])
    except RuntimeError as error:
        raise ValueError(
            f"The networks in {path} do not fit this {type(agent).__name__} (were they trained "
            f"with other settings, sizes or on another environment? Build the agent with the "
            f"checkpoint's agent settings, its 'hparams'): {_first_line(error)}") from None
    return state


def _first_line(error: BaseException) -> str:
    """The gist of torch's multi-line ``load_state_dict`` error, on one line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[1:3] if len(lines) > 1 else lines)[:300]

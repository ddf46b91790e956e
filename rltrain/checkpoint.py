"""Saving the agent to disk while it trains: atomic files, loaded without running code."""

from __future__ import annotations

import dataclasses
import os
import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rltrain.envs import EnvInit, env_factory

if TYPE_CHECKING:
    from rltrain.agents.base import LearningAgent
    from rltrain.components import Progress, RLComponents


#: Version of the checkpoint layout written by :func:`training_state`.
CHECKPOINT_FORMAT = 1


def _version() -> str:
    from rltrain import __version__

    return __version__


class Checkpointer:
    """Writes ``checkpoint-<env_steps>.pt`` files every ``interval`` env steps and at the end.

    A file is written beside its final name, flushed to disk, then renamed into place, so a crash
    never leaves a half-written checkpoint under a checkpoint's name. ``last.pt`` is replaced the
    same way on every save.

    Args:
        directory: Where checkpoints go (created on first save).
        interval: Env steps between saves; None saves only at the end. Default None.
    """

    def __init__(self, directory: str | Path, *, interval: int | None = None) -> None:
        if interval is not None and interval < 1:
            raise ValueError(
                f"checkpoint interval must be >= 1 env step (or None); got {interval}."
            )
        self.directory = Path(directory)
        self.interval = interval

    def due(self, previous_env_steps: int, env_steps: int) -> bool:
        """True when an interval boundary lies in ``(previous_env_steps, env_steps]``."""
        if self.interval is None:
            return False
        return env_steps // self.interval > previous_env_steps // self.interval

    def path(self, env_steps: int) -> Path:
        """Where the checkpoint taken at ``env_steps`` is written."""
        return self.directory / f"checkpoint-{env_steps}.pt"

    def save(self, state: dict[str, Any], *, env_steps: int) -> Path:
        """Write ``state`` as ``checkpoint-<env_steps>.pt`` and point ``last.pt`` at it (a hard
        link swapped in atomically, so the data is written once); returns the former."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(env_steps)
        atomic_save(state, path)
        last = self.directory / "last.pt"
        link = last.with_name(f".last.pt.{os.getpid()}.tmp")
        try:
            link.unlink(missing_ok=True)
            os.link(path, link)
            os.replace(link, last)
        except OSError:  # a filesystem without hard links: write a copy instead
            link.unlink(missing_ok=True)
            atomic_save(state, last)
        return path

    def save_best(self, state: dict[str, Any]) -> Path:
        """Write ``state`` as ``best.pt`` (called when an evaluation beats the best so far)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "best.pt"
        atomic_save(state, path)
        return path

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """Read a checkpoint with ``torch.load(weights_only=True)``: tensors and plain data only."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"No checkpoint at {path}. Checkpoints are written to <run_dir>/checkpoints/ "
                "(last.pt, best.pt, checkpoint-<env_steps>.pt).")
        try:
            state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            raise ValueError(
                f"{path} holds objects a checkpoint must not contain (only tensors and plain "
                f"data load); it was not written by rltrain or was tampered with: {error}"
            ) from error
        except (RuntimeError, EOFError, OSError) as error:
            raise ValueError(f"{path} is not a readable checkpoint (truncated or corrupt?): "
                             f"{error}") from error
        return state


class Stateful(Protocol):
    """Anything a checkpoint holds: it turns itself into tensors and plain data and back."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


def training_state(agent: LearningAgent, parts: Mapping[str, Stateful], progress: Progress,
                   hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint: the union of ``parts``' state dicts, the counters and what made the run.

    ``parts`` names every component with state (``"agent"``, ``"optimization"``, ``"buffer"``,
    ``"runner"``, ``"random"``, ``"metrics"`` for the off-policy strategy); ``hparams`` are the
    strategy's and agent's settings, compared on resume.
    """
    return {
        "format": CHECKPOINT_FORMAT,
        "agent_class": type(agent).__name__,
        "versions": {"rltrain": _version(), "torch": str(torch.__version__)},
        "hparams": dict(hparams),
        "progress": dataclasses.asdict(progress),
        **{name: part.state_dict() for name, part in parts.items()},
    }


def restore_progress(components: RLComponents) -> None:
    """Set ``components.progress`` to the counters saved in ``components.checkpoint``."""
    if components.checkpoint is None:
        raise ValueError("restore_progress needs components.checkpoint (a file to resume from).")
    saved = Checkpointer.load(components.checkpoint)["progress"]
    for name, value in saved.items():
        setattr(components.progress, name, int(value))


def resume(components: RLComponents, agent: LearningAgent,
           parts: Mapping[str, Stateful]) -> None:
    """Load every part saved in ``components.checkpoint`` (the counters were restored by the
    strategy template, :func:`restore_progress`, before the Start event)."""
    path = components.checkpoint
    if path is None:
        raise ValueError("resume needs components.checkpoint (a file to resume from).")
    state = Checkpointer.load(path)
    if state.get("agent_class") != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {state.get('agent_class')} checkpoint, not a {type(agent).__name__}."
        )
    missing = [name for name in parts if name not in state]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)} state; it was saved by another "
                         "strategy or an older rltrain.")
    for name, part in parts.items():
        try:
            part.load_state_dict(state[name])
        except pickle.UnpicklingError as error:
            raise ValueError(f"{path}: refusing to load its {name} state: {error}") from error


def atomic_save(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file in ``path``'s folder, fsync it, then rename it over."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a checkpoint is as readable as other files
        with os.fdopen(fd, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_agent(agent: LearningAgent, path: str | Path, env: EnvInit) -> dict[str, Any]:
    """Load a checkpoint's networks into ``agent``, building it for ``env``'s spaces first.

    Returns the whole checkpoint (counters and optimizer states included). Raises ``ValueError``
    when the checkpoint holds another agent type or networks of other shapes.
    """
    state = Checkpointer.load(path)
    saved_class = state.get("agent_class")
    if saved_class != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {saved_class} checkpoint; it cannot be loaded into a "
            f"{type(agent).__name__}. Build a {saved_class} to load it."
        )
    probe = env_factory(env)()
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
            f"with other sizes or on another environment?): {error}"
        ) from error
    return state

"""Saving the agent to disk while it trains: atomic files, loaded without running code."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rltrain.envs import EnvInit, env_factory

if TYPE_CHECKING:
    from rltrain.agents.base import LearningAgent
    from rltrain.components import Progress, RLComponents
    from rltrain.optim import Optimization


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
        """Write ``state`` as ``checkpoint-<env_steps>.pt`` and ``last.pt``; returns the former."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(env_steps)
        atomic_save(state, path)
        atomic_save(state, self.directory / "last.pt")
        return path

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """Read a checkpoint with ``torch.load(weights_only=True)``: tensors and plain data only."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"No checkpoint at {path}.")
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        return state


def training_state(agent: LearningAgent, optim: Optimization,
                   progress: Progress) -> dict[str, Any]:
    """What a checkpoint holds: the agent's class and networks, the optimizers, the counters."""
    return {
        "agent_class": type(agent).__name__,
        "agent": agent.state_dict(),
        "optimization": optim.state_dict(),
        "progress": dataclasses.asdict(progress),
    }


def resume_path(components: RLComponents) -> Path:
    """The file of ``components.checkpoint`` in ``components.checkpointer``'s directory."""
    checkpointer, step = components.checkpointer, components.checkpoint
    if checkpointer is None or step is None:
        raise ValueError("Resuming needs both components.checkpointer and components.checkpoint.")
    return checkpointer.path(step)


def restore_progress(components: RLComponents) -> None:
    """Set ``components.progress`` to the counters saved in ``components.checkpoint``."""
    saved = Checkpointer.load(resume_path(components))["progress"]
    for name, value in saved.items():
        setattr(components.progress, name, int(value))


def resume(components: RLComponents, agent: LearningAgent, optim: Optimization) -> None:
    """Load the networks and optimizer states of ``components.checkpoint``.

    The agent must be set up (built) already; the counters were restored by the strategy
    template (:func:`restore_progress`). The replay buffer and the random generators are not in
    checkpoints yet, so training continues from the saved weights with an empty buffer (refilled
    before learning resumes) and fresh random streams: a continuation, not an exact replay (a
    warning says so).
    """
    path = resume_path(components)
    step = components.progress.env_steps
    state = Checkpointer.load(path)
    if state.get("agent_class") != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {state.get('agent_class')} checkpoint, not a {type(agent).__name__}."
        )
    agent.load_state_dict(state["agent"])
    optim.load_state_dict(state["optimization"])
    warnings.warn(
        f"Resumed from {path} at {step:,} env steps with an empty replay buffer and fresh random "
        "streams: training continues, but not exactly as an uninterrupted run would.",
        stacklevel=2,
    )


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

"""A policy as a ``torch.export`` program: a file that runs with torch alone.

The program is the policy's deterministic ``act`` traced once (``torch.export.export``, the
batch size dynamic) and saved with ``torch.export.save``: the observation encoders (``uint8``
images scaled, channels moved first, ``Discrete`` keys one-hot), the observation normalisation
(PPO's ``normalize_observations``, its statistics as constants) and the greedy action selection
(argmax, the distribution's mode, the clip or rescale to the action space's bounds) are in its
graph. Its inputs and outputs, for a batch of ``B`` observations in their storage dtype
(float32 for float spaces, the space's own for others: ``uint8`` images as they are, int64
``Discrete`` indices):

- memoryless policies: ``actions = program(obs)``, ``obs`` a ``[B, *shape]`` tensor (a dict of
  them, one per key, for a ``Dict`` space);
- recurrent policies (Dreamer): ``actions, state = program(obs, state)``, ``state`` a tuple of
  tensors, each ``[B, ...]``, starting from the ``initial_state`` rows of the metadata.

The actions are ``[B, *action_shape]``: int64 indices for discrete spaces, float32 otherwise.
The file also holds ``rltrain.json`` (read it with ``torch.export.load(path,
extra_files={"rltrain.json": ""})``): the spaces' shapes and dtypes and the initial state.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrain._version import __version__
from rltrain.agents.base import Policy
from rltrain.buffers.observations import layout, map_obs, torch_zeros
from rltrain.types import ObsTensors

#: The name of the metadata file inside an exported program.
EXPORT_METADATA = "rltrain.json"


class Actions(nn.Module):
    """A memoryless policy's deterministic actions: ``forward(obs) -> actions``."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: ObsTensors) -> torch.Tensor:
        with torch.no_grad():
            return self.policy.act(obs, None, True).action


class RecurrentActions(nn.Module):
    """A recurrent policy's: ``forward(obs, state) -> (actions, next_state)``."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: ObsTensors, state: tuple[torch.Tensor, ...]
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with torch.no_grad():
            step = self.policy.act(obs, state, True)
        assert isinstance(step.state, tuple)
        return step.action, tuple(step.state)


def export_program(policy: Policy, observation_space: gym.Space[Any],
                   action_space: gym.Space[Any], path: Path, device: torch.device) -> Path:
    """Export ``policy`` (on ``device``) for these spaces to ``path`` (``torch.export.save``);
    returns ``path``."""
    example = map_obs(lambda t: t.to(device), torch_zeros(observation_space, (2,)))
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    obs_shapes: Any = map_obs(lambda _: {0: batch}, example)
    initial = policy.initial_state(2)
    state = initial if isinstance(initial, tuple) else (
        (initial,) if isinstance(initial, torch.Tensor) else None)
    if initial is not None and not isinstance(initial, tuple):
        raise ValueError(f"{type(policy).__name__}'s recurrent state is a single tensor; "
                         "export takes policies whose state is None or a tuple of tensors.")
    module: nn.Module = Actions(policy) if state is None else RecurrentActions(policy)
    args: tuple[Any, ...] = (example,) if state is None else (example, state)
    shapes: tuple[Any, ...] = (obs_shapes,) if state is None else (
        obs_shapes, tuple({0: batch} for _ in state))
    was_training = policy.training
    policy.eval()
    try:
        with _no_distribution_checks():
            program = torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
    finally:
        policy.train(was_training)
    metadata = {
        "format": 1, "rltrain": __version__, "recurrent": state is not None,
        "observation": _describe_layout(observation_space),
        "action": _describe_action(action_space),
        "initial_state": None if state is None else [part[0].tolist() for part in state],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path), extra_files={EXPORT_METADATA: json.dumps(metadata)})
    return path


@contextlib.contextmanager
def _no_distribution_checks() -> Iterator[None]:
    """torch.distributions' argument checks off while tracing: they branch on the values (a
    data-dependent ``if`` the exporter cannot trace); the graph computes the same without them."""
    distribution = torch.distributions.Distribution
    previous = distribution._validate_args
    distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        distribution.set_default_validate_args(previous)


def _describe_layout(space: gym.Space[Any]) -> dict[str, Any]:
    parts = layout(space)
    if isinstance(parts, dict):
        return {"keys": {key: {"shape": list(shape), "dtype": dtype.name}
                         for key, (shape, dtype) in parts.items()}}
    return {"shape": list(parts[0]), "dtype": parts[1].name}


def _describe_action(space: gym.Space[Any]) -> dict[str, Any]:
    info: dict[str, Any] = {"type": type(space).__name__, "shape": list(space.shape or ()),
                            "dtype": np.dtype(space.dtype).name if space.dtype else None}
    if isinstance(space, gym.spaces.Discrete):
        info.update(n=int(space.n), start=int(space.start))
    return info

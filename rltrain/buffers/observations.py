"""Observation storage for the spaces the agents encode: one array per observation (``Box``,
``Discrete``), or one per key of a ``Dict`` space (keys sorted), each in its space's dtype.

A ``uint8`` image stays ``uint8`` from the env to the encoder, which scales it on the device
after sampling: a quarter of float32's memory (a million 84x84x3 Atari frames, observation and
next observation: 42 GB as uint8, 169 GB as float32). Float spaces are stored as float32 (a
float64 ``Box`` too, as the networks compute in float32); other ``Box`` dtypes as they are;
``Discrete`` and other spaces as int64 indices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, Union

import gymnasium as gym
import numpy as np
import torch

from rltrain.types import ObsArrays, ObsTensors

T = TypeVar("T")
U = TypeVar("U")

#: One stored observation part: its shape and storage dtype.
Part = tuple[tuple[int, ...], np.dtype[Any]]
#: The parts of a space: one, or one per key of a ``Dict`` space (sorted).
Layout = Union[Part, dict[str, Part]]


def storage_dtype(space: gym.Space[Any]) -> np.dtype[Any]:
    """float32 for a float ``Box``, the space's own dtype for another ``Box`` (``uint8``
    images), int64 for ``Discrete`` and every other space."""
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(space.dtype)
        return np.dtype(np.float32) if np.issubdtype(dtype, np.floating) else dtype
    return np.dtype(np.int64)


def layout(space: gym.Space[Any]) -> Layout:
    """The stored parts of ``space``'s observations: ``(shape, dtype)``, or a dict of them
    for a ``Dict`` space (one level of keys)."""
    if isinstance(space, gym.spaces.Dict):
        nested = [key for key, sub in space.spaces.items()
                  if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple))]
        if nested:
            raise ValueError(f"Observation storage holds one level of Dict keys; {nested[0]!r} "
                             f"is a {type(space[nested[0]]).__name__}.")
        return {key: (tuple(space[key].shape or ()), storage_dtype(space[key]))
                for key in sorted(space.spaces)}
    return tuple(space.shape or ()), storage_dtype(space)


def map_obs(fn: Callable[[T], U], obs: T | dict[str, T]) -> U | dict[str, U]:
    """``fn`` applied to an observation batch, or to each key's."""
    if isinstance(obs, dict):
        return {key: fn(value) for key, value in obs.items()}
    return fn(obs)


def numpy_zeros(space: gym.Space[Any], leading: tuple[int, ...]) -> ObsArrays:
    """Zeroed storage for ``leading``-shaped batches of ``space``'s observations."""
    return map_obs(lambda part: np.zeros((*leading, *part[0]), part[1]), layout(space))


def torch_zeros(space: gym.Space[Any], leading: tuple[int, ...]) -> ObsTensors:
    """The same as tensors."""
    return map_obs(lambda part: torch.zeros((*leading, *part[0]),
                                            dtype=getattr(torch, part[1].name)), layout(space))


def row_nbytes(space: gym.Space[Any]) -> int:
    """Bytes of one stored observation."""
    parts = layout(space)
    values = parts.values() if isinstance(parts, dict) else [parts]
    return sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in values)


def obs_nbytes(obs: ObsArrays | ObsTensors) -> int:
    """Bytes held by stored observations."""
    values = obs.values() if isinstance(obs, dict) else [obs]
    return sum(int(value.nbytes) for value in values)


def leading_tensor(obs: ObsTensors) -> torch.Tensor:
    """A tensor of the batch (its first key's for a dict), for the batch size and device."""
    return obs if isinstance(obs, torch.Tensor) else next(iter(obs.values()))


#: The dtype float observations reach a policy in.
FLOAT32 = np.dtype(np.float32)


def to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """An observation batch for a policy on ``device``: floats as float32, other dtypes kept
    (a ``uint8`` image is not copied to float first); on the CPU without a copy where the
    dtype already fits."""
    dtype = array.dtype  # attributes, not np.issubdtype: this runs every vector step
    if dtype is FLOAT32 and device.type == "cpu":  # the common case first, shared as it is
        return torch.from_numpy(array)
    if dtype.kind == "f" and dtype.itemsize != 4:
        return torch.as_tensor(array, dtype=torch.float32, device=device)
    if device.type == "cpu":
        return torch.from_numpy(array)
    return torch.as_tensor(array, device=device)


def _describe(value: Any, skip: int) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v, skip)}" for k, v in value.items()) + "}"
    if isinstance(value, (torch.Tensor, np.ndarray)):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{tuple(value.shape[skip:])} {dtype}"
    return f"a {type(value).__name__}"


def mismatch(saved: Any, expected: Any, skip: int = 0) -> tuple[str, str, str] | None:
    """Where saved storage does not fit ``expected`` (keys, shapes after the first ``skip``
    dimensions, dtypes), as ``(where, found, expected)`` (``where``: ``""`` or a key such as
    ``"['image']"``); None when it fits."""
    if isinstance(expected, dict):
        if not isinstance(saved, dict) or sorted(saved) != sorted(expected):
            return "", _describe(saved, skip), _describe(expected, skip)
        for key, value in expected.items():
            found = mismatch(saved[key], value, skip)
            if found is not None:
                return f"[{key!r}]{found[0]}", found[1], found[2]
        return None
    same = (isinstance(saved, type(expected)) and not isinstance(saved, dict)
            and tuple(saved.shape[skip:]) == tuple(expected.shape[skip:])
            and saved.dtype == expected.dtype)
    return None if same else ("", _describe(saved, skip), _describe(expected, skip))


class GeneratorSampler:
    """The ``sampler_state`` of a buffer whose sampling draws from one NumPy generator,
    ``rng``: that generator's state, what a failed gradient step puts back."""

    rng: np.random.Generator

    @property
    def sampler_state(self) -> Any:
        """The sampling generator's state."""
        return self.rng.bit_generator.state

    @sampler_state.setter
    def sampler_state(self, state: Any) -> None:
        self.rng.bit_generator.state = state

"""The environment's spaces in a checkpoint, as plain data and tensors (never a pickle), read
back as untrusted input.

A checkpoint holds ``"spaces": {"observation": ..., "action": ...}`` so that a policy can be
rebuilt without making the environment again (:func:`rltrain.load_policy`). Each space is a
dict: ``{"type": "Box", "shape": [...], "dtype": "float32", "low": tensor, "high": tensor}``,
``{"type": "Discrete", "n": 2, "start": 0}``, ``MultiDiscrete`` (``nvec``, ``start``),
``MultiBinary`` (``n``) or ``Dict`` (``spaces``: a list of ``[key, space]`` pairs, in order).
Another space is stored as None (the environment is then made to learn it). Every name and
number is checked when it is read: the type and dtype against fixed lists, the shapes and sizes
against limits, the bounds against the shape.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
import torch

#: The dtypes a stored ``Box`` may name.
BOX_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                        "uint8", "uint16", "uint32", "uint64"})
#: The largest number of elements a stored space may have, and its deepest ``Dict`` nesting.
MAX_ELEMENTS, MAX_DEPTH, MAX_KEYS = 1 << 28, 4, 1024


def spaces_state(observation_space: gym.Space[Any], action_space: gym.Space[Any]
                 ) -> dict[str, Any]:
    """``{"observation": ..., "action": ...}``, each :func:`space_state` (None when not kept)."""
    return {"observation": space_state(observation_space), "action": space_state(action_space)}


def space_state(space: gym.Space[Any]) -> dict[str, Any] | None:
    """``space`` as plain data and tensors; None for a space of another type."""
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).name,
                "low": torch.from_numpy(np.array(space.low)),
                "high": torch.from_numpy(np.array(space.high))}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": torch.from_numpy(np.array(space.nvec,
                                                                           np.int64)),
                "start": torch.from_numpy(np.array(space.start, np.int64))}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": [int(n) for n in np.atleast_1d(space.n)]}
    if isinstance(space, gym.spaces.Dict):
        parts = [[str(key), space_state(sub)] for key, sub in space.spaces.items()]
        if any(part is None for _, part in parts):
            return None
        return {"type": "Dict", "spaces": parts}
    return None


class SpaceStateError(ValueError):
    """A checkpoint's stored space is not one rltrain writes."""


def space_from_state(data: Any, where: str = "space", depth: int = 0) -> gym.Space[Any]:
    """The space :func:`space_state` stored, every part checked first (else
    :class:`SpaceStateError` naming the part)."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        _refuse(where, "is not a stored space (a dict with a 'type')")
    kind = data["type"]
    if kind == "Box":
        return _box(data, where)
    if kind == "Discrete":
        return gym.spaces.Discrete(_count(data.get("n"), f"{where}.n", 1),
                                   start=_integer(data.get("start"), f"{where}.start"))
    if kind == "MultiDiscrete":
        nvec = _int_tensor(data.get("nvec"), f"{where}.nvec")
        start = _int_tensor(data.get("start"), f"{where}.start")
        if start.shape != nvec.shape or (nvec < 1).any():
            _refuse(where, "has an nvec below 1 or a start of another shape")
        return gym.spaces.MultiDiscrete(nvec.numpy(), start=start.numpy())
    if kind == "MultiBinary":
        binary = data.get("n")
        if not isinstance(binary, list) or not 1 <= len(binary) <= 8:
            _refuse(where, "has an n that is not a list of 1 to 8 sizes")
        sizes = [_count(v, f"{where}.n", 1) for v in binary]
        _elements(sizes, where)
        return gym.spaces.MultiBinary(sizes if len(sizes) > 1 else sizes[0])
    if kind == "Dict":
        return _dict(data, where, depth)
    _refuse(where, f"names the space type {kind[:40]!r}, not one rltrain stores")


def _box(data: dict[str, Any], where: str) -> gym.spaces.Box:
    dtype = data.get("dtype")
    if not isinstance(dtype, str) or dtype not in BOX_DTYPES:
        _refuse(where, f"names the dtype {str(dtype)[:40]!r}, not one of {sorted(BOX_DTYPES)}")
    shape = data.get("shape")
    if not isinstance(shape, list) or len(shape) > 8:
        _refuse(where, "has a shape that is not a list of at most 8 sizes")
    sizes = [_count(v, f"{where}.shape", 0) for v in shape]
    _elements(sizes, where)
    bounds = []
    for name in ("low", "high"):
        value = data.get(name)
        if not isinstance(value, torch.Tensor) or list(value.shape) != sizes:
            _refuse(where, f"has a {name} that is not a tensor of shape {sizes}")
        if not _stored_whole(value):
            _refuse(where, f"has a {name} of {value.numel():,} elements that its file does "
                           "not hold (a broadcast view, as rltrain never writes)")
        if value.is_floating_point() and value.isnan().any():
            _refuse(where, f"has a {name} with NaN bounds")
        bounds.append(value.numpy().astype(dtype))
    if (bounds[0] > bounds[1]).any():
        _refuse(where, "has a low bound above its high bound")
    return gym.spaces.Box(bounds[0], bounds[1], shape=tuple(sizes), dtype=np.dtype(dtype))


def _dict(data: dict[str, Any], where: str, depth: int) -> gym.spaces.Dict:
    parts = data.get("spaces")
    if depth >= MAX_DEPTH or not isinstance(parts, list) or len(parts) > MAX_KEYS:
        _refuse(where, f"is not a list of at most {MAX_KEYS} [key, space] pairs nested at "
                       f"most {MAX_DEPTH} deep")
    spaces: dict[str, gym.Space[Any]] = {}
    for i, part in enumerate(parts):
        if (not isinstance(part, list) or len(part) != 2 or not isinstance(part[0], str)
                or not 0 < len(part[0]) <= 200 or part[0] in spaces):
            _refuse(where, f"has an entry {i} that is not a [key, space] pair of a new key")
        spaces[part[0]] = space_from_state(part[1], f"{where}[{part[0][:40]!r}]", depth + 1)
    return gym.spaces.Dict(spaces)


def _count(value: Any, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not (
            minimum <= value <= MAX_ELEMENTS):
        _refuse(where, f"is {str(value)[:40]!r}, not a size from {minimum} to {MAX_ELEMENTS}")
    return value


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > 1 << 62:
        _refuse(where, f"is {str(value)[:40]!r}, not an integer")
    return value


def _stored_whole(value: torch.Tensor) -> bool:
    """Whether every element of ``value`` is held by its storage (no stride-0 broadcast view,
    which a small file can use to make a space of billions of elements)."""
    return value.is_contiguous() and (value.untyped_storage().nbytes()
                                      >= value.numel() * value.element_size())


def _int_tensor(value: Any, where: str) -> torch.Tensor:
    if (not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 1
            or not 1 <= value.numel() <= MAX_KEYS or not _stored_whole(value)):
        _refuse(where, f"is not a 1-D int64 tensor of 1 to {MAX_KEYS} values")
    return value


def _elements(sizes: list[int], where: str) -> None:
    if math.prod(sizes) > MAX_ELEMENTS:
        _refuse(where, f"has {math.prod(sizes):,} elements, more than {MAX_ELEMENTS:,}")


def _refuse(where: str, why: str) -> NoReturn:
    raise SpaceStateError(f"its stored {where} {why}; it was not written by rltrain, or it was "
                          "altered")

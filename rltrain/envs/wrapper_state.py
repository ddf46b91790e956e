"""The state of an env's wrapper layers as checked data, for the envs saved as arrays
(:mod:`rltrain.envs.physics`, :mod:`rltrain.envs.emulator`): per layer, outermost first, its
class name and the attributes that hold its episode state.

An attribute is either plain (``None``, a bool or an int: ``TimeLimit``'s elapsed steps) or a
sequence of arrays (a list or a deque of NumPy arrays: the frames a frame stack holds), saved
as tensors and checked on load against the live attribute's length, shapes and dtypes. A layer
whose class is not in the table, nor declares its state itself, keeps an env out of these paths
(the general rule applies).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.envs.checks import layers

#: What a layer's attribute holds: ``PLAIN`` (None, a bool or an int) or ``ARRAYS`` (a list or
#: deque of arrays of fixed shapes and dtypes).
PLAIN, ARRAYS = "plain", "arrays"

#: Per wrapper class, its state attributes and their kinds.
Table = dict[type, dict[str, str]]

#: The class attribute by which a wrapper declares its own state attributes (``{name: kind}``;
#: ``{}`` for none), as rltrain's wrappers do: read from the class itself, not inherited (a
#: subclass may keep more state).
DECLARED = "saved_attributes"

#: Gymnasium's standard wrappers (those ``gym.make`` adds, and the action and observation
#: wrappers that keep no state): the table of :mod:`rltrain.envs.physics`, which
#: :mod:`rltrain.envs.emulator` extends.
STANDARD: Table = {
    gym.wrappers.TimeLimit: {"_elapsed_steps": PLAIN},
    gym.wrappers.OrderEnforcing: {"_has_reset": PLAIN},
    gym.wrappers.PassiveEnvChecker: dict.fromkeys(
        ("checked_reset", "checked_step", "checked_render", "close_called",
         "checked_data_reuse", "_previous_data"), PLAIN),
    gym.wrappers.ClipAction: {},
    gym.wrappers.RescaleAction: {},
    gym.wrappers.FlattenObservation: {},
    gym.wrappers.DtypeObservation: {},
}


def wrappers(env: gym.Env[Any, Any]) -> list[gym.Env[Any, Any]]:
    """``env``'s wrapper layers, outermost first (the unwrapped env left out)."""
    inner = env.unwrapped
    return [layer for layer in layers(env) if layer is not inner]


def attributes(layer: gym.Env[Any, Any], table: Table) -> dict[str, str] | None:
    """A wrapper layer's state attributes and their kinds: its class's in ``table``, else
    those its class declares (:data:`DECLARED`), else None (a layer of unknown state)."""
    found = table.get(type(layer))
    return found if found is not None else vars(type(layer)).get(DECLARED)


def known(env: gym.Env[Any, Any], table: Table) -> bool:
    """Whether the state attributes of every wrapper layer of ``env`` are known."""
    return all(attributes(layer, table) is not None for layer in wrappers(env))


def holds_data(env: gym.Env[Any, Any], table: Table) -> bool:
    """Whether every saved attribute of ``env``'s layers holds what its kind allows now (a
    plain value, or arrays), so that :func:`state` can save it."""
    for layer in wrappers(env):
        for name, kind in _attributes(layer, table).items():
            value = getattr(layer, name, None)
            if not (_plain(value) if kind == PLAIN else _arrays(value)):
                return False
    return True


def state(env: gym.Env[Any, Any], table: Table) -> list[dict[str, Any]]:
    """Each layer's class name and state attributes (arrays as tensors); ``env`` must be
    :func:`known` and :func:`holds_data`."""
    saved = []
    for layer in wrappers(env):
        values: dict[str, Any] = {"class": type(layer).__name__}
        for name, kind in _attributes(layer, table).items():
            value = getattr(layer, name)
            values[name] = (value if kind == PLAIN
                            else [torch.from_numpy(np.array(array)) for array in value])
        saved.append(values)
    return saved


def check(env: gym.Env[Any, Any], saved: Any, table: Table, where: str) -> None:
    """Refuse ``saved`` (untrusted) unless it is :func:`state`'s output for layers like
    ``env``'s: the same classes in the same order, each attribute of its kind, arrays of the
    live ones' count, shapes and dtypes. ``where`` starts the error message."""
    live = wrappers(env)
    classes = [type(layer).__name__ for layer in live]
    if (not isinstance(saved, list)
            or [w.get("class") if isinstance(w, dict) else None for w in saved] != classes):
        raise ValueError(f"{where} was saved inside other wrappers than {classes}. Resume "
                         "with the wrappers it was trained with.")
    for layer, values in zip(live, saved, strict=True):
        for name, kind in _attributes(layer, table).items():
            what = f"{where}: {type(layer).__name__}.{name}"
            value = values.get(name)
            if kind == PLAIN:
                if name not in values or not _plain(value):
                    raise ValueError(f"{what} is {value!r}, not an int, a bool or None.")
                continue
            current = getattr(layer, name)
            if not isinstance(value, list) or len(value) != len(current):
                raise ValueError(f"{what} holds no list of {len(current)} arrays.")
            for array, like in zip(value, current, strict=True):
                check_array(array, like.shape, like.dtype, what)


def restore(env: gym.Env[Any, Any], saved: list[dict[str, Any]], table: Table) -> None:
    """Put :func:`check`-ed ``saved`` back into ``env``'s layers."""
    for layer, values in zip(wrappers(env), saved, strict=True):
        for name, kind in _attributes(layer, table).items():
            if kind == PLAIN:
                setattr(layer, name, values[name])
                continue
            current = getattr(layer, name)
            arrays = [tensor.numpy().copy() for tensor in values[name]]
            if isinstance(current, deque):
                current.clear()
                current.extend(arrays)
            else:
                current[:] = arrays


def check_array(value: Any, shape: tuple[int, ...], dtype: Any, what: str,
                other: str = "env") -> np.ndarray:
    """``value`` as a NumPy array after checking it is a tensor of ``shape`` and ``dtype``;
    ``other`` names what a mismatch means it was saved on (another env, another model)."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{what} is a {type(value).__name__}, not an array.")
    array = value.numpy()
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ValueError(f"{what} has shape {array.shape} and dtype {array.dtype}; this env's "
                         f"has {tuple(shape)} and {np.dtype(dtype)}: it was saved on another "
                         f"{other}. Resume on the env it was trained on.")
    return array


def generator_states(inner: Any) -> list[Any]:
    """The state of the env's own random generator and of its action and observation spaces'
    (``bit_generator.state``); None for a space whose generator was never made (a space no
    one seeded or sampled, such as the raw screen space inside a preprocessing wrapper: one
    made now would be seeded from the OS)."""
    return [inner.np_random.bit_generator.state,
            *(None if space._np_random is None else space.np_random.bit_generator.state
              for space in (inner.action_space, inner.observation_space))]


def check_generators(inner: Any, saved: Any, where: str) -> None:
    """Refuse ``saved`` unless it is one state (or None for a space) per generator of
    :func:`generator_states`, each valid for a generator of its kind."""
    if not isinstance(saved, list) or len(saved) != 3 or saved[0] is None:
        raise ValueError(f"{where}: it holds no state of the env's 3 random generators.")
    for rng in saved:
        if rng is None:
            continue
        trial = type(inner.np_random.bit_generator)()
        try:
            trial.state = rng
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"{where}: the state of its random generators is not valid for "
                             f"a {type(trial).__name__} ({error}).") from None


def restore_generators(inner: Any, saved: list[Any]) -> None:
    """Put :func:`check_generators`-ed states back (a space's left as it is where None)."""
    owners = [inner, inner.action_space, inner.observation_space]
    for owner, rng in zip(owners, saved, strict=True):
        if rng is not None:
            owner.np_random.bit_generator.state = rng


def _attributes(layer: gym.Env[Any, Any], table: Table) -> dict[str, str]:
    found = attributes(layer, table)
    assert found is not None, f"{type(layer).__name__}'s state is not known"
    return found


def _plain(value: object) -> bool:
    return value is None or type(value) in (bool, int)


def _arrays(value: object) -> bool:
    return isinstance(value, list | deque) and all(isinstance(v, np.ndarray) for v in value)

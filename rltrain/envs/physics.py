"""The state of MuJoCo environments as plain arrays, so that a resumed run continues their
episodes bit for bit (no pickle: MuJoCo envs pickle only their constructor arguments).

One sub-env's state is a dict of tensors and numbers:

- ``physics``: MuJoCo's integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time,
  positions, velocities, actuator activations, controls, applied forces and the solver's
  warm start), restored with ``mj_setState``;
- ``fields``: every other array of ``mjData`` whose size the model fixes (positions of bodies,
  contact forces, ...): quantities MuJoCo derives from the state, which an env may read before
  its next step (Ant's torso position), kept as they were so nothing is recomputed;
- ``rng``: the env's random generator, and those of its action and observation spaces (their
  ``bit_generator.state``);
- ``wrappers``: per wrapper layer, outermost first, its class name and its state attributes
  (``TimeLimit``'s elapsed steps, ``OrderEnforcing``'s and ``PassiveEnvChecker``'s flags).

Only Gymnasium's own MuJoCo envs (``gymnasium.envs.mujoco``), whose Python objects keep no
episode state besides ``mjData`` and the generator, inside wrappers of :data:`WRAPPER_STATE`,
are saved this way; any other env keeps the general rule (pickled when it can be, else the
warning that a resume restarts its episodes). Every value read back is checked against the
live env: names, dtypes, shapes and types.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.envs.checks import layers
from rltrain.envs.make import _SubEnv  # its name is in pickled checkpoints: kept
from rltrain.envs.mujoco_log import MUJOCO_ENVS

#: Wrapper classes whose state this module saves, by the attributes that hold it (ints, bools
#: or None); a wrapper not named here keeps an env out of this path.
WRAPPER_STATE: dict[type[gym.Env[Any, Any]], tuple[str, ...]] = {
    gym.wrappers.TimeLimit: ("_elapsed_steps",),
    gym.wrappers.OrderEnforcing: ("_has_reset",),
    gym.wrappers.PassiveEnvChecker: ("checked_reset", "checked_step", "checked_render",
                                     "close_called", "checked_data_reuse", "_previous_data"),
    gym.wrappers.ClipAction: (),
    gym.wrappers.RescaleAction: (),
    gym.wrappers.FlattenObservation: (),
    gym.wrappers.DtypeObservation: (),
    _SubEnv: (),
}



def _mujoco() -> Any:
    import mujoco  # an optional extra: imported only for envs that are MuJoCo's

    return mujoco


def restorable(env: gym.Env[Any, Any]) -> bool:
    """Whether a state saved by :func:`state` can be put back into ``env``: one of
    Gymnasium's MuJoCo envs in wrappers of :data:`WRAPPER_STATE` only."""
    inner = env.unwrapped
    return (type(inner).__module__.startswith(MUJOCO_ENVS + ".") and hasattr(inner, "data")
            and all(type(layer) in WRAPPER_STATE for layer in layers(env) if layer is not inner))


def saveable(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env``'s state can be saved now: :func:`restorable`, reset at least once, and
    its wrappers' state plain values (Gymnasium's checker holds the first step's observation
    until the second step)."""
    inner = env.unwrapped
    return (restorable(env) and getattr(inner, "_np_random", None) is not None
            and all(_plain(getattr(layer, name, None)) for layer in layers(env)
                    if layer is not inner for name in WRAPPER_STATE[type(layer)]))


def _plain(value: object) -> bool:
    return value is None or type(value) in (bool, int)


def _fields(model: Any) -> list[str]:
    """The arrays of ``mjData`` whose size the model fixes (those of a fresh ``mjData`` that
    are not empty; the constraint arrays, sized per step, are empty there)."""
    fresh = _mujoco().MjData(model)
    return sorted(name for name in dir(fresh) if not name.startswith("_")
                  and isinstance(value := getattr(fresh, name, None), np.ndarray)
                  and value.size > 0)


def state(env: gym.Env[Any, Any]) -> dict[str, Any]:
    """``env``'s state (module docstring); ``env`` must be :func:`saveable`."""
    mujoco = _mujoco()
    inner: Any = env.unwrapped
    model, data = inner.model, inner.data
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    physics = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
    mujoco.mj_getState(model, data, physics, spec)
    return {
        "physics": torch.from_numpy(physics),
        "fields": {name: torch.from_numpy(np.array(getattr(data, name)))
                   for name in _fields(model)},
        "rng": [generator.bit_generator.state for generator in _generators(inner)],
        "wrappers": [{"class": type(layer).__name__,
                      **{n: getattr(layer, n) for n in WRAPPER_STATE[type(layer)]}}
                     for layer in layers(env) if layer is not inner],
    }


def restore(env: gym.Env[Any, Any], saved: Any, index: int) -> None:
    """Put :func:`state`'s output ``saved`` back into ``env`` (sub-env ``index``, named in
    errors), after checking every part of it against ``env``; raises ``ValueError`` naming
    the part that does not fit, before anything is changed."""
    mujoco = _mujoco()
    inner: Any = env.unwrapped
    model, data = inner.model, inner.data
    where = f"The checkpoint's state of sub-env {index} ({type(inner).__name__})"
    if not isinstance(saved, dict) or set(saved) != {"physics", "fields", "rng", "wrappers"}:
        raise ValueError(f"{where} is not a MuJoCo env state; it was altered or written by "
                         "something else. Resume from another checkpoint.")
    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    physics = _array(saved["physics"], (mujoco.mj_stateSize(model, spec),), np.float64,
                     f"{where}: physics")
    names, fields = _fields(model), saved["fields"]
    if not isinstance(fields, dict) or sorted(fields) != names:
        raise ValueError(f"{where} holds other mjData arrays than this env's model has: it "
                         "was saved on another model. Resume on the env it was trained on.")
    arrays = {name: _array(fields[name], getattr(data, name).shape, getattr(data, name).dtype,
                           f"{where}: mjData.{name}") for name in names}
    wrappers = [layer for layer in layers(env) if layer is not inner]
    saved_wrappers = saved["wrappers"]
    classes = [type(layer).__name__ for layer in wrappers]
    if (not isinstance(saved_wrappers, list)
            or [w.get("class") if isinstance(w, dict) else None for w in saved_wrappers]
            != classes):
        raise ValueError(f"{where} was saved inside other wrappers than {classes}. Resume "
                         "with the wrappers it was trained with.")
    for layer, values in zip(wrappers, saved_wrappers, strict=True):
        for name in WRAPPER_STATE[type(layer)]:
            if name not in values or not _plain(values[name]):
                raise ValueError(f"{where}: {type(layer).__name__}.{name} is "
                                 f"{values.get(name)!r}, not an int, a bool or None.")
    live = _generators(inner)
    rngs = saved["rng"]
    if not isinstance(rngs, list) or len(rngs) != len(live):
        raise ValueError(f"{where}: it holds no state of the env's {len(live)} random "
                         "generators.")
    for generator, rng in zip(live, rngs, strict=True):
        _check_generator(generator, rng, where)
    mujoco.mj_setState(model, data, physics, spec)
    for name, array in arrays.items():
        getattr(data, name)[...] = array
    for generator, rng in zip(live, rngs, strict=True):
        generator.bit_generator.state = rng
    for layer, values in zip(wrappers, saved_wrappers, strict=True):
        for name in WRAPPER_STATE[type(layer)]:
            setattr(layer, name, values[name])


def _generators(inner: Any) -> list[np.random.Generator]:
    """The env's own random generator and those of its action and observation spaces."""
    return [inner.np_random, inner.action_space.np_random, inner.observation_space.np_random]


def _check_generator(generator: np.random.Generator, state: Any, where: str) -> None:
    """Refuse ``state`` unless a generator of ``generator``'s kind takes it."""
    trial = type(generator.bit_generator)()
    try:
        trial.state = state
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{where}: the state of its random generators is not valid for a "
                         f"{type(trial).__name__} ({error}).") from None


def _array(value: Any, shape: tuple[int, ...], dtype: Any, what: str) -> np.ndarray:
    """``value`` as a NumPy array after checking it is a tensor of ``shape`` and ``dtype``."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{what} is a {type(value).__name__}, not an array.")
    array = value.numpy()
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ValueError(f"{what} has shape {array.shape} and dtype {array.dtype}; this env's "
                         f"has {tuple(shape)} and {np.dtype(dtype)}: it was saved on another "
                         "model. Resume on the env it was trained on.")
    return array

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
episode state besides ``mjData`` and the generator, inside Gymnasium's standard wrappers
(:data:`~rltrain.envs.wrapper_state.STANDARD`), are saved this way; any other env keeps the
general rule (pickled when it can be, else the warning that a resume restarts its episodes).
Every value read back is checked against the live env: names, dtypes, shapes and types.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

import rltrain.envs.wrapper_state as wrapper_state
from rltrain.envs.mujoco_log import MUJOCO_ENVS
from rltrain.envs.wrapper_state import STANDARD, check_array, generator_states


def _mujoco() -> Any:
    import mujoco  # an optional extra: imported only for envs that are MuJoCo's

    return mujoco


def restorable(env: gym.Env[Any, Any]) -> bool:
    """Whether a state saved by :func:`state` can be put back into ``env``: one of
    Gymnasium's MuJoCo envs in wrappers of :data:`~rltrain.envs.wrapper_state.STANDARD` only."""
    inner = env.unwrapped
    return (type(inner).__module__.startswith(MUJOCO_ENVS + ".") and hasattr(inner, "data")
            and wrapper_state.known(env, STANDARD))


def saveable(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env``'s state can be saved now: :func:`restorable`, reset at least once, and
    its wrappers' state plain values (Gymnasium's checker holds the first step's observation
    until the second step)."""
    return (restorable(env) and getattr(env.unwrapped, "_np_random", None) is not None
            and wrapper_state.holds_data(env, STANDARD))


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
        "rng": generator_states(inner),
        "wrappers": wrapper_state.state(env, STANDARD),
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
    physics = check_array(saved["physics"], (mujoco.mj_stateSize(model, spec),), np.float64,
                          f"{where}: physics", "model")
    names, fields = _fields(model), saved["fields"]
    if not isinstance(fields, dict) or sorted(fields) != names:
        raise ValueError(f"{where} holds other mjData arrays than this env's model has: it "
                         "was saved on another model. Resume on the env it was trained on.")
    arrays = {name: check_array(fields[name], getattr(data, name).shape,
                                getattr(data, name).dtype, f"{where}: mjData.{name}", "model")
              for name in names}
    wrapper_state.check(env, saved["wrappers"], STANDARD, where)
    wrapper_state.check_generators(inner, saved["rng"], where)
    mujoco.mj_setState(model, data, physics, spec)
    for name, array in arrays.items():
        getattr(data, name)[...] = array
    wrapper_state.restore_generators(inner, saved["rng"])
    wrapper_state.restore(env, saved["wrappers"], STANDARD)

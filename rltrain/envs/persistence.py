"""The sub-environments of a vector env in a checkpoint, so that a resumed run steps exactly as
the straight one would have: MuJoCo's and the ALE's as checked data (:mod:`rltrain.envs.physics`,
:mod:`rltrain.envs.emulator`), others pickled and read back through an allow-list
(:mod:`rltrain.envs.pickling`). A sync vector env's sub-envs are saved in the main process; an
async one's in their worker processes, through the vector env's own ``call`` (each worker
returns its sub-env's state, and takes its own back on resume). What cannot be saved (envpool,
unpicklable envs, EzPickle envs such as Box2D) is said, once, and reset on resume. And what a
runner's checkpoint records of its vector env, checked before a run directory is touched
(:func:`check_saved_runner`)."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils import EzPickle
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv

import rltrain.envs.emulator as emulator
import rltrain.envs.physics as physics
from rltrain.buffers.observations import layout
from rltrain.envs.checks import layers, unpicklable_layer
from rltrain.envs.pickling import env_classes, loads

#: The kinds of sub-env saved as checked data, by their key in a runner's state.
AS_DATA: dict[str, ModuleType] = {"physics": physics, "emulator": emulator}

#: A runner state's key for the sub-envs of an async vector env pickled one by one.
PICKLED = "pickled_envs"

#: The class attribute by which an async vector env says its workers' sub-envs answer
#: ``call("rltrain_saved_state")`` and ``call("rltrain_restore_state", ...)`` (rltrain's
#: ``WorkerVectorEnv``, whose sub-envs are ``_SubEnv``s).
WORKERS_SAVE = "workers_save_sub_envs"


class SavedEnvs:
    """Saves and restores the sub-environments of ``envs`` (a ``SyncVectorEnv``'s; any other
    vector env's state is not saved).

    Args:
        envs: The runner's vector env.
    """

    def __init__(self, envs: VectorEnv[Any, Any, Any]) -> None:
        self.envs = envs
        self._warned_unsaved = False

    def state(self) -> dict[str, Any]:
        """``{"physics": [...]}`` or ``{"emulator": [...]}`` (one state per sub-env, as
        checked data), ``{"envs": bytes tensor}`` (a sync vector env's sub-envs pickled
        together), ``{"pickled_envs": [bytes tensors]}`` (an async one's, one by one), or
        ``{}`` when they cannot be saved (warned once per run)."""
        if _workers_save(self.envs):
            return self._async_state()
        if not isinstance(self.envs, SyncVectorEnv):
            self._warn_once(unsaved_backend(self.envs))
            return {}
        for key, kind in AS_DATA.items():
            if all(map(kind.saveable, self.envs.envs)):
                return {key: [kind.state(env) for env in self.envs.envs]}
        try:
            data = pickle.dumps(list(self.envs.envs))
        except Exception as error:
            self._warn_unsaved(self.envs.envs, error)
            return {}
        return {"envs": torch.frombuffer(bytearray(data), dtype=torch.uint8)}

    def restore(self, state: dict[str, Any]) -> bool:
        """Put the saved sub-environments of ``state`` (untrusted: checked, unpickled through
        the allow-list of these envs' classes) in place; False when it holds none these envs
        can take (they are to be reset)."""
        if _workers_save(self.envs):
            return self._async_restore(state)
        if not isinstance(self.envs, SyncVectorEnv):
            return False
        for key, kind in AS_DATA.items():
            saved = state.get(key)
            if saved is not None and all(map(kind.restorable, self.envs.envs)):
                _check_count(saved, self.envs.num_envs)
                for index, (env, env_state) in enumerate(zip(self.envs.envs, saved,
                                                             strict=True)):
                    kind.restore(env, env_state, index)
                return True
        saved = state.get("envs")
        if saved is None:
            return False
        restored = loads(saved.numpy().tobytes(), env_classes(self.envs.envs))
        _check_count(restored, self.envs.num_envs)
        # EzPickle envs (Box2D; MuJoCo's outside rltrain.envs.physics's wrappers) pickle only
        # their constructor arguments: what comes back is a new env, as good as none.
        if any(isinstance(env.unwrapped, EzPickle) for env in restored):
            return False
        for env in self.envs.envs:
            env.close()
        self.envs.envs = restored
        return True

    def _async_state(self) -> dict[str, Any]:
        """The sub-envs' states, each saved in its worker (:func:`sub_env_state`), gathered
        under one key when every worker saved its sub-env the same way."""
        assert isinstance(self.envs, AsyncVectorEnv)
        states = [piped(saved, torch.from_numpy)
                  for saved in self.envs.call("rltrain_saved_state")]
        keys = {next(iter(saved)) for saved in states}
        if len(keys) == 1 and (key := keys.pop()) in (*AS_DATA, PICKLED):
            return {key: [saved[key] for saved in states]}
        reason = next((saved["unsaved"] for saved in states if "unsaved" in saved),
                      f"its sub-envs are saved in different ways. {RESETS}")
        self._warn_once(UNSAVED + reason)
        return {}

    def _async_restore(self, state: dict[str, Any]) -> bool:
        """Send each worker its sub-env's saved state; its worker checks it and puts it in
        place (:func:`restore_sub_env`). A refusal is raised here, naming the sub-env."""
        assert isinstance(self.envs, AsyncVectorEnv)
        key = next((k for k in (*AS_DATA, PICKLED) if state.get(k) is not None), None)
        if key is None:
            return False
        _check_count(state[key], self.envs.num_envs)
        answers = self.envs.call("rltrain_restore_state", key,
                                 piped(state[key], torch.Tensor.numpy))
        problems = [answer for answer in answers if answer is not None]
        if problems:
            raise ValueError(problems[0])
        return True

    def _warn_unsaved(self, envs: list[gym.Env[Any, Any]], error: Exception) -> None:
        """At the first save whose environments cannot be pickled (once per runner, so once
        per run), warn that the resume will not be exact, naming the layer that cannot be
        saved; otherwise only the resume would say so, without the cause."""
        self._warn_once(UNSAVED + unsaved_reason(envs, error))

    def _warn_once(self, message: str) -> None:
        if not self._warned_unsaved:
            self._warned_unsaved = True
            warnings.warn(message, stacklevel=5)


#: How a warning about unsaved environments begins, and what it says a resume then does.
UNSAVED = "The environments cannot be saved in this run's checkpoints: "
RESETS = ("A resume will reset the environments, so the episodes running at the checkpoint "
          "restart and the resumed run is not an exact continuation.")


def unsaved_reason(envs: list[gym.Env[Any, Any]], error: Exception) -> str:
    """Why ``envs`` cannot be saved (pickling them raised ``error``), naming the layer that
    cannot be pickled, what a resume then does and the fix (after :data:`UNSAVED`)."""
    found = next(filter(None, map(unpicklable_layer, envs)), None)
    layer, error = found if found is not None else (envs[0], error)
    inner = getattr(layer, "env", None)
    where = (f" (wrapping {type(inner.unwrapped).__name__})" if isinstance(inner, gym.Env)
             else "")
    return (f"{type(layer).__name__}{where} cannot be pickled ({type(error).__name__}: "
            f"{error}). {RESETS} For an exact resume, replace {type(layer).__name__} with a "
            "picklable equivalent (its functions defined at module level, not lambdas or local "
            "functions).")


def _workers_save(envs: VectorEnv[Any, Any, Any]) -> bool:
    """Whether ``envs`` is rltrain's async vector env, whose workers' sub-envs save and
    restore themselves (:data:`WORKERS_SAVE`; a worker's env without them would fail the
    call, and end the worker)."""
    return isinstance(envs, AsyncVectorEnv) and getattr(type(envs), WORKERS_SAVE, False)


def unsaved_backend(envs: VectorEnv[Any, Any, Any]) -> str:
    """What a checkpoint of a vector env whose sub-envs cannot be saved leaves out (envpool's:
    no state API; an async one not made by rltrain), and which backend would save them."""
    plural = "s" if envs.num_envs > 1 else ""
    why = ("were not made by rltrain.envs.make.make_vector_env (whose workers save them)"
           if isinstance(envs, AsyncVectorEnv) else "have no state API")
    return (f"{type(envs).__name__}'s sub-envs {why}, so this run's checkpoints "
            f"do not hold them: a resume restarts the episode{plural} running at the "
            f"checkpoint ({envs.num_envs} sub-env{plural}: new episodes from a new seed, their "
            "returns so far lost), while "
            "the agent, optimizer, replay or rollout and counters resume exactly. "
            "env.backend=gymnasium (strategy.vectorization=sync or async) saves the envs too, "
            "Atari's emulators included, and resumes exactly.")


def sub_env_state(env: gym.Env[Any, Any]) -> dict[str, Any]:
    """One sub-env's state, in the process it lives in (an async worker's): ``{"physics":
    ...}`` or ``{"emulator": ...}`` as checked data, ``{"pickled_envs": bytes tensor}``, or
    ``{"unsaved": why}`` (what follows :data:`UNSAVED` in the warning)."""
    for key, kind in AS_DATA.items():
        if kind.saveable(env):
            return {key: kind.state(env)}
    if isinstance(env.unwrapped, EzPickle):
        return {"unsaved": f"{type(env.unwrapped).__name__} pickles only its constructor's "
                           f"arguments (EzPickle). {RESETS}"}
    try:
        data = pickle.dumps(env)
    except Exception as error:
        return {"unsaved": unsaved_reason([env], error)}
    return {PICKLED: torch.frombuffer(bytearray(data), dtype=torch.uint8)}


def restore_sub_env(env: gym.Env[Any, Any], key: str, saved: Any, index: int) -> str | None:
    """Put sub-env ``index``'s saved state (``sub_env_state``'s under ``key``; untrusted)
    back into ``env``, in the process it lives in; returns why it was refused (nothing
    changed) or None."""
    try:
        if key in AS_DATA:
            if not AS_DATA[key].restorable(env):
                return (f"The checkpoint holds a {key} state for sub-env {index}, which is not "
                        "such an env here. Resume on the env it was trained on.")
            AS_DATA[key].restore(env, saved, index)
            return None
        if not isinstance(saved, torch.Tensor) or saved.dtype != torch.uint8:
            return f"The checkpoint's state of sub-env {index} is not a pickle's bytes."
        restored = loads(saved.numpy().tobytes(), env_classes([env]))
        _transplant(env, restored, index)
    except (ValueError, pickle.UnpicklingError) as error:
        return str(error)
    return None


def _transplant(env: gym.Env[Any, Any], restored: Any, index: int) -> None:
    """Give each layer of the live ``env`` the attributes of the same layer of ``restored``
    (an unpickled copy): an async worker keeps its env object, so the state moves into it."""
    live = list(layers(env))
    copies = list(layers(restored)) if isinstance(restored, gym.Env) else []
    if [type(layer) for layer in copies] != [type(layer) for layer in live]:
        raise ValueError(f"The checkpoint's sub-env {index} is not an env of this one's "
                         f"layers ({', '.join(type(layer).__name__ for layer in live)}). "
                         "Resume on the env it was trained on.")
    for layer, copy in zip(live, copies, strict=True):
        vars(layer).update({name: value for name, value in vars(copy).items() if name != "env"})


def piped(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``value`` with every tensor (``torch.Tensor.numpy``) or array (``torch.from_numpy``)
    converted, through dicts and lists: what crosses an async worker's pipe is NumPy, since a
    tensor sent there is shared through a file descriptor, which can hang a forked worker."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return convert(value)
    if isinstance(value, dict):
        return {key: piped(item, convert) for key, item in value.items()}
    if isinstance(value, list):
        return [piped(item, convert) for item in value]
    return value


def _check_count(saved: Any, num_envs: int) -> None:
    """Refuse saved sub-envs that are not a list of ``num_envs``."""
    if not isinstance(saved, list) or len(saved) != num_envs:
        count = len(saved) if isinstance(saved, list) else "no list of"
        raise ValueError(f"The checkpoint holds {count} environments; this run has "
                         f"{num_envs} (num_envs). Resume with the checkpoint's num_envs.")


def saved_spaces(observation_space: gym.Space[Any], action_space: gym.Space[Any],
                 num_envs: int) -> dict[str, str]:
    """What a runner's checkpoint records of its vector env, compared on resume."""
    return {"observation": str(observation_space), "action": str(action_space),
            "num_envs": str(num_envs)}


def check_saved_runner(state: Any, observation_space: gym.Space[Any],
                       action_space: gym.Space[Any], num_envs: int) -> None:
    """Refuse a runner state saved on other spaces or another number of sub-envs, or whose
    per-env arrays do not fit them (an altered file), with the reason. Called before a run
    directory is touched (by the strategy's check) and again when the state is loaded."""
    spaces = saved_spaces(observation_space, action_space, num_envs)
    saved = state.get("spaces") if isinstance(state, dict) else None
    if saved != spaces:
        raise ValueError(
            f"The checkpoint was saved on an environment with spaces {saved}; this one has "
            f"{spaces}. Resume on the environment it was trained on, with its num_envs.")
    parts, saved_obs = layout(observation_space), state.get("observations")
    checks: list[tuple[str, Any, tuple[int, ...]]] = [
        (name, state.get(name), (num_envs,)) for name in ("episode_returns", "episode_starts")]
    if isinstance(parts, dict):
        saved_obs = saved_obs if isinstance(saved_obs, dict) else {}
        checks += [(f"observations[{key!r}]", saved_obs.get(key), (num_envs, *shape))
                   for key, (shape, _) in parts.items()]
    else:
        checks.append(("observations", saved_obs, (num_envs, *parts[0])))
    for name, value, shape in checks:
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value)
            raise ValueError(f"The checkpoint's runner {name} has shape {found}; this run's "
                             f"{num_envs} environments need {shape}. It was saved with another "
                             "num_envs or environment, or altered.")
    emulators = state.get("emulator")
    if emulators is not None:
        _check_count(emulators, num_envs)
        for index, saved_env in enumerate(emulators):
            emulator.check_saved(saved_env, f"The checkpoint's state of sub-env {index}")



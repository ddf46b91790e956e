"""The sub-environments of a vector env in a checkpoint, so that a resumed run steps exactly as
the straight one would have: MuJoCo's as checked arrays (:mod:`rltrain.envs.physics`), others
pickled and read back through an allow-list (:mod:`rltrain.envs.pickling`); what cannot be
saved (async workers, envpool, unpicklable envs, EzPickle envs such as Box2D) is said, once, and
reset on resume. And what a runner's checkpoint records of its vector env, checked before a
run directory is touched (:func:`check_saved_runner`)."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium as gym
import torch
from gymnasium.utils import EzPickle
from gymnasium.vector import SyncVectorEnv, VectorEnv

from rltrain.buffers.observations import layout
from rltrain.envs import physics
from rltrain.envs.checks import unpicklable_layer
from rltrain.envs.pickling import env_classes, loads


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
        """``{"physics": [...]}`` (MuJoCo's envs, as arrays) or ``{"envs": bytes tensor}``
        (pickled), or ``{}`` when they cannot be saved (warned once per run)."""
        if not isinstance(self.envs, SyncVectorEnv):
            return {}
        if all(map(physics.saveable, self.envs.envs)):
            return {"physics": [physics.state(env) for env in self.envs.envs]}
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
        if not isinstance(self.envs, SyncVectorEnv):
            return False
        if self._restore_physics(state.get("physics")):
            return True
        saved = state.get("envs")
        if saved is None:
            return False
        restored = loads(saved.numpy().tobytes(), env_classes(self.envs.envs))
        num_envs = self.envs.num_envs
        if not isinstance(restored, list) or len(restored) != num_envs:
            count = len(restored) if isinstance(restored, list) else "no list of"
            raise ValueError(f"The checkpoint holds {count} environments; this run has "
                             f"{num_envs} (num_envs). Resume with the checkpoint's num_envs.")
        # EzPickle envs (Box2D; MuJoCo's outside rltrain.envs.physics's wrappers) pickle only
        # their constructor arguments: what comes back is a new env, as good as none.
        if any(isinstance(env.unwrapped, EzPickle) for env in restored):
            return False
        for env in self.envs.envs:
            env.close()
        self.envs.envs = restored
        return True

    def _restore_physics(self, saved: Any) -> bool:
        """Put the sub-envs' saved MuJoCo state back, checked first; False when the checkpoint
        holds none or these envs cannot take it."""
        assert isinstance(self.envs, SyncVectorEnv)
        if saved is None or not all(map(physics.restorable, self.envs.envs)):
            return False
        num_envs = self.envs.num_envs
        if not isinstance(saved, list) or len(saved) != num_envs:
            count = len(saved) if isinstance(saved, list) else "no list of"
            raise ValueError(f"The checkpoint holds {count} environment states; this run has "
                             f"{num_envs} (num_envs). Resume with the checkpoint's num_envs.")
        for index, (env, env_state) in enumerate(zip(self.envs.envs, saved, strict=True)):
            physics.restore(env, env_state, index)
        return True

    def _warn_unsaved(self, envs: list[gym.Env[Any, Any]], error: Exception) -> None:
        """At the first save whose environments cannot be pickled (once per runner, so once
        per run), warn that the resume will not be exact, naming the layer that cannot be
        saved; otherwise only the resume would say so, without the cause."""
        if self._warned_unsaved:
            return
        self._warned_unsaved = True
        found = next(filter(None, map(unpicklable_layer, envs)), None)
        layer, error = found if found is not None else (envs[0], error)
        inner = getattr(layer, "env", None)
        where = (f" (wrapping {type(inner.unwrapped).__name__})" if isinstance(inner, gym.Env)
                 else "")
        warnings.warn(
            f"The environments cannot be saved in this run's checkpoints: "
            f"{type(layer).__name__}{where} cannot be pickled ({type(error).__name__}: "
            f"{error}). A resume will reset the environments, so the episodes running at the "
            "checkpoint restart and the resumed run is not an exact continuation. For an exact "
            f"resume, replace {type(layer).__name__} with a picklable equivalent (its functions "
            "defined at module level, not lambdas or local functions).", stacklevel=4)


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



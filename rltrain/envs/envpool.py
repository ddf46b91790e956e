"""envpool (Weng et al. 2022: a C++ thread pool of environments) as a vector-env backend under
the :class:`~rltrain.envs.runner.Runner`'s contract (``env.backend: envpool``).

envpool resets an ended sub-env at its *next* step (ignoring that step's action), where the
runner expects Gymnasium's same-step autoreset: every step a real transition of every
sub-env, the true last observation of an ended episode in ``info["final_obs"]`` and the next
episode's first observation in its place. :class:`EnvpoolVectorEnv` steps the ended sub-envs
once more, at once, to get those first observations: one extra call per step in which any
episode ended.

Atari frames are stacked here, not by envpool: each episode's first observation (after a lost
life too) repeats its frame, as the Gymnasium pipeline's ``FrameStack`` does, where envpool's
own stack keeps the previous life's last frames (which look like the lost life's end).

envpool's state cannot be saved: a resumed run resets its envs, with the runner's warning.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium.spaces import Box
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rltrain.envs.atari import FRAME_STACK_KEY, AtariConfig
from rltrain.envs.errors import EnvError


def envpool_task(env_id: str) -> str:
    """envpool's name for a Gymnasium id (``ALE/Pong-v5`` -> ``Pong-v5``), refused with the
    list's command when envpool has no such task."""
    envpool = _import_envpool()
    task = env_id.removeprefix("ALE/")
    if task not in envpool.list_all_envs():
        raise EnvError(f"envpool has no environment {env_id!r} (as {task!r}); its tasks are "
                       "listed by `python -c 'import envpool; print(envpool.list_all_envs())'`. "
                       "Use env.backend=gymnasium for this env.")
    return task


def envpool_kwargs(atari: AtariConfig | None) -> dict[str, Any]:
    """envpool's settings for the Atari pipeline ``atari`` (none for other envs)."""
    if atari is None:
        return {}
    return {"noop_max": atari.noop_max, "frame_skip": atari.frame_skip,
            "img_height": atari.screen_size, "img_width": atari.screen_size,
            "gray_scale": True, "episodic_life": atari.episodic_life,
            "use_fire_reset": atari.fire_reset, "reward_clip": atari.clip_rewards,
            "stack_num": atari.frame_stack,
            "repeat_action_probability": atari.repeat_action_probability,
            "full_action_space": atari.full_action_space,
            "max_episode_steps": atari.max_episode_frames // atari.frame_skip}


class EnvpoolVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` sub-envs of one envpool task, stepped synchronously, with Gymnasium's
    same-step autoreset (module docstring).

    envpool seeds its sub-envs when the pool is made: a reset with another seed than the
    pool's makes a new pool with it (sub-env ``i`` gets ``seed + i``, envpool's rule).

    Args:
        env_id: A Gymnasium id envpool knows (:func:`envpool_task`).
        num_envs: Sub-envs.
        seed: The pool's seed.
        kwargs: envpool's own settings (``envpool_kwargs`` for Atari; ``max_episode_steps``).
    """

    def __init__(self, env_id: str, *, num_envs: int, seed: int, **kwargs: Any) -> None:
        #: Frames per observation, stacked here (module docstring); envpool gives one.
        self.stack = int(kwargs.get("stack_num", 1))
        self.task, self.kwargs = envpool_task(env_id), {**kwargs, "stack_num": 1} \
            if self.stack > 1 else kwargs
        self.num_envs = num_envs
        self.pool = self._make_pool(seed)
        with _float32_bounds():
            self.single_observation_space = _stacked(self.pool.single_observation_space,
                                                     self.stack)
            self.single_action_space = self.pool.single_action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        # envpool rebuilds its spaces at each call: float ones warn of float64 bounds, each time
        floats = np.dtype(self.single_observation_space.dtype).kind == "f"
        self._quiet = _float32_bounds if floats else contextlib.nullcontext
        self.frames: np.ndarray | None = None  # the stacked observations (stack > 1)
        if self.stack > 1:
            self.metadata[FRAME_STACK_KEY] = self.stack

    def _make_pool(self, seed: int) -> Any:
        self.pool_seed = seed
        with _float32_bounds():
            return _import_envpool().make(self.task, env_type="gymnasium",
                                          num_envs=self.num_envs, seed=seed, **self.kwargs)

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if isinstance(seed, list):
            raise ValueError("envpool seeds sub-env i with seed + i: reset it with one seed.")
        if seed is not None and seed != self.pool_seed:
            self.pool.close()
            self.pool = self._make_pool(seed)
        with self._quiet():
            observations, _ = self.pool.reset()
        if self.stack > 1:
            self.frames = observations = np.repeat(observations, self.stack, axis=1)
        return observations, {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        with self._quiet():
            observations, rewards, terminated, truncated, info = self.pool.step(actions)
        observations, rewards, terminated, truncated = _in_env_order(
            info, observations, rewards, terminated, truncated)
        if self.stack > 1:
            assert self.frames is not None, "step() before reset()"
            observations = np.concatenate([self.frames[:, 1:], observations], axis=1)
        ended = terminated | truncated
        infos: dict[str, Any] = {}
        if ended.any():
            ids = np.flatnonzero(ended)
            # envpool's reset step: the action is ignored, the first observation returned
            with self._quiet():
                first, *_, first_info = self.pool.step(np.asarray(actions)[ids], env_id=ids)
            order = np.argsort(first_info["env_id"])
            final = np.empty(self.num_envs, dtype=object)
            for i in ids:
                final[i] = observations[i].copy()  # whatever envpool does with its arrays
            if self.stack == 1:  # envpool's own array; a stacked one is new at each step
                observations = observations.copy()
            observations[ids] = first[order]  # a stacked one: the first frame fills each
            infos = {"final_obs": final, "_final_obs": ended}
        if self.stack > 1:
            self.frames = observations
        return (observations, rewards.astype(np.float64), terminated.astype(bool),
                truncated.astype(bool), infos)

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


def _stacked(space: Any, stack: int) -> Any:
    """envpool's one-frame ``Box`` (``[1, H, W]``) as ``stack`` frames (``[stack, H, W]``)."""
    if stack == 1:
        return space
    return Box(np.repeat(space.low, stack, axis=0), np.repeat(space.high, stack, axis=0),
               dtype=space.dtype)


@contextlib.contextmanager
def _float32_bounds() -> Iterator[None]:
    """Without Gymnasium's warning that envpool's float64 bounds of float32 spaces are cast."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting")
        yield


def _in_env_order(info: dict[str, Any], *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """envpool's arrays sorted by ``info["env_id"]`` (a sync pool returns them in order; this
    holds that promise rather than trusting it)."""
    ids = np.asarray(info["env_id"])
    if (ids == np.arange(len(ids))).all():
        return arrays
    order = np.argsort(ids)
    return tuple(array[order] for array in arrays)


def _import_envpool() -> Any:
    try:
        return importlib.import_module("envpool")
    except ImportError as error:
        raise EnvError("env.backend=envpool needs envpool: pip install 'rltrain[envpool]' "
                       f"({error}).") from error


def check_envpool_env(env_id: str | None, wrappers: tuple[Any, ...], target: str | None,
                      atari: AtariConfig | None = None) -> None:
    """Refuse what envpool cannot run, naming it: an env given by import path, Python
    wrappers (envpool's envs run in C++; the Atari pipeline is envpool's own), or an Atari
    pipeline that restarts a lost life without envpool's no-ops."""
    if target is not None or env_id is None:
        raise ValueError("env.backend=envpool runs envpool's own tasks by env.id; an env given "
                         "by _target_ needs env.backend=gymnasium.")
    envpool_task(env_id)
    if wrappers:
        names = ", ".join(getattr(w, "path", type(w).__name__) for w in wrappers)
        raise ValueError(f"env.backend=envpool cannot apply Python wrappers ({names}): its envs "
                         "run in C++. Drop env.wrappers (and env.max_episode_steps: envpool "
                         "applies its own limit, env.kwargs.max_episode_steps) or use "
                         "env.backend=gymnasium.")
    if atari is not None and atari.life_noops is False:
        raise ValueError("env.atari.life_noops=false: envpool goes on after a lost life only "
                         "after random no-ops. Leave life_noops unset, or train on Gymnasium's "
                         "envs (env.backend=gymnasium).")



def backend_lines(env: object) -> list[str]:
    """The run's opening lines on its env backend: with envpool's, that checkpoints cannot
    hold the envs (none for Gymnasium's, which they hold)."""
    if getattr(env, "backend", None) != "envpool":
        return []
    return ["env backend: envpool (its envs cannot be saved in checkpoints: a resume restarts "
            "the episodes running at the checkpoint; env.backend=gymnasium resumes exactly)"]

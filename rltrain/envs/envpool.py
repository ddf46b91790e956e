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

With ``env.atari.life_noops=false`` rltrain also starts each life and game itself, as SB3's
``AtariWrapper`` does (:class:`SB3Starts`), where envpool would restart a lost life after random
no-op frames: envpool's episodic life and FIRE reset are turned off, a lost life (from
``info["lives"]``) ends the learner's episode, and the game goes on after one no-op step, then
FIRE and action 2 in games that wait for FIRE (after a new game's no-ops too).

envpool's state cannot be saved: a resumed run resets its envs, with the runner's warning.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rltrain.envs.atari import FRAME_STACK_KEY, AtariConfig, needs_fire
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
    """envpool's settings for the Atari pipeline ``atari`` (none for other envs); its episodic
    life and FIRE reset are off where rltrain starts lives itself (:func:`sb3_starts`)."""
    if atari is None:
        return {}
    own = _starts_lives(atari)
    return {"noop_max": atari.noop_max, "frame_skip": atari.frame_skip,
            "img_height": atari.screen_size, "img_width": atari.screen_size,
            "gray_scale": True, "episodic_life": atari.episodic_life and not own,
            "use_fire_reset": atari.fire_reset and not own, "reward_clip": atari.clip_rewards,
            "stack_num": atari.frame_stack,
            "repeat_action_probability": atari.repeat_action_probability,
            "full_action_space": atari.full_action_space,
            "max_episode_steps": atari.max_episode_frames // atari.frame_skip}


@dataclass(frozen=True)
class SB3Starts:
    """Games and lives on envpool started by rltrain as SB3's ``AtariWrapper`` starts them
    (module docstring): a lost life ends the learner's episode and the game goes on after one
    no-op step; then, with ``fire``, FIRE and action 2, as after a new game's no-ops.

    Attributes:
        fire: Whether FIRE and action 2 follow each start (the game waits for FIRE).
    """

    fire: bool


def sb3_starts(env_id: str, atari: AtariConfig | None) -> SB3Starts | None:
    """How rltrain starts games and lives on envpool for ``atari``: itself, SB3's way, with
    ``life_noops=false`` and ``episodic_life`` (None: envpool's own way). Knowing whether the
    game waits for FIRE needs ale-py."""
    if atari is None or not _starts_lives(atari):
        return None
    if not atari.fire_reset:
        return SB3Starts(fire=False)
    try:
        import ale_py
    except ImportError as error:
        raise EnvError("env.atari.life_noops=false on envpool: rltrain restarts lives itself and "
                       "needs ale-py to know whether the game waits for FIRE: pip install "
                       f"'rltrain[atari]' ({error}).") from error
    gym.register_envs(ale_py)
    game = gym.make("ALE/" + envpool_task(env_id), full_action_space=atari.full_action_space)
    try:
        return SB3Starts(fire=needs_fire(game))
    finally:
        game.close()


def _starts_lives(atari: AtariConfig) -> bool:
    return atari.episodic_life and atari.life_noops is False


class EnvpoolVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` sub-envs of one envpool task, stepped synchronously, with Gymnasium's
    same-step autoreset (module docstring).

    envpool seeds its sub-envs when the pool is made: a reset with another seed than the
    pool's makes a new pool with it (sub-env ``i`` gets ``seed + i``, envpool's rule).

    Args:
        env_id: A Gymnasium id envpool knows (:func:`envpool_task`).
        num_envs: Sub-envs.
        seed: The pool's seed.
        starts: Games and lives started by rltrain, SB3's way (:func:`sb3_starts`); None:
            envpool's. Default None.
        kwargs: envpool's own settings (``envpool_kwargs`` for Atari; ``max_episode_steps``).
    """

    def __init__(self, env_id: str, *, num_envs: int, seed: int,
                 starts: SB3Starts | None = None, **kwargs: Any) -> None:
        self.starts = starts
        self.lives = np.zeros(num_envs, dtype=np.int64)  # each sub-env's lives (starts only)
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
            observations, info = self.pool.reset()
        if self.starts is not None:
            (lives,) = _in_env_order(info, np.asarray(info["lives"]))
            self.lives = lives.copy()
            if self.starts.fire:
                observations = self._started(np.arange(self.num_envs), first_action=1)
        if self.stack > 1:
            self.frames = observations = np.repeat(observations, self.stack, axis=1)
        return observations, {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        with self._quiet():
            observations, rewards, terminated, truncated, info = self.pool.step(actions)
        lives = np.asarray(info.get("lives", np.zeros(self.num_envs, dtype=np.int64)))
        observations, rewards, terminated, truncated, lives = _in_env_order(
            info, observations, rewards, terminated, truncated, lives)
        if self.starts is not None:  # a lost life ends the learner's episode
            terminated = terminated | ((0 < lives) & (lives < self.lives))
            self.lives = lives.copy()
        if self.stack > 1:
            assert self.frames is not None, "step() before reset()"
            observations = np.concatenate([self.frames[:, 1:], observations], axis=1)
        ended = terminated | truncated
        infos: dict[str, Any] = {}
        if ended.any():
            ids = np.flatnonzero(ended)
            if self.starts is None:
                # envpool's reset step: the action is ignored, the first observation returned
                first = self._sub_step(ids, np.asarray(actions)[ids])[0]
            else:  # that reset step after a game over, the no-op step after a lost life
                first = self._started(ids, first_action=0)
            final = np.empty(self.num_envs, dtype=object)
            for i in ids:
                final[i] = observations[i].copy()  # whatever envpool does with its arrays
            if self.stack == 1:  # envpool's own array; a stacked one is new at each step
                observations = observations.copy()
            observations[ids] = first  # a stacked one: the first frame fills each
            infos = {"final_obs": final, "_final_obs": ended}
        if self.stack > 1:
            self.frames = observations
        return (observations, rewards.astype(np.float64), terminated.astype(bool),
                truncated.astype(bool), infos)

    def _sub_step(self, ids: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray]:
        """Step sub-envs ``ids`` (ascending) alone: their observations, whether each ended and
        their lives (0 where envpool gives none), in the order of ``ids``."""
        with self._quiet():
            observations, _, terminated, truncated, info = self.pool.step(actions, env_id=ids)
        order = np.argsort(info["env_id"])
        lives = np.asarray(info.get("lives", np.zeros(len(ids), dtype=np.int64)))
        return observations[order], (terminated | truncated)[order], lives[order]

    def _started(self, ids: np.ndarray, first_action: int) -> np.ndarray:
        """Sub-envs ``ids`` started SB3's way (:class:`SB3Starts`), from ``first_action`` (0:
        the no-op step after a lost life, or envpool's reset step after a game over; 1: FIRE,
        after a new game's no-ops): their first observations."""
        assert self.starts is not None
        sequence = [0, 1, 2] if self.starts.fire else [0]
        sequence = sequence[sequence.index(first_action):]
        first = self._start_step(ids, sequence[0])
        for action in sequence[1:]:
            first = self._start_step(ids, action)
        return first

    def _start_step(self, ids: np.ndarray, action: int) -> np.ndarray:
        """One step of a start (:meth:`_started`) for sub-envs ``ids``: their observations. A
        game that ends on the way is reset (envpool's reset step), and its start goes on from
        there, as SB3's ``FireResetEnv`` goes on."""
        observations, ended, lives = self._sub_step(ids, np.full(len(ids), action))
        if ended.any():
            again, _, lives[ended] = self._sub_step(ids[ended], np.zeros(ended.sum(), np.int64))
            observations[ended] = again
        self.lives[ids] = lives
        return observations

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
    wrappers (envpool's envs run in C++; the Atari pipeline is envpool's own)."""
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



def backend_lines(env: object) -> list[str]:
    """The run's opening lines on its env backend: with envpool's, that checkpoints cannot
    hold the envs (none for Gymnasium's, which they hold)."""
    if getattr(env, "backend", None) != "envpool":
        return []
    return ["env backend: envpool (its envs cannot be saved in checkpoints: a resume restarts "
            "the episodes running at the checkpoint; env.backend=gymnasium resumes exactly)"]

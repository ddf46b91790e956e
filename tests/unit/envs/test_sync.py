"""``LeanSyncVectorEnv`` against Gymnasium's own ``SyncVectorEnv``: the same observations,
rewards, flags and infos (``final_obs``, ``final_info``, the sub-envs' own keys and their
masks), step for step, through terminations, truncations and infos, and Gymnasium's path for
the spaces it does not take."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rltrain.envs.sync import LeanSyncVectorEnv


class Talkative(gym.Wrapper[Any, Any, Any, Any]):
    """Adds an info key on some steps (an int and an array), as real envs do."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if int(np.asarray(obs).sum() * 1000) % 3 == 0:
            info = {**info, "count": 3, "vector": np.ones(2)}
        return obs, reward, terminated, truncated, info


def pair(make: Any, num_envs: int) -> tuple[SyncVectorEnv, LeanSyncVectorEnv]:
    made = [[make for _ in range(num_envs)] for _ in range(2)]
    return (SyncVectorEnv(made[0], autoreset_mode=AutoresetMode.SAME_STEP),
            LeanSyncVectorEnv(made[1], autoreset_mode=AutoresetMode.SAME_STEP))


def same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for key in a:
            same(a[key], b[key])
    elif isinstance(a, np.ndarray) and a.dtype == object:
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize(("env_id", "num_envs"), [
    ("CartPole-v1", 1), ("CartPole-v1", 3), ("Pendulum-v1", 2), ("MountainCar-v0", 2)])
def test_every_step_equals_gymnasiums(env_id: str, num_envs: int) -> None:
    def make() -> gym.Env[Any, Any]:
        return Talkative(gym.make(env_id, max_episode_steps=30))

    theirs, ours = pair(make, num_envs)
    assert ours.lean
    same(theirs.reset(seed=4), ours.reset(seed=4))
    theirs.action_space.seed(5)
    ended = 0
    for _ in range(200):
        actions = theirs.action_space.sample()
        expected, got = theirs.step(actions), ours.step(actions)
        for a, b in zip(expected, got, strict=True):
            same(a, b)
        ended += int(np.logical_or(expected[2], expected[3]).sum())
        assert got[0] is not ours._observations  # a copy: the next step does not change it
    assert ended >= 6  # episodes ended (by the 30-step limit at least) inside the steps


def test_a_dict_observation_takes_gymnasiums_own_step() -> None:
    def make() -> gym.Env[Any, Any]:
        return gym.wrappers.FilterObservation(  # a Dict space
            gym.wrappers.TransformObservation(gym.make("CartPole-v1"), lambda o: {"x": o},
                                              gym.spaces.Dict({"x": gym.make(
                                                  "CartPole-v1").observation_space})), ["x"])

    theirs, ours = pair(make, 2)
    assert not ours.lean
    same(theirs.reset(seed=1), ours.reset(seed=1))
    for action in ([0, 1], [1, 1]):
        for a, b in zip(theirs.step(np.array(action)), ours.step(np.array(action)), strict=True):
            same(a, b)


class Float64Rows(gym.ObservationWrapper[Any, Any, Any]):
    """Returns float64 observations for a float32 space: the batch casts them, as
    Gymnasium's ``np.stack`` does."""

    def observation(self, observation: Any) -> Any:
        return np.asarray(observation, dtype=np.float64) + 1e-9


def test_rows_of_another_dtype_are_cast_as_gymnasium_casts_them() -> None:
    def make() -> gym.Env[Any, Any]:
        return Float64Rows(gym.make("CartPole-v1"))

    theirs, ours = pair(make, 2)
    same(theirs.reset(seed=1), ours.reset(seed=1))
    for _ in range(40):
        actions = theirs.action_space.sample()
        expected, got = theirs.step(actions), ours.step(actions)
        assert got[0].dtype == np.float32
        for a, b in zip(expected, got, strict=True):
            same(a, b)

"""Environment creation: ids, EnvSpec kwargs and wrappers, callables, vectorization."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rltrain.envs.make import EnvSpec, check_env_id, env_factory, env_name, make_vector_env


def times_ten(reward: float) -> float:
    return 10 * reward


def plus_one(reward: float) -> float:
    return reward + 1


SCALE_THEN_SHIFT = (functools.partial(gym.wrappers.TransformReward, func=times_ten),
                    functools.partial(gym.wrappers.TransformReward, func=plus_one))


def make_short_cartpole() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=3)


def test_unknown_env_id_suggests_the_closest_id() -> None:
    with pytest.raises(ValueError, match=r"'CartPol-v1'.*Did you mean 'CartPole-v1'"):
        check_env_id("CartPol-v1")


def test_unknown_env_id_is_rejected_by_envspec_and_make_vector_env() -> None:
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        EnvSpec("CartPol-v1")
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        make_vector_env("CartPol-v1", num_envs=1, seed=0)


def test_unknown_env_id_with_no_close_match_has_no_suggestion() -> None:
    with pytest.raises(ValueError, match="Unknown Gymnasium environment id") as info:
        check_env_id("zzzzzzzzzzzzzzzzzzzzzzzz")
    assert "Did you mean" not in str(info.value)


def test_envspec_kwargs_are_passed_to_make() -> None:
    env = EnvSpec("CartPole-v1", kwargs={"max_episode_steps": 7})()
    try:
        assert env.spec is not None and env.spec.max_episode_steps == 7
        env.reset(seed=0)
        flags = []
        for _ in range(7):
            _, _, terminated, truncated, _ = env.step(0 if len(flags) % 2 else 1)
            flags.append((terminated, truncated))
        assert flags == [(False, False)] * 6 + [(False, True)]
    finally:
        env.close()


def test_envspec_wrappers_apply_in_order() -> None:
    env = EnvSpec("CartPole-v1", wrappers=SCALE_THEN_SHIFT)()
    try:
        env.reset(seed=0)
        _, reward, *_ = env.step(0)
        assert reward == 11.0  # (1 * 10) + 1, not (1 + 1) * 10
        assert isinstance(env, gym.wrappers.TransformReward)
    finally:
        env.close()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_envspec_kwargs_and_wrappers_apply_in_vector_envs(vectorization: str) -> None:
    spec = EnvSpec("CartPole-v1", kwargs={"max_episode_steps": 2}, wrappers=SCALE_THEN_SHIFT)
    envs = make_vector_env(spec, num_envs=2, seed=0,
                           vectorization=vectorization)  # type: ignore[arg-type]
    try:
        envs.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        _, rewards, _, truncated, _ = envs.step(actions)
        assert rewards.tolist() == [11.0, 11.0]
        assert truncated.tolist() == [False, False]
        _, _, _, truncated, _ = envs.step(actions)
        assert truncated.tolist() == [True, True]
    finally:
        envs.close()


def test_a_callable_env_works() -> None:
    envs = make_vector_env(make_short_cartpole, num_envs=2, seed=0)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4)
        for _ in range(3):
            _, _, _, truncated, _ = envs.step(np.zeros(2, dtype=np.int64))
        assert truncated.tolist() == [True, True]  # the callable's max_episode_steps=3
    finally:
        envs.close()
    assert env_name(make_short_cartpole) == "make_short_cartpole"


def test_env_factory_accepts_ids_specs_and_callables_and_rejects_others() -> None:
    assert isinstance(env_factory("CartPole-v1"), EnvSpec)
    spec = EnvSpec("CartPole-v1")
    assert env_factory(spec) is spec
    assert env_factory(make_short_cartpole) is make_short_cartpole
    with pytest.raises(TypeError, match="int"):
        env_factory(42)  # type: ignore[arg-type]
    assert env_name("CartPole-v1") == "CartPole-v1"
    assert env_name(spec) == "CartPole-v1"


def test_sync_and_async_give_identical_observations_for_the_same_seed() -> None:
    sync = make_vector_env("CartPole-v1", num_envs=3, seed=5, vectorization="sync")
    async_ = make_vector_env("CartPole-v1", num_envs=3, seed=5, vectorization="async")
    try:
        assert isinstance(sync, SyncVectorEnv) and isinstance(async_, AsyncVectorEnv)
        obs_sync, _ = sync.reset(seed=5)
        obs_async, _ = async_.reset(seed=5)
        np.testing.assert_array_equal(obs_sync, obs_async)
        assert len({tuple(row) for row in obs_sync.tolist()}) == 3  # seed + i differ
        single = gym.make("CartPole-v1")
        np.testing.assert_array_equal(obs_sync[1], single.reset(seed=6)[0])
        single.close()
        for _ in range(5):
            actions = sync.action_space.sample()
            async_.action_space.sample()  # keep both action spaces in step
            a, *_ = sync.step(actions)
            b, *_ = async_.step(actions)
            np.testing.assert_array_equal(a, b)
        # both action spaces were seeded alike
        np.testing.assert_array_equal(sync.action_space.sample(), async_.action_space.sample())
    finally:
        sync.close()
        async_.close()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_vector_envs_autoreset_in_the_same_step(vectorization: str) -> None:
    envs = make_vector_env("CartPole-v1", num_envs=1, seed=0,
                           vectorization=vectorization)  # type: ignore[arg-type]
    try:
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    finally:
        envs.close()


@pytest.mark.parametrize("num_envs", [0, -1])
def test_num_envs_below_one_raises(num_envs: int) -> None:
    with pytest.raises(ValueError, match=rf"num_envs must be >= 1; got {num_envs}"):
        make_vector_env("CartPole-v1", num_envs=num_envs, seed=0)


def test_unknown_vectorization_raises() -> None:
    with pytest.raises(ValueError, match="'threads'"):
        make_vector_env("CartPole-v1", num_envs=1, seed=0,
                        vectorization="threads")  # type: ignore[arg-type]


def test_action_space_is_seeded() -> None:
    a = make_vector_env("CartPole-v1", num_envs=8, seed=1)
    b = make_vector_env("CartPole-v1", num_envs=8, seed=1)
    c = make_vector_env("CartPole-v1", num_envs=8, seed=2)
    try:
        sa = [a.action_space.sample().tolist() for _ in range(5)]
        assert sa == [b.action_space.sample().tolist() for _ in range(5)]
        assert sa != [c.action_space.sample().tolist() for _ in range(5)]
    finally:
        for e in (a, b, c):
            e.close()

"""The sub-environments of a vector env in a checkpoint (rltrain/envs/persistence.py): saved and
put back so that the restored envs step exactly as the saved ones would have; refused when the
count differs; left out (to be reset) where they cannot be saved."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from rltrain.envs.persistence import SavedEnvs, check_saved_runner, saved_spaces


def cartpoles(n: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])


def test_restored_envs_step_as_the_saved_ones_would_have() -> None:
    envs = cartpoles(2)
    envs.reset(seed=3)
    for _ in range(5):
        envs.step(np.array([0, 1]))
    state = SavedEnvs(envs).state()
    assert set(state) == {"envs"}
    expected = [envs.step(np.array([1, 0]))[0] for _ in range(4)]
    other = cartpoles(2)
    other.reset(seed=99)
    assert SavedEnvs(other).restore(state)
    assert all(np.array_equal(other.step(np.array([1, 0]))[0], e) for e in expected)


def test_another_count_of_envs_is_refused_by_name() -> None:
    envs = cartpoles(2)
    envs.reset(seed=0)
    state = SavedEnvs(envs).state()
    with pytest.raises(ValueError, match=r"holds 2 environments; this run has 3 \(num_envs\)"):
        SavedEnvs(cartpoles(3)).restore(state)


def test_an_async_vector_env_rltrain_did_not_make_is_not_saved_and_says_so() -> None:
    """Gymnasium's own AsyncVectorEnv of plain envs: its workers' envs cannot answer the
    checkpoint's calls (asking would end the workers), so it is not saved, with a warning."""
    envs = AsyncVectorEnv([lambda: gym.make("CartPole-v1")])
    try:
        with pytest.warns(UserWarning, match="not made by rltrain.envs.make.make_vector_env"):
            assert SavedEnvs(envs).state() == {}
        assert not SavedEnvs(envs).restore({"envs": None})
        envs.reset(seed=0)  # the workers are alive
        envs.step(np.zeros(1, dtype=np.int64))
    finally:
        envs.close()


def test_a_runner_state_of_other_spaces_is_refused_before_anything_loads() -> None:
    envs = cartpoles(1)
    spaces = saved_spaces(envs.single_observation_space, envs.single_action_space, 1)
    with pytest.raises(ValueError, match="saved on an environment with spaces"):
        check_saved_runner({"spaces": {**spaces, "num_envs": "4"}},
                           envs.single_observation_space, envs.single_action_space, 1)


def test_what_crosses_an_async_workers_pipe_holds_no_tensor() -> None:
    """A tensor sent through a worker's pipe is shared by file descriptor, which hung a forked
    worker of ppo_atari at its first checkpoint: states cross as NumPy arrays."""
    from rltrain.envs.make import make_vector_env

    def tensors(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return 1
        if isinstance(value, dict):
            return sum(map(tensors, value.values()))
        return sum(map(tensors, value)) if isinstance(value, list | tuple) else 0

    envs = make_vector_env("CartPole-v1", num_envs=2, vectorization="async", seed=0)
    try:
        envs.reset(seed=0)
        sent = envs.call("rltrain_saved_state")
        assert tensors(list(sent)) == 0 and all("pickled_envs" in s for s in sent)
        state = SavedEnvs(envs).state()
        assert all(isinstance(t, torch.Tensor) for t in state["pickled_envs"])
        assert SavedEnvs(envs).restore(state)
    finally:
        envs.close()

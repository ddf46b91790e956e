"""The Runner over vector envs from make_vector_env (Gymnasium 1.x SAME_STEP autoreset)."""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ShapeShifter

from rltrain.agents.base import Policy
from rltrain.envs.errors import SubEnvError
from rltrain.envs.make import EnvSpec, make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import PolicyState, PolicyStep, Progress

CPU = torch.device("cpu")


class CountingEnv(gym.Env[np.ndarray, int]):
    """A known-answer env.

    The episode length is ``2 + seed % 3``, fixed at the first seeded reset (or given). Step ``k``
    of an episode (1-based) gives reward ``k`` and observation ``[k, episode, length]``; the reset
    observation is ``[0, episode, length]``. An episode of even length terminates, an episode of
    odd length is truncated. So an episode of length ``L`` returns ``L (L + 1) / 2``.
    """

    def __init__(self, length: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length = length
        self.t = 0
        self.episode = -1

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode, self.length], dtype=np.float32)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.length is None:
            assert seed is not None, "the first reset must be seeded"
            self.length = 2 + seed % 3
        self.t = 0
        self.episode += 1
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.length is not None
        self.t += 1
        done = self.t >= self.length
        terminated = done and self.length % 2 == 0
        truncated = done and not terminated
        return self._obs(), float(self.t), terminated, truncated, {}


def make_runner(env: Any, num_envs: int, *, seed: int = 0, vectorization: str = "sync",
                progress: Progress | None = None) -> Runner:
    envs = make_vector_env(env, num_envs=num_envs, seed=seed,
                           vectorization=vectorization)  # type: ignore[arg-type]
    runner = Runner(envs, device=CPU, progress=progress if progress is not None else Progress())
    runner.reset(seed=seed)
    return runner


def zeros(num_envs: int) -> np.ndarray:
    return np.zeros(num_envs, dtype=np.int64)


def test_reset_gives_sub_env_i_seed_plus_i() -> None:
    runner = make_runner(CountingEnv, 3, seed=4)  # lengths 2 + (4, 5, 6) % 3 = 3, 4, 2
    try:
        np.testing.assert_array_equal(
            runner.observations, [[0, 0, 3], [0, 0, 4], [0, 0, 2]])
        assert runner.episode_returns.tolist() == [0.0, 0.0, 0.0]
        assert runner.episode_lengths.tolist() == [0, 0, 0]
    finally:
        runner.envs.close()


def test_after_episode_end_observations_are_new_episodes_first_and_counters_restart() -> None:
    runner = make_runner(CountingEnv, 1, seed=1)  # length 3: truncated after 3 steps
    try:
        for k in (1, 2):
            transitions, episodes = runner.step(zeros(1))
            assert episodes == []
            np.testing.assert_array_equal(runner.observations, [[k, 0, 3]])
            assert runner.episode_returns.tolist() == [sum(range(1, k + 1))]
            assert runner.episode_lengths.tolist() == [k]

        transitions, episodes = runner.step(zeros(1))
        assert len(episodes) == 1
        # The transition is the real last one of episode 0 ...
        np.testing.assert_array_equal(transitions.observations, [[2, 0, 3]])
        np.testing.assert_array_equal(transitions.next_observations, [[3, 0, 3]])
        assert transitions.rewards.tolist() == [3.0]
        # ... while the runner already holds episode 1's first observation.
        np.testing.assert_array_equal(runner.observations, [[0, 1, 3]])
        assert runner.episode_returns.tolist() == [0.0]
        assert runner.episode_lengths.tolist() == [0]

        transitions, episodes = runner.step(zeros(1))
        assert episodes == []
        np.testing.assert_array_equal(transitions.observations, [[0, 1, 3]])
        np.testing.assert_array_equal(transitions.next_observations, [[1, 1, 3]])
        assert runner.episode_returns.tolist() == [1.0]
        assert runner.episode_lengths.tolist() == [1]
    finally:
        runner.envs.close()


def test_episode_end_in_one_sub_env_leaves_the_others_running() -> None:
    runner = make_runner(CountingEnv, 2, seed=0)  # lengths 2 and 3
    try:
        runner.step(zeros(2))
        transitions, episodes = runner.step(zeros(2))
        assert [e.env_index for e in episodes] == [0]
        np.testing.assert_array_equal(runner.observations, [[0, 1, 2], [2, 0, 3]])
        np.testing.assert_array_equal(transitions.next_observations, [[2, 0, 2], [2, 0, 3]])
        assert runner.episode_returns.tolist() == [0.0, 3.0]
        assert runner.episode_lengths.tolist() == [0, 2]
    finally:
        runner.envs.close()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_truncated_episode_bootstraps_from_final_observation(vectorization: str) -> None:
    seed, num_envs, action = 11, 2, 0
    runner = make_runner(EnvSpec("CartPole-v1", kwargs={"max_episode_steps": 5}), num_envs,
                         seed=seed, vectorization=vectorization)
    references = [gym.make("CartPole-v1", max_episode_steps=5) for _ in range(num_envs)]
    try:
        ref_obs = [ref.reset(seed=seed + i)[0] for i, ref in enumerate(references)]
        np.testing.assert_array_equal(runner.observations, np.stack(ref_obs))
        for step in range(1, 6):
            transitions, episodes = runner.step(np.full(num_envs, action, dtype=np.int64))
            for i, ref in enumerate(references):
                obs, reward, terminated, truncated, _ = ref.step(action)
                np.testing.assert_array_equal(transitions.observations[i], ref_obs[i])
                np.testing.assert_array_equal(transitions.next_observations[i], obs)
                assert transitions.rewards[i] == reward
                assert bool(transitions.terminated[i]) is terminated is False
                assert bool(transitions.truncated[i]) is truncated is (step == 5)
                ref_obs[i] = obs
        # Step 5 truncated every sub-env: each row of next_observations is the real final
        # observation, and the runner moved on to the autoreset episode's first observation.
        assert [(e.env_index, e.terminated, e.episode_length) for e in episodes] == [
            (0, False, 5), (1, False, 5)]
        for i, ref in enumerate(references):
            first_obs, _ = ref.reset()  # the autoreset reset is unseeded too
            np.testing.assert_array_equal(runner.observations[i], first_obs)
            assert not np.array_equal(transitions.next_observations[i], first_obs)
    finally:
        runner.envs.close()
        for ref in references:
            ref.close()


def test_terminated_episode_keeps_terminated_apart_from_truncated() -> None:
    runner = make_runner(CountingEnv, 2, seed=0)  # length 2 terminates, length 3 truncates
    try:
        runner.step(zeros(2))
        t2, _ = runner.step(zeros(2))
        t3, _ = runner.step(zeros(2))
        assert t2.terminated.tolist() == [True, False]
        assert t2.truncated.tolist() == [False, False]
        assert t3.terminated.tolist() == [False, False]
        assert t3.truncated.tolist() == [False, True]
        # a terminated row also keeps its real final observation
        np.testing.assert_array_equal(t2.next_observations[0], [2, 0, 2])
    finally:
        runner.envs.close()


def test_episode_end_events_and_progress_with_three_envs() -> None:
    progress = Progress()
    runner = make_runner(CountingEnv, 3, seed=0, progress=progress)  # lengths 2, 3, 4
    # (env_index, return, length, terminated) of the episodes ending at each vector step
    e0, e1, e2 = (0, 3.0, 2, True), (1, 6.0, 3, False), (2, 10.0, 4, True)
    expected = {2: [e0], 3: [e1], 4: [e0, e2], 6: [e0, e1], 8: [e0, e2], 9: [e1], 10: [e0],
                12: [e0, e1, e2]}
    try:
        total = 0
        for step in range(1, 13):
            transitions, episodes = runner.step(zeros(3))
            got = [(e.env_index, e.episode_return, e.episode_length, e.terminated)
                   for e in episodes]
            assert got == expected.get(step, []), f"vector step {step}"
            assert all(e.env_steps == 3 * step for e in episodes)
            done = transitions.terminated | transitions.truncated
            assert np.flatnonzero(done).tolist() == [e[0] for e in got]
            total += len(got)
            assert progress.vector_steps == step
            assert progress.env_steps == 3 * step
            assert progress.episodes == total
        assert total == 13
    finally:
        runner.envs.close()


def test_progress_continues_from_existing_counters() -> None:
    progress = Progress(env_steps=100, vector_steps=50, gradient_steps=7, episodes=4)
    runner = make_runner(CountingEnv, 2, seed=0, progress=progress)  # lengths 2, 3
    try:
        runner.step(zeros(2))
        _, episodes = runner.step(zeros(2))
        assert episodes[0].env_steps == 104
        assert progress == Progress(env_steps=104, vector_steps=52, gradient_steps=7,
                                    episodes=5)
    finally:
        runner.envs.close()


def test_reset_mid_episode_clears_episode_statistics() -> None:
    runner = make_runner(CountingEnv, 1, seed=2)  # length 4
    try:
        runner.step(zeros(1))
        runner.step(zeros(1))
        assert runner.episode_returns.tolist() == [3.0]
        runner.reset(seed=2)
        assert runner.episode_returns.tolist() == [0.0]
        assert runner.episode_lengths.tolist() == [0]
        np.testing.assert_array_equal(runner.observations, [[0, 1, 4]])
        _, episodes = runner.step(zeros(1))
        assert runner.episode_returns.tolist() == [1.0]
        assert episodes == []
    finally:
        runner.envs.close()


def test_random_actions_are_reproducible_from_the_seed() -> None:
    a = make_vector_env("CartPole-v1", num_envs=4, seed=3)
    b = make_vector_env("CartPole-v1", num_envs=4, seed=3)
    c = make_vector_env("CartPole-v1", num_envs=4, seed=4)
    try:
        ra, rb, rc = (Runner(e, device=CPU, progress=Progress()) for e in (a, b, c))
        sa = np.stack([ra.random_actions() for _ in range(20)])
        sb = np.stack([rb.random_actions() for _ in range(20)])
        sc = np.stack([rc.random_actions() for _ in range(20)])
        assert sa.shape == (20, 4)
        np.testing.assert_array_equal(sa, sb)
        assert not np.array_equal(sa, sc)
        assert set(np.unique(sa).tolist()) <= {0, 1}
    finally:
        for e in (a, b, c):
            e.close()


class StepCountPolicy(Policy):
    """A recurrent policy whose state counts the steps taken in each sub-env's episode."""

    def act(self, obs: torch.Tensor, state: PolicyState, deterministic: bool) -> PolicyStep:
        assert isinstance(state, torch.Tensor)
        return PolicyStep(torch.zeros(obs.shape[0], dtype=torch.int64), state + 1, {})

    def initial_state(self, num_envs: int) -> PolicyState:
        return torch.zeros(num_envs, dtype=torch.int64)

    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        assert isinstance(state, torch.Tensor)
        return torch.where(done, torch.zeros_like(state), state)


def test_recurrent_state_resets_only_where_an_episode_ended() -> None:
    policy = StepCountPolicy()
    envs = make_vector_env(CountingEnv, num_envs=2, seed=0)  # lengths 2, 3
    runner = Runner(envs, device=CPU, progress=Progress())
    try:
        runner.reset(seed=0, policy=policy)
        assert torch.equal(runner.policy_state, torch.tensor([0, 0]))  # type: ignore[arg-type]
        states = []
        for _ in range(4):
            runner.step(runner.act(policy), policy)
            assert isinstance(runner.policy_state, torch.Tensor)
            states.append(runner.policy_state.tolist())
        assert states == [[1, 1], [0, 2], [1, 0], [0, 1]]
    finally:
        envs.close()


class PoisonEnv(gym.Env[np.ndarray, int]):
    """``size`` floats of ``dtype``, all zero except ``obs[index] = value`` at the second step
    of sub-env ``bad`` (its seed), or the reward ``value`` there with ``in_reward``."""

    def __init__(self, size: int, dtype: type, index: int, value: float, bad: int,
                 in_reward: bool = False) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), dtype)
        self.action_space = gym.spaces.Discrete(2)
        self.size, self.dtype, self.index, self.value = size, dtype, index, value
        self.bad, self.in_reward, self.steps, self.seed = bad, in_reward, 0, -1

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.seed = seed if seed is not None else self.seed
        return np.zeros(self.size, self.dtype), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        obs, reward = np.zeros(self.size, self.dtype), 0.0
        if self.steps == 2 and self.seed == self.bad:
            if self.in_reward:
                reward = self.value
            else:
                obs[self.index] = self.value
        return obs, reward, False, False, {}


@pytest.mark.parametrize("size", [1, 8, 64, 65, 300])  # Python floats up to 64, NumPy above
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_non_finite_observation_is_refused_naming_its_sub_env_at_any_size(
        size: int, value: float, dtype: type) -> None:
    envs = make_vector_env(lambda: PoisonEnv(size, dtype, size - 1, value, bad=2),
                           num_envs=3, seed=0)
    runner = Runner(envs, device=CPU, progress=Progress())
    try:
        runner.reset(seed=0)
        runner.step(np.zeros(3, dtype=np.int64))  # finite: taken
        with pytest.raises(FloatingPointError) as caught:
            runner.step(np.zeros(3, dtype=np.int64))
        row = np.zeros(size, dtype)
        row[-1] = value
        # Small rows whole; larger ones by where they are not finite.
        shown = (str(row) if size <= 8
                 else f"1 of its {size} values, the first at index {size - 1}: {row[-1]}")
        assert (f"Sub-env 2 returned a non-finite observation ({shown}) at env step 6 "
                "(vector step 2)") in str(caught.value), str(caught.value)
        assert runner.envs_out_of_step  # checkpoints leave the envs out
    finally:
        envs.close()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_reward_is_refused_naming_its_sub_env(value: float) -> None:
    envs = make_vector_env(lambda: PoisonEnv(4, np.float32, 0, value, bad=1, in_reward=True),
                           num_envs=3, seed=0)
    runner = Runner(envs, device=CPU, progress=Progress())
    try:
        runner.reset(seed=0)
        runner.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(FloatingPointError,
                           match=r"Sub-env 1 returned a non-finite reward \((nan|-?inf)\)"):
            runner.step(np.zeros(3, dtype=np.int64))
    finally:
        envs.close()


def test_large_finite_values_are_not_refused() -> None:
    """Values near float32's largest: their sum overflows, each of them is finite."""
    top = float(np.finfo(np.float32).max)
    envs = make_vector_env(lambda: PoisonEnv(8, np.float32, 3, top, bad=0), num_envs=1, seed=0)
    runner = Runner(envs, device=CPU, progress=Progress())
    try:
        runner.reset(seed=0)
        seen = [runner.step(np.zeros(1, dtype=np.int64))[0].next_observations[0, 3]
                for _ in range(3)]
        assert seen == [0.0, top, 0.0]
    finally:
        envs.close()


@pytest.mark.parametrize("pickled_before_box_shape", [False, True])
def test_a_sub_env_refuses_an_observation_of_another_shape(
        pickled_before_box_shape: bool) -> None:
    """Also a sub-env restored from a checkpoint written before sub-envs kept their space's
    shape (``_SubEnv.box_shape``): it falls back to comparing with the space."""
    envs = make_vector_env(ShapeShifter, num_envs=1, seed=0)
    try:
        sub_env = envs.envs[0]  # type: ignore[attr-defined]
        if pickled_before_box_shape:
            del sub_env.box_shape
            sub_env = pickle.loads(pickle.dumps(sub_env))
            assert "box_shape" not in vars(sub_env) and sub_env.box_shape is None
        sub_env.reset(seed=0)
        for _ in range(44):
            sub_env.step(0)
        with pytest.raises(SubEnvError, match=r"sub-env 0 returned from step\(\) an observation "
                           r"of shape \(5,\), but its observation space .* has shape \(3,\)"):
            sub_env.step(0)
    finally:
        envs.close()

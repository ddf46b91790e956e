"""SequenceReplayBuffer: arrival rows per env, episode marks, sequences that never cross the
write cursor, checkpoints, and real Pendulum data."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.buffers import SequenceReplayBuffer
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import Progress, Transitions

BOX = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(3)


def step(t: int, num_envs: int, *, ends: tuple[int, ...] = (),
         truncates: tuple[int, ...] = ()) -> Transitions:
    """A synthetic vector step: env ``i`` observes ``100 * i + t`` and moves to ``+1``."""
    obs = np.array([[100.0 * i + t] for i in range(num_envs)], np.float32)
    return Transitions(observations=obs, actions=np.full(num_envs, t % 3),
                       rewards=np.full(num_envs, float(t), np.float32),
                       next_observations=obs + 1,
                       terminated=np.array([i in ends for i in range(num_envs)]),
                       truncated=np.array([i in truncates for i in range(num_envs)]))


def test_rows_follow_the_arrival_convention_with_first_last_and_terminal_marks() -> None:
    buffer = SequenceReplayBuffer(100, num_envs=1, observation_space=BOX, action_space=ACTIONS,
                                  sequence_length=5)
    buffer.add(step(0, 1))
    buffer.add(step(1, 1, ends=(0,)))  # o_2 terminates the episode
    buffer.add(Transitions(np.array([[50.0]], np.float32), np.array([2]),
                           np.array([7.0], np.float32), np.array([[51.0]], np.float32),
                           np.array([False]), np.array([True])))  # new episode, truncated
    assert len(buffer) == 5  # o_0, o_1, o_2 | o_50, o_51
    assert buffer.observations[0, :5, 0].tolist() == [0.0, 1.0, 2.0, 50.0, 51.0]
    assert buffer.actions[0, :5].tolist() == [0, 0, 1, 0, 2]  # the action that led there
    assert buffer.rewards[0, :5].tolist() == [0.0, 0.0, 1.0, 0.0, 7.0]
    assert buffer.is_first[0, :5].tolist() == [1, 0, 0, 1, 0]
    assert buffer.is_last[0, :5].tolist() == [0, 0, 1, 0, 1]
    # a time-limit truncation is last but not terminal: the continue target stays 1
    assert buffer.is_terminal[0, :5].tolist() == [0, 0, 1, 0, 0]


def test_sequences_are_consecutive_rows_of_one_env_and_never_cross_the_cursor() -> None:
    num_envs, per_env, length = 3, 20, 6
    buffer = SequenceReplayBuffer(num_envs * per_env, num_envs=num_envs, observation_space=BOX,
                                  action_space=ACTIONS, sequence_length=length, seed=1)
    for t in range(57):  # wraps each ring almost three times
        buffer.add(step(t, num_envs))
    batch = buffer.sample(512)  # of the default sequence_length
    assert batch.observations.shape == (512, length, 1)
    assert batch.actions.shape == (512, length) and batch.rewards.shape == (512, length)
    values = batch.observations[..., 0].numpy()
    envs = (values // 100).astype(int)
    assert (envs == envs[:, :1]).all()  # one env per sequence
    steps = values % 100
    # consecutive in write order: every row is one step after the previous (or the newest row
    # of the ring, its cursor, is never followed by the oldest one)
    assert (np.diff(steps, axis=1) == 1).all()
    # the newest rows hold o_56 ... and the oldest kept rows start at o_38 (20 per env)
    assert steps.max() == 57 and steps.min() == 38
    assert set(np.unique(envs)) == {0, 1, 2}


def test_the_windows_are_sampled_about_uniformly() -> None:
    buffer = SequenceReplayBuffer(40, num_envs=1, observation_space=BOX, action_space=ACTIONS,
                                  sequence_length=5, seed=0)
    for t in range(100):
        buffer.add(step(t, 1))
    starts = buffer.sample(20_000, 5).observations[:, 0, 0].numpy()
    counts = np.unique(starts, return_counts=True)[1]
    assert len(counts) == 40 - 5 + 1  # every window, none crossing the cursor
    assert counts.min() > 0.7 * counts.mean() and counts.max() < 1.3 * counts.mean()


def test_sampling_before_any_env_holds_a_sequence_says_what_is_missing() -> None:
    buffer = SequenceReplayBuffer(40, num_envs=2, observation_space=BOX, action_space=ACTIONS,
                                  sequence_length=5)
    buffer.add(step(0, 2))
    assert not buffer.can_sample(5)
    with pytest.raises(ValueError, match="No sub-env holds 5 rows yet"):
        buffer.sample(4)


def test_state_dict_round_trip_continues_identically() -> None:
    def make() -> SequenceReplayBuffer:
        return SequenceReplayBuffer(60, num_envs=2, observation_space=BOX, action_space=ACTIONS,
                                    sequence_length=4, seed=3)

    original = make()
    for t in range(45):
        original.add(step(t, 2, ends=(1,) if t % 7 == 6 else ()))
    original.sample(8, 4)  # advance the sampler
    restored = make()
    restored.load_state_dict(original.state_dict())
    for t in range(45, 50):
        for buffer in (original, restored):
            buffer.add(step(t, 2, ends=(0,) if t == 47 else ()))
    a, b = original.sample(16, 4), restored.sample(16, 4)
    for name, tensor in a._asdict().items():
        assert torch.equal(tensor, getattr(b, name)), name


def test_a_checkpoint_of_another_shape_is_refused_naming_it() -> None:
    small, large = (SequenceReplayBuffer(n, num_envs=2, observation_space=BOX,
                                         action_space=ACTIONS, sequence_length=5)
                    for n in (20, 40))
    with pytest.raises(ValueError, match="Build the buffer with the saved capacity"):
        large.load_state_dict(small.state_dict())


def test_memory_is_reported_in_bytes() -> None:
    buffer = SequenceReplayBuffer(1_000, num_envs=4, observation_space=BOX,
                                  action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
                                  sequence_length=10)
    # per row: 1 float32 observation, 2 float32 actions, reward and three flags
    assert buffer.nbytes == 1_000 * 4 * (1 + 2 + 4)


def test_real_pendulum_steps_through_the_runner_are_stored_with_their_episode_marks() -> None:
    envs = make_vector_env("Pendulum-v1", num_envs=2, seed=0)
    progress = Progress()
    runner = Runner(envs, device=torch.device("cpu"), progress=progress)
    runner.reset(seed=0)
    buffer = SequenceReplayBuffer(1_000, num_envs=2,
                                  observation_space=envs.single_observation_space,
                                  action_space=envs.single_action_space)
    try:
        for _ in range(210):  # Pendulum truncates at 200 steps
            transitions, _ = runner.step(runner.random_actions())
            buffer.add(transitions)
    finally:
        envs.close()
    assert len(buffer) == 2 * (210 + 2)  # a first row for each of the two episodes per env
    for env in range(2):
        assert buffer.is_first[env, [0, 201]].tolist() == [1.0, 1.0]
        assert buffer.is_last[env, 200] == 1.0 and buffer.is_terminal[env].sum() == 0.0
    batch = buffer.sample(8, 50)
    assert batch.observations.shape == (8, 50, 3) and batch.actions.shape == (8, 50, 1)
    assert torch.isfinite(batch.observations).all()


def test_a_sequence_longer_than_a_ring_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="sequence_length 50 is longer than a ring"):
        SequenceReplayBuffer(80, num_envs=2, observation_space=BOX, action_space=ACTIONS)

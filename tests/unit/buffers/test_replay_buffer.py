"""ReplayBuffer: the ring, sampling, state_dict round trips and error messages."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.buffers import ReplayBatch, ReplayBuffer
from rltrain.buffers.replay import available_memory
from rltrain.buffers.sampled import STORED_FIELDS
from rltrain.types import Transitions

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(4)


def make_buffer(capacity: int, seed: int = 0, *, obs_space: gym.Space = OBS_SPACE,
                act_space: gym.Space = ACT_SPACE) -> ReplayBuffer:
    return ReplayBuffer(capacity, observation_space=obs_space, action_space=act_space, seed=seed)


def transitions(ts: list[int]) -> Transitions:
    """One vector step with a row per id in ``ts``; every field of row ``t`` is derived from t."""
    t = np.asarray(ts)
    return Transitions(
        observations=np.stack([t, t + 0.25, t + 0.5], axis=1).astype(np.float32),
        actions=(t % 4).astype(np.int64),
        rewards=t.astype(np.float64),
        next_observations=np.stack([t + 1, t + 1.25, t + 1.5], axis=1).astype(np.float32),
        terminated=(t % 2 == 1),
        truncated=(t % 3 == 0),
    )


def add_each(buffer: ReplayBuffer, ts: range | list[int]) -> None:
    for t in ts:
        buffer.add(transitions([t]))


def stored_ids(buffer: ReplayBuffer) -> list[int]:
    return buffer.rewards.astype(int).tolist()


def assert_rows_consistent(buffer: ReplayBuffer) -> None:
    """Every stored row's fields belong to the same transition."""
    ids = buffer.rewards.astype(int)
    expected = transitions(ids.tolist())
    np.testing.assert_array_equal(buffer.observations, expected.observations)
    np.testing.assert_array_equal(buffer.next_observations, expected.next_observations)
    np.testing.assert_array_equal(buffer.actions, expected.actions)
    np.testing.assert_array_equal(buffer.terminated, expected.terminated.astype(np.float32))
    np.testing.assert_array_equal(buffer.truncated, expected.truncated.astype(np.float32))


def test_wraparound_overwrites_the_oldest_transitions() -> None:
    buffer = make_buffer(5)
    add_each(buffer, range(1, 6))
    assert (buffer.cursor, buffer.size, len(buffer)) == (0, 5, 5)
    assert stored_ids(buffer) == [1, 2, 3, 4, 5]
    add_each(buffer, [6, 7])
    assert stored_ids(buffer) == [6, 7, 3, 4, 5]
    assert (buffer.cursor, buffer.size, len(buffer)) == (2, 5, 5)
    assert_rows_consistent(buffer)


def test_size_and_cursor_grow_until_capacity() -> None:
    buffer = make_buffer(5)
    assert (buffer.cursor, len(buffer)) == (0, 0)
    add_each(buffer, [1, 2, 3])
    assert (buffer.cursor, len(buffer)) == (3, 3)
    assert stored_ids(buffer) == [1, 2, 3, 0, 0]


def test_multi_env_batch_straddling_the_end_of_the_ring() -> None:
    buffer = make_buffer(5)
    buffer.add(transitions([1, 2, 3]))
    assert (buffer.cursor, buffer.size) == (3, 3)
    buffer.add(transitions([4, 5, 6]))  # rows 3, 4, then 0
    assert stored_ids(buffer) == [6, 2, 3, 4, 5]
    assert (buffer.cursor, buffer.size) == (1, 5)
    buffer.add(transitions([7, 8, 9]))
    assert stored_ids(buffer) == [6, 7, 8, 9, 5]
    assert (buffer.cursor, buffer.size) == (4, 5)
    buffer.add(transitions([10, 11, 12]))  # rows 4, 0, 1
    assert stored_ids(buffer) == [11, 12, 8, 9, 10]
    assert (buffer.cursor, buffer.size) == (2, 5)
    assert_rows_consistent(buffer)


def test_batch_ending_exactly_at_capacity_wraps_cursor_to_zero() -> None:
    buffer = make_buffer(6)
    buffer.add(transitions([1, 2, 3]))
    buffer.add(transitions([4, 5, 6]))
    assert (buffer.cursor, buffer.size) == (0, 6)
    buffer.add(transitions([7, 8, 9]))
    assert stored_ids(buffer) == [7, 8, 9, 4, 5, 6]
    assert (buffer.cursor, buffer.size) == (3, 6)


def test_sampling_returns_only_stored_rows() -> None:
    buffer = make_buffer(100)
    add_each(buffer, range(1, 11))  # ids 1..10, rows 10..99 unwritten zeros
    batch = buffer.sample(2_000)
    ids = batch.rewards.long()
    assert set(ids.tolist()) == set(range(1, 11))  # all stored rows, never a zero row
    expected = transitions(ids.tolist())
    assert torch.equal(batch.observations, torch.from_numpy(expected.observations))
    assert torch.equal(batch.next_observations, torch.from_numpy(expected.next_observations))
    assert torch.equal(batch.actions, torch.from_numpy(expected.actions))


def test_sampling_after_wraparound_draws_from_the_current_contents() -> None:
    buffer = make_buffer(5)
    add_each(buffer, range(1, 8))
    ids = set(buffer.sample(1_000).rewards.long().tolist())
    assert ids == {3, 4, 5, 6, 7}


def test_sampled_batch_dtypes_and_shapes() -> None:
    buffer = make_buffer(10)
    add_each(buffer, range(1, 4))
    batch = buffer.sample(7)
    assert isinstance(batch, ReplayBatch)
    assert batch.observations.shape == (7, 3) and batch.observations.dtype == torch.float32
    assert batch.next_observations.shape == (7, 3)
    assert batch.actions.shape == (7,) and batch.actions.dtype == torch.int64
    for name in ("rewards", "terminated", "truncated"):
        tensor = getattr(batch, name)
        assert tensor.shape == (7,) and tensor.dtype == torch.float32, name


def test_sampling_is_reproducible_with_the_seed_and_differs_with_another() -> None:
    a, b, c = make_buffer(50, seed=7), make_buffer(50, seed=7), make_buffer(50, seed=8)
    for buffer in (a, b, c):
        add_each(buffer, range(1, 41))
    sa, sb, sc = a.sample(32), b.sample(32), c.sample(32)
    for name in STORED_FIELDS:
        assert torch.equal(getattr(sa, name), getattr(sb, name)), name
    assert not torch.equal(sa.rewards, sc.rewards)
    assert torch.equal(a.sample(32).rewards, b.sample(32).rewards)


def test_sampling_an_empty_buffer_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        make_buffer(5).sample(1)


def test_capacity_below_one_raises() -> None:
    with pytest.raises(ValueError, match="capacity"):
        make_buffer(0)


@pytest.mark.parametrize("added", [3, 7])  # part-filled; full and wrapped
def test_state_dict_round_trip_restores_contents_cursor_size_and_sampler(added: int) -> None:
    source = make_buffer(5, seed=3)
    add_each(source, range(1, added + 1))
    source.sample(4)  # advance the sampler so its state is not the seed's
    state = source.state_dict()
    restored = make_buffer(5, seed=99)
    add_each(restored, [50, 51, 52, 53])  # stale contents must not leak into samples
    restored.load_state_dict(state)

    assert (restored.cursor, restored.size) == (source.cursor, source.size)
    n = source.size
    for name in STORED_FIELDS:
        np.testing.assert_array_equal(getattr(restored, name)[:n], getattr(source, name)[:n])
    for _ in range(3):
        s, r = source.sample(16), restored.sample(16)
        for name in STORED_FIELDS:
            assert torch.equal(getattr(s, name), getattr(r, name)), name
    # Both continue the ring at the same place.
    add_each(source, [100, 101])
    add_each(restored, [100, 101])
    assert stored_ids(source)[:source.size] == stored_ids(restored)[:restored.size]
    assert (restored.cursor, restored.size) == (source.cursor, source.size)


def test_state_dict_is_a_snapshot() -> None:
    buffer = make_buffer(5)
    add_each(buffer, [1, 2])
    state = buffer.state_dict()
    add_each(buffer, [3, 4, 5, 6])
    buffer.sample(3)
    restored = make_buffer(5)
    restored.load_state_dict(state)
    assert (restored.cursor, restored.size) == (2, 2)
    assert stored_ids(restored)[:2] == [1, 2]
    fresh = make_buffer(5)
    add_each(fresh, [1, 2])
    assert torch.equal(restored.sample(10).rewards, fresh.sample(10).rewards)


def test_load_into_other_capacity_raises_naming_capacity() -> None:
    source = make_buffer(5)
    add_each(source, [1, 2])
    with pytest.raises(ValueError, match=r"capacity 5.*has 6"):
        make_buffer(6).load_state_dict(source.state_dict())


def test_load_into_other_observation_shape_raises_naming_observations() -> None:
    source = make_buffer(5)
    add_each(source, [1, 2])
    other = make_buffer(5, obs_space=gym.spaces.Box(-1, 1, (4,), np.float32))
    with pytest.raises(ValueError, match=r"observations have shape \(3,\).*expects \(4,\)"):
        other.load_state_dict(source.state_dict())


def test_load_into_other_action_shape_raises_naming_actions() -> None:
    source = make_buffer(5)
    add_each(source, [1, 2])
    other = make_buffer(5, act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    with pytest.raises(ValueError, match=r"actions have shape \(\).*expects \(2,\)"):
        other.load_state_dict(source.state_dict())


def test_nbytes_is_the_sum_of_the_storage_arrays() -> None:
    buffer = make_buffer(5)
    arrays = (buffer.observations, buffer.next_observations, buffer.actions, buffer.rewards,
              buffer.terminated, buffer.truncated)
    assert buffer.nbytes == sum(a.nbytes for a in arrays)
    # per row: 2 x 3 float32 observations, an int64 action, 3 float32 scalars
    assert buffer.nbytes == 5 * (2 * 3 * 4 + 8 + 3 * 4) == 220
    box = make_buffer(10, act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    assert box.nbytes == 10 * (2 * 3 * 4 + 2 * 4 + 3 * 4)


def test_continuous_actions_are_stored_as_float_vectors() -> None:
    buffer = make_buffer(4, act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    t = transitions([1, 2])
    buffer.add(t._replace(actions=np.array([[0.5, -0.25], [1.0, 0.0]], dtype=np.float32)))
    assert buffer.actions.dtype == np.float32
    np.testing.assert_array_equal(buffer.actions[:2], [[0.5, -0.25], [1.0, 0.0]])


def test_terminated_and_truncated_are_stored_apart() -> None:
    buffer = make_buffer(4)
    base = transitions([1, 2, 3, 4])
    buffer.add(base._replace(terminated=np.array([True, False, True, False]),
                             truncated=np.array([False, True, True, False])))
    assert buffer.terminated.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert buffer.truncated.tolist() == [0.0, 1.0, 1.0, 0.0]
    batch = buffer.sample(200)
    ids = batch.rewards.long()
    assert torch.equal(batch.terminated, (ids % 2 == 1).float())  # ids 1 and 3
    assert torch.equal(batch.truncated, ((ids == 2) | (ids == 3)).float())


def test_a_buffer_larger_than_the_memory_available_fails_at_once_naming_the_fix() -> None:
    available = available_memory()
    if available is None:
        pytest.skip("this system does not report its available memory")
    box = gym.spaces.Box(-1.0, 1.0, shape=(1_000,), dtype=np.float32)
    capacity = available // (2 * 1_000 * 4) + 1  # observations and next observations alone
    with pytest.raises(MemoryError, match="Lower buffer_size"):
        ReplayBuffer(capacity, observation_space=box, action_space=gym.spaces.Discrete(2))


# Prefetching a training round's batches ------------------------------------------------------


def batch_ids(batch: ReplayBatch) -> list[int]:
    """The transition ids of a batch (every field of a row derived from its id)."""
    ids = batch.rewards.long()
    expected = transitions(ids.tolist())
    np.testing.assert_array_equal(batch.observations.numpy(), expected.observations)
    np.testing.assert_array_equal(batch.next_observations.numpy(), expected.next_observations)
    np.testing.assert_array_equal(batch.actions.numpy(), expected.actions)
    np.testing.assert_array_equal(batch.terminated.numpy(), expected.terminated)
    return ids.tolist()


def test_prefetched_batches_are_drawn_from_the_contents_and_handed_out_once() -> None:
    buffer = make_buffer(100)
    add_each(buffer, range(1, 41))
    buffer.prefetch(3, 8)
    batches = [batch_ids(buffer.sample(8)) for _ in range(3)]
    assert all(len(ids) == 8 and set(ids) <= set(range(1, 41)) for ids in batches)
    assert len({tuple(ids) for ids in batches}) == 3  # three different draws
    state = buffer.rng.bit_generator.state
    assert batch_ids(buffer.sample(8)) not in batches  # then fresh draws from the generator
    assert buffer.rng.bit_generator.state != state


def test_an_add_drops_the_prefetched_batches_and_new_rows_can_be_sampled() -> None:
    buffer = make_buffer(100)
    add_each(buffer, range(1, 3))
    buffer.prefetch(50, 16)
    buffer.add(transitions([99]))
    seen = {i for _ in range(20) for i in batch_ids(buffer.sample(16))}
    assert 99 in seen  # not the batches drawn before row 99 arrived


def test_a_sample_of_another_size_draws_afresh_and_keeps_the_plan() -> None:
    buffer, twin = make_buffer(100), make_buffer(100)
    for b in (buffer, twin):
        add_each(b, range(1, 41))
        b.prefetch(2, 8)
    assert len(buffer.sample(5).rewards) == 5
    assert batch_ids(buffer.sample(8)) == batch_ids(twin.sample(8))


def test_a_buffer_saved_part_way_through_its_prefetched_batches_resumes_them() -> None:
    straight, saved = make_buffer(100, seed=3), make_buffer(100, seed=3)
    for b in (straight, saved):
        add_each(b, range(1, 61))
        b.prefetch(4, 8)
        b.sample(8)
    restored = make_buffer(100, seed=99)
    restored.load_state_dict(saved.state_dict())
    assert ([batch_ids(straight.sample(8)) for _ in range(5)]
            == [batch_ids(restored.sample(8)) for _ in range(5)])  # 3 prefetched, 2 fresh


def test_the_sampler_state_puts_back_a_prefetched_batch() -> None:
    buffer = make_buffer(100)
    add_each(buffer, range(1, 61))
    buffer.prefetch(2, 8)
    before = buffer.sampler_state
    first = batch_ids(buffer.sample(8))
    buffer.sampler_state = before
    assert batch_ids(buffer.sample(8)) == first


@pytest.mark.parametrize("indices", [torch.tensor([[0, 70]]), torch.tensor([[-1, 2]]),
                                     torch.tensor([1, 2]), torch.tensor([[0.5, 1.0]]),
                                     "indices"])
def test_altered_prefetched_indices_are_refused(indices: object) -> None:
    buffer = make_buffer(100)
    add_each(buffer, range(1, 61))
    state = buffer.state_dict()
    state["prefetched"] = indices
    with pytest.raises(ValueError, match=r"prefetched indices .* the checkpoint was altered"):
        make_buffer(100).load_state_dict(state)

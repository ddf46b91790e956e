"""Uniform experience replay in a preallocated numpy ring."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.buffers.observations import (
    map_obs,
    mismatch,
    numpy_zeros,
    obs_nbytes,
    row_nbytes,
    storage_dtype,
)
from rltrain.buffers.sampled import STORED_FIELDS, Plan, ReplayBatch, SampledReplay
from rltrain.settings.replay import PriorityConfig

__all__ = ["ReplayBatch", "ReplayBuffer", "SampledReplay", "available_memory", "check_fits",
           "storage_dtypes"]

if TYPE_CHECKING:
    from rltrain.types import Transitions


_FIELDS = STORED_FIELDS


def available_memory() -> int | None:
    """Bytes of memory the system can still give (``MemAvailable``); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(nbytes: int, what: str, fix: str = "Lower buffer_size.") -> None:
    """Raise ``MemoryError`` when ``nbytes`` of storage exceed the memory available, so that a
    buffer too large fails when the run starts (before it is allocated) rather than when it
    fills up; ``fix`` names the setting to change."""
    available = available_memory()
    if available is not None and nbytes > available:
        raise MemoryError(f"{what} needs {nbytes / 1e9:.2f} GB; {available / 1e9:.2f} GB of "
                          f"memory is available. {fix}")


def storage_dtypes(observation_space: gym.Space[Any],
                   action_space: gym.Space[Any]) -> tuple[np.dtype[Any], np.dtype[Any]]:
    """Storage dtypes of a space that is not a ``Dict``: observations in
    :func:`~rltrain.buffers.observations.storage_dtype` (float32 for a float ``Box``, ``uint8``
    for a ``uint8`` one, int64 otherwise), int64 actions for ``Discrete`` spaces (float32
    otherwise)."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    return storage_dtype(observation_space), np.dtype(np.int64 if discrete else np.float32)


class ReplayBuffer(SampledReplay):
    """A ring of the last ``capacity`` transitions, sampled uniformly.

    Storage is reserved up front and checked against the memory available, so a buffer that
    cannot fit fails at start rather than hours in; pages are filled as transitions arrive (a
    run that stops early never holds a full buffer's memory). Overwritten oldest first. Sampling
    draws from the buffer's own generator, seeded by ``seed``, so it is reproducible and
    checkpointable apart from every other random stream.

    A strategy that knows how many batches it will draw before the next :meth:`add` (a
    training round) can :meth:`prefetch` them: one draw of every index and one gather per
    field (and on a GPU one host-to-device copy) for the whole round, instead of one per batch.

    Args:
        capacity: Transitions kept (summed over sub-envs, unlike SB3's per-env ``buffer_size``).
        observation_space: The sub-env's observation space (``Box``, ``Discrete``, or a
            ``Dict`` of them: one array per key). Stored in its dtype (``uint8`` images as
            ``uint8``; float spaces as float32).
        action_space: The sub-env's action space (``Discrete`` or ``Box``).
        seed: Seed of the sampling generator. Default 0.
        device: Where sampled batches go. Default CPU.
        num_envs: Sub-envs adding a row each per :meth:`add` (for n-step windows). Default 1.
        n_step: Transitions per n-step window (``docs/replay.md``). Default 1.
        gamma: The learner's discount, for n-step returns. Default 0.99.
        priority: Prioritized replay's settings; None samples uniformly. Default None.
    """

    def __init__(self, capacity: int, *, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], seed: int = 0,
                 device: torch.device | str = "cpu", num_envs: int = 1, n_step: int = 1,
                 gamma: float = 0.99, priority: PriorityConfig | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity must be >= 1 transition; got {capacity}.")
        self.capacity = capacity
        self.device = torch.device(device)
        act_shape = action_space.shape or ()
        act_dtype = np.dtype(np.int64 if isinstance(action_space, gym.spaces.Discrete)
                             else np.float32)
        row = (2 * row_nbytes(observation_space)
               + act_dtype.itemsize * int(np.prod(act_shape)) + 3 * 4)
        check_fits(capacity * row, f"A ReplayBuffer of {capacity:,} transitions")
        self.observations = numpy_zeros(observation_space, (capacity,))
        self.next_observations = numpy_zeros(observation_space, (capacity,))
        self.actions = np.zeros((capacity, *act_shape), dtype=act_dtype)
        self.rewards = np.zeros((capacity,), dtype=np.float32)
        self.terminated = np.zeros((capacity,), dtype=np.float32)
        self.truncated = np.zeros((capacity,), dtype=np.float32)
        self.cursor = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)
        #: The prefetched draws not yet sampled: their indices ``[batches, batch_size]``, the
        #: rows gathered for them, and how many of them were sampled already.
        self._plan: Plan | None = None
        self._sampling(num_envs=num_envs, n_step=n_step, gamma=gamma, priority=priority)

    @property
    def next_row(self) -> int:
        """The flat index the next :meth:`add` writes its first row to."""
        return self.cursor

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        return sum(obs_nbytes(getattr(self, name)) for name in _FIELDS)

    def add(self, transitions: Transitions) -> None:
        """Append one vector step's transitions (one row per sub-env), overwriting the oldest."""
        observations, actions, rewards, next_observations, terminated, truncated, _ = transitions
        n, cursor, capacity = len(rewards), self.cursor, self.capacity
        if n != self.num_envs and (self.n_step > 1 or self.prioritized is not None):
            raise ValueError(f"This ReplayBuffer was built for {self.num_envs} sub-envs (its "
                             f"n-step windows and priorities need them); got {n} rows.")
        end = cursor + n
        idx: slice | np.ndarray = (slice(cursor, end) if end <= capacity
                                   else np.arange(cursor, end) % capacity)
        _store(self.observations, idx, observations)
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        _store(self.next_observations, idx, next_observations)
        self.terminated[idx] = terminated
        self.truncated[idx] = truncated
        self._added(cursor, n)
        self.cursor = end % capacity
        self.size = min(self.size + n, capacity)

    def _rows(self, idx: np.ndarray, last: np.ndarray) -> ReplayBatch:
        def take(array: np.ndarray, at: np.ndarray = idx) -> torch.Tensor:
            return self._to_device(torch.from_numpy(array.take(at, axis=0)))

        def take_last(array: np.ndarray) -> torch.Tensor:
            return take(array, last)

        return ReplayBatch(map_obs(take, self.observations), take(self.actions),
                           take_last(self.rewards), map_obs(take_last, self.next_observations),
                           take_last(self.terminated), take_last(self.truncated))

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (as tensors), cursor, size and sampler state."""
        n = self.size
        state: dict[str, Any] = {
            name: map_obs(lambda a: torch.from_numpy(a[:n].copy()), getattr(self, name))
            for name in _FIELDS}
        state.update(cursor=self.cursor, size=n, capacity=self.capacity, **self._plan_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into a buffer of the same capacity and spaces."""
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"The saved ReplayBuffer has capacity {state['capacity']:,}; this one has "
                f"{self.capacity:,}. Build the buffer with the saved capacity."
            )
        n = int(state["size"])
        for name in _FIELDS:  # check every field (shapes, dtypes) before overwriting any
            found = mismatch(state[name], map_obs(torch.from_numpy, getattr(self, name)), 1)
            if found is not None:
                where, saved, expected = found
                raise ValueError(
                    f"The saved ReplayBuffer's {name}{where} have shape {saved}; this one "
                    f"expects {expected}. Were they made for another environment?"
                )
        for name in _FIELDS:
            _store(getattr(self, name), slice(0, n), map_obs(torch.Tensor.numpy, state[name]))
        self.size = n
        self.cursor = int(state["cursor"])
        self._load_plan(state)


def _store(storage: np.ndarray | dict[str, np.ndarray], idx: slice | np.ndarray,
           values: Any) -> None:
    """``storage[idx] = values``, key by key for a dict of arrays."""
    if isinstance(storage, dict):
        for key, array in storage.items():
            array[idx] = values[key]
    else:
        storage[idx] = values

"""Uniform experience replay in a preallocated numpy ring."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

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

if TYPE_CHECKING:
    from rltrain.types import ObsTensors, Transitions


class ReplayBatch(NamedTuple):
    """A sampled batch as tensors on the learner's device (first dimension: batch).

    ``terminated`` and ``truncated`` are float tensors (1.0 or 0.0) kept apart: a target
    bootstraps unless the transition ``terminated``. Observations are in their storage dtype
    (``uint8`` images stay ``uint8``: the agent's encoder scales them), a dict of tensors for a
    ``Dict`` observation space.
    """

    observations: ObsTensors
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: ObsTensors
    terminated: torch.Tensor
    truncated: torch.Tensor


_FIELDS = ReplayBatch._fields


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


class SampledReplay:
    """What a replay of transitions shares: uniform draws from its own generator (``rng``),
    one at a time (:meth:`sample`) or a training round's at once (:meth:`prefetch`), and the
    sampler state a failed gradient step puts back. A subclass stores the transitions: it
    keeps ``size``, draws indices below it (:meth:`_draw`) and gathers them (:meth:`_gather`).
    """

    size: int
    rng: np.random.Generator
    _plan: _Plan | None

    def __len__(self) -> int:
        return self.size

    def can_sample(self) -> bool:
        """True once the buffer holds a transition."""
        return self.size > 0

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement (the next prefetched
        batch, when :meth:`prefetch` drew some of this size)."""
        plan = self._plan
        if (plan is not None and plan.sampled < len(plan.indices)
                and plan.indices.shape[1] == batch_size):
            row = plan.sampled
            plan.sampled += 1
            rows = slice(row * batch_size, (row + 1) * batch_size)

            def part(tensor: torch.Tensor) -> torch.Tensor:
                return tensor[rows]

            batch = plan.rows
            return ReplayBatch(map_obs(part, batch.observations), part(batch.actions),
                               part(batch.rewards), map_obs(part, batch.next_observations),
                               part(batch.terminated), part(batch.truncated))
        if self.size == 0:
            raise ValueError(f"Cannot sample from an empty {type(self).__name__}; add "
                             "transitions first.")
        return self._gather(self._draw((batch_size,)))

    def prefetch(self, batches: int, batch_size: int) -> None:
        """Draw the next ``batches`` batches of ``batch_size`` now, for the next ``batches``
        calls of ``sample(batch_size)`` (until the next ``add``, which drops the rest).

        One draw and one gather per field for them all, much cheaper per batch on a CPU than a
        draw and gathers for each (``docs/benchmarks.md``, "Figures behind implementation
        choices"). The batches are saved with the buffer, so a run resumed part-way through
        them samples the same ones.
        """
        if batches < 1 or self.size == 0:
            self._plan = None
            return
        indices = self._draw((batches, batch_size))
        self._plan = _Plan(indices, self._gather(indices.reshape(-1)))

    def _draw(self, shape: tuple[int, ...]) -> np.ndarray:
        """Indices of stored transitions, uniform, of ``shape``."""
        return self.rng.integers(0, self.size, size=shape)

    def _gather(self, idx: np.ndarray) -> ReplayBatch:
        raise NotImplementedError

    @property
    def sampler_state(self) -> tuple[Any, int]:
        """The sampling generator's state and how many prefetched batches were sampled:
        what a failed gradient step puts back (:attr:`sampler_state` assigned)."""
        return self.rng.bit_generator.state, 0 if self._plan is None else self._plan.sampled

    @sampler_state.setter
    def sampler_state(self, state: tuple[Any, int]) -> None:
        self.rng.bit_generator.state, sampled = state
        if self._plan is not None:
            self._plan.sampled = sampled

    def _plan_state(self) -> dict[str, Any]:
        """The sampler's part of a state dict: the generator and the prefetched draws left."""
        plan = self._plan
        left = None if plan is None else plan.indices[plan.sampled:]
        return {"rng": self.rng.bit_generator.state,
                "prefetched": torch.from_numpy(left.copy()) if left is not None and len(left)
                else None}

    def _load_plan(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_plan_state`'s output (after the transitions)."""
        self.rng.bit_generator.state = state["rng"]
        self._plan = None
        prefetched = state.get("prefetched")  # absent from checkpoints before prefetching
        if prefetched is not None:
            indices = _checked_indices(prefetched, self.size)
            self._plan = _Plan(indices, self._gather(indices.reshape(-1)))


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
    """

    def __init__(self, capacity: int, *, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
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
        self._plan: _Plan | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        return sum(obs_nbytes(getattr(self, name)) for name in _FIELDS)

    def add(self, transitions: Transitions) -> None:
        """Append one vector step's transitions (one row per sub-env), overwriting the oldest."""
        n = len(transitions.rewards)
        end = self.cursor + n
        idx: slice | np.ndarray = (slice(self.cursor, end) if end <= self.capacity
                                   else np.arange(self.cursor, end) % self.capacity)
        _store(self.observations, idx, transitions.observations)
        self.actions[idx] = transitions.actions
        self.rewards[idx] = transitions.rewards
        _store(self.next_observations, idx, transitions.next_observations)
        self.terminated[idx] = transitions.terminated
        self.truncated[idx] = transitions.truncated
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self._plan = None  # drawn from the buffer as it was

    def _gather(self, idx: np.ndarray) -> ReplayBatch:
        device = self.device

        def take(array: np.ndarray) -> torch.Tensor:
            tensor = torch.from_numpy(array.take(idx, axis=0))
            return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)

        return ReplayBatch(map_obs(take, self.observations), take(self.actions),
                           take(self.rewards), map_obs(take, self.next_observations),
                           take(self.terminated), take(self.truncated))

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


@dataclass
class _Plan:
    """Prefetched batches: their indices, their gathered rows, how many were sampled."""

    indices: np.ndarray
    rows: ReplayBatch
    sampled: int = 0


def _checked_indices(saved: Any, size: int) -> np.ndarray:
    """Saved prefetched indices, refused unless they are a non-empty ``[batches,
    batch_size]`` integer tensor within the ``size`` stored transitions (an altered file)."""
    if (not isinstance(saved, torch.Tensor) or saved.dim() != 2 or saved.numel() == 0
            or saved.dtype != torch.int64
            or int(saved.min()) < 0 or int(saved.max()) >= size):
        found = (f"{saved.dtype} {tuple(saved.shape)}" if isinstance(saved, torch.Tensor)
                 else type(saved).__name__)
        raise ValueError(f"The saved ReplayBuffer's prefetched indices ({found}) are not "
                         f"batches of indices below its {size:,} transitions; the checkpoint "
                         "was altered.")
    indices: np.ndarray = saved.numpy().copy()
    return indices


def _store(storage: np.ndarray | dict[str, np.ndarray], idx: slice | np.ndarray,
           values: Any) -> None:
    """``storage[idx] = values``, key by key for a dict of arrays."""
    if isinstance(storage, dict):
        for key, array in storage.items():
            array[idx] = values[key]
    else:
        storage[idx] = values

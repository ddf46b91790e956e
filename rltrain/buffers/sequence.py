"""Sequence replay for model-based agents (Dreamer): contiguous steps per environment.

Each sub-environment has its own ring of *arrival* rows, in the world-model convention of
Dreamer (Hafner et al., arXiv:1912.01603; DreamerV3, arXiv:2301.04104): row ``t`` holds the
observation ``o_t``, the action that led to it, the reward received on arriving, and flags.

    episode o_0, a_0, r_0, o_1, a_1, r_1, o_2 (terminated)  becomes three rows:
    row   observation  action  reward  is_first  is_last  is_terminal
    0     o_0          0       0       1         0        0
    1     o_1          a_0     r_0     0         0        0
    2     o_2          a_1     r_1     0         1        1

An episode's first observation gets a row of its own (zero action and reward), and so does its
last (``is_last``; ``is_terminal`` only when the MDP terminated, not on a time-limit
truncation, so a continue head learns 0 only for true ends). Sequences are cut from one
environment's rows in write order, may span episodes (``is_first`` tells the model to reset
its state there), and never cross that environment's write cursor: they never join the
newest rows to the oldest ones they overwrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rltrain.buffers.observations import GeneratorSampler
from rltrain.buffers.replay import check_fits, storage_dtypes

if TYPE_CHECKING:
    from rltrain.types import Transitions


class SequenceBatch(NamedTuple):
    """``B`` sequences of ``L`` rows, as tensors of shape ``[B, L, ...]`` on the learner's device.

    ``actions`` are the actions that led to each observation (zero on ``is_first`` rows);
    the flags are float tensors (1.0 or 0.0).
    """

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    is_first: torch.Tensor
    is_last: torch.Tensor
    is_terminal: torch.Tensor


_FIELDS = SequenceBatch._fields


class SequenceReplayBuffer(GeneratorSampler):
    """Per-environment rings of arrival rows, sampled as fixed-length sequences.

    Args:
        capacity: Rows kept, all sub-envs together (each gets ``capacity // num_envs``). About
            one row per env step, plus one per episode.
        num_envs: Sub-environments writing to it (one ring each).
        observation_space: The sub-env's observation space.
        action_space: The sub-env's action space.
        sequence_length: Rows per sampled sequence (``sample``'s default). Default 50.
        seed: Seed of the sampling generator. Default 0.
        device: Where sampled batches go. Default CPU.
    """

    def __init__(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], sequence_length: int = 50, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
        if sequence_length < 1:
            raise ValueError(f"sequence_length must be >= 1; got {sequence_length}.")
        per_env = capacity // num_envs
        if per_env < 2:
            raise ValueError(f"SequenceReplayBuffer capacity {capacity:,} gives {per_env} rows "
                             f"per env for {num_envs} envs; it needs at least 2 per env.")
        if sequence_length > per_env:
            raise ValueError(f"sequence_length {sequence_length} is longer than a ring "
                             f"({per_env} rows per env: capacity / num_envs); raise the "
                             "capacity (buffer_size) or shorten the sequences.")
        self.capacity, self.num_envs, self.per_env = per_env * num_envs, num_envs, per_env
        self.sequence_length = sequence_length
        self.device = torch.device(device)
        obs_dtype, act_dtype = storage_dtypes(observation_space, action_space)
        row = (obs_dtype.itemsize * int(np.prod(observation_space.shape or ()))
               + act_dtype.itemsize * int(np.prod(action_space.shape or ())) + 4 * 4)
        check_fits(self.capacity * row, f"A SequenceReplayBuffer of {self.capacity:,} rows")
        rings = (num_envs, per_env)
        self.observations = np.zeros((*rings, *(observation_space.shape or ())), obs_dtype)
        self.actions = np.zeros((*rings, *(action_space.shape or ())), act_dtype)
        self.rewards = np.zeros(rings, np.float32)
        self.is_first = np.zeros(rings, np.float32)
        self.is_last = np.zeros(rings, np.float32)
        self.is_terminal = np.zeros(rings, np.float32)
        self.cursor = np.zeros(num_envs, np.int64)  # each ring's next row
        self.filled = np.zeros(num_envs, np.int64)  # each ring's valid rows
        self.in_episode = np.zeros(num_envs, bool)  # the episode's first row is written
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return int(self.filled.sum())

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        return sum(getattr(self, name).nbytes for name in _FIELDS)

    def add(self, transitions: Transitions) -> None:
        """Append one vector step (one transition per sub-env): the arrival row of each next
        observation, preceded by the first row of the episodes that start with it."""
        obs, next_obs = transitions.observations, transitions.next_observations
        if isinstance(obs, dict) or isinstance(next_obs, dict):
            raise ValueError("A SequenceReplayBuffer stores vector observations, not a Dict's.")
        envs = np.arange(self.num_envs)
        starting = envs[~self.in_episode]
        if len(starting):  # o_t opens an episode: its row has no action and no reward
            self._write(starting, observations=obs[starting], is_first=1.0)
        ended = np.logical_or(transitions.terminated, transitions.truncated)
        self._write(envs, observations=next_obs,
                    actions=transitions.actions, rewards=transitions.rewards,
                    is_last=ended.astype(np.float32),
                    is_terminal=np.asarray(transitions.terminated, np.float32))
        self.in_episode = ~ended

    def _write(self, envs: np.ndarray, *, observations: np.ndarray, actions: Any = 0,
               rewards: Any = 0.0, is_first: Any = 0.0, is_last: Any = 0.0,
               is_terminal: Any = 0.0) -> None:
        rows = self.cursor[envs]
        self.observations[envs, rows] = observations
        self.actions[envs, rows] = actions
        self.rewards[envs, rows] = rewards
        self.is_first[envs, rows] = is_first
        self.is_last[envs, rows] = is_last
        self.is_terminal[envs, rows] = is_terminal
        self.cursor[envs] = (rows + 1) % self.per_env
        self.filled[envs] = np.minimum(self.filled[envs] + 1, self.per_env)

    def can_sample(self, length: int | None = None) -> bool:
        """True once some sub-env holds ``length`` (default ``sequence_length``) rows."""
        return bool((self.filled >= (length or self.sequence_length)).any())

    def prefetch(self, batches: int, batch_size: int) -> None:
        """Nothing: sequences are drawn per batch."""
        return None


    def sample(self, batch_size: int, length: int | None = None) -> SequenceBatch:
        """``batch_size`` sequences of ``length`` (default ``sequence_length``) consecutive
        rows, uniform over the windows that lie within one env's valid rows (so each stored
        row is about equally likely)."""
        length = length or self.sequence_length
        windows = np.maximum(self.filled - length + 1, 0)
        total = int(windows.sum())
        if total == 0:
            raise ValueError(f"No sub-env holds {length} rows yet ({self.filled.tolist()}); "
                             "collect more before sampling, or sample shorter sequences.")
        picks = self.rng.integers(0, total, size=batch_size)
        envs = np.searchsorted(np.cumsum(windows), picks, side="right")
        offsets = picks - (np.cumsum(windows) - windows)[envs]
        oldest = (self.cursor[envs] - self.filled[envs]) % self.per_env
        rows = (oldest[:, None] + offsets[:, None] + np.arange(length)) % self.per_env
        tensors = [torch.from_numpy(getattr(self, name)[envs[:, None], rows])
                   for name in _FIELDS]
        if self.device.type != "cpu":
            tensors = [t.to(self.device, non_blocking=True) for t in tensors]
        return SequenceBatch(*tensors)

    def state_dict(self) -> dict[str, Any]:
        """The rings (as tensors), cursors, fill levels, open episodes and sampler state."""
        state: dict[str, Any] = {name: torch.from_numpy(getattr(self, name).copy())
                                 for name in _FIELDS}
        state.update(cursor=torch.from_numpy(self.cursor.copy()),
                     filled=torch.from_numpy(self.filled.copy()),
                     in_episode=torch.from_numpy(self.in_episode.copy()),
                     capacity=self.capacity, num_envs=self.num_envs,
                     rng=self.rng.bit_generator.state)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into a buffer of the same shape."""
        if (state["capacity"], state["num_envs"]) != (self.capacity, self.num_envs):
            raise ValueError(
                f"The saved SequenceReplayBuffer has {state['capacity']:,} rows for "
                f"{state['num_envs']} envs; this one has {self.capacity:,} for "
                f"{self.num_envs}. Build the buffer with the saved capacity and num_envs.")
        for name in _FIELDS:  # check every field before overwriting any
            if tuple(state[name].shape) != getattr(self, name).shape:
                raise ValueError(
                    f"The saved SequenceReplayBuffer's {name} have shape "
                    f"{tuple(state[name].shape)}; this one expects "
                    f"{getattr(self, name).shape}. Were they made for another environment?")
        for name in _FIELDS:
            getattr(self, name)[:] = state[name].numpy()
        self.cursor[:] = state["cursor"].numpy()
        self.filled[:] = state["filled"].numpy()
        self.in_episode[:] = state["in_episode"].numpy()
        self.rng.bit_generator.state = state["rng"]

"""Replay of frame-stacked observations that stores each frame once.

An Atari observation is the last ``k`` frames (``[4, 84, 84]`` ``uint8``): consecutive
observations share ``k - 1`` frames, and a transition's next observation is the following
transition's observation. Stored whole, 1M transitions take 2 x 1M x 28 KB = 56 GB (SB3's
``optimize_memory_usage`` halves it); :class:`FrameStackReplay` keeps one ring of frames per
sub-env and rebuilds both stacks when it samples:

- each step appends the newest frame of each sub-env's next observation (1 frame per
  transition, 7 KB at 84x84);
- an episode's first observation appends its frames once: one frame when the stack repeats its
  reset frame (Gymnasium's ``FrameStackObservation``), all ``k`` otherwise (zero padding);
- a transition keeps the index of its next observation's newest frame and of its episode's
  first frame; its observation is the ``k`` frames before the first index, its next observation
  the ``k`` ending at it, both clamped to the episode's first frame. A truncated episode's next
  observation is its true last one (the runner's ``final_obs``), as every frame is.

The frame ring holds ``1/16`` more frames than transitions (episode starts take frames too); in
runs of episodes shorter than about 16 steps on average, the oldest transitions lose their
frames before they leave the ring, and are then never drawn (a draw that lands on one is drawn
again). 1M Atari transitions take 7.5 GB (``docs/atari.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.buffers.observations import mismatch
from rltrain.buffers.replay import ReplayBatch, ReplayBuffer, SampledReplay, check_fits
from rltrain.settings.replay import PriorityConfig, ReplaySampling

if TYPE_CHECKING:
    from rltrain.types import Transitions

#: Extra frames in the ring per transition slot (episode starts append frames of their own).
EXTRA_FRAMES = 1 / 16
#: The per-transition fields, each ``[slots, num_envs]``.
_FIELDS = ("actions", "rewards", "terminated", "truncated", "next_frame", "first_frame")


def frame_space_ok(observation_space: gym.Space[Any], frame_stack: int) -> bool:
    """Whether ``observation_space`` holds ``frame_stack`` frames along its first axis."""
    return (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) >= 2
            and observation_space.shape[0] == frame_stack and frame_stack > 1)


class FrameStackReplay(SampledReplay):
    """A ring of the last ``capacity`` transitions of frame-stacked observations, storing each
    frame once (module docstring), sampled uniformly; the same interface as
    :class:`~rltrain.buffers.ReplayBuffer`.

    Args:
        capacity: Transitions kept, all sub-envs together (rounded down to a multiple of
            ``num_envs``).
        num_envs: Sub-envs adding a transition each per :meth:`add`.
        observation_space: A ``Box`` of ``[frame_stack, *frame]``.
        action_space: ``Discrete`` or ``Box``.
        frame_stack: Frames per observation (>= 2).
        seed: Seed of the sampling generator. Default 0.
        device: Where sampled batches go. Default CPU.
        n_step: Transitions per n-step window (``docs/replay.md``). Default 1.
        gamma: The learner's discount, for n-step returns. Default 0.99.
        priority: Prioritized replay's settings; None samples uniformly. Default None.
    """

    def __init__(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], frame_stack: int, seed: int = 0,
                 device: torch.device | str = "cpu", n_step: int = 1, gamma: float = 0.99,
                 priority: PriorityConfig | None = None) -> None:
        if not frame_space_ok(observation_space, frame_stack):
            raise ValueError(f"A FrameStackReplay of {frame_stack} frames needs a Box "
                             f"observation space of shape ({frame_stack}, ...); got "
                             f"{observation_space}.")
        assert isinstance(observation_space, gym.spaces.Box)
        if capacity < num_envs:
            raise ValueError(f"FrameStackReplay capacity ({capacity:,}) must be >= num_envs "
                             f"({num_envs}).")
        self.k, self.num_envs = frame_stack, num_envs
        self.slots = capacity // num_envs
        self.capacity = self.slots * num_envs
        self.ring = self.slots + int(self.slots * EXTRA_FRAMES) + frame_stack
        self.device = torch.device(device)
        frame_shape = observation_space.shape[1:]
        act_shape = action_space.shape or ()
        act_dtype = np.dtype(np.int64 if isinstance(action_space, gym.spaces.Discrete)
                             else np.float32)
        obs_dtype = observation_space.dtype
        assert obs_dtype is not None
        frame_bytes = int(np.prod(frame_shape)) * obs_dtype.itemsize
        row = act_dtype.itemsize * int(np.prod(act_shape)) + 3 * 4 + 2 * 8
        check_fits(self.ring * num_envs * frame_bytes + self.capacity * row,
                   f"A FrameStackReplay of {capacity:,} transitions")
        self.frames = np.zeros((self.ring, num_envs, *frame_shape), dtype=obs_dtype)
        self.actions = np.zeros((self.slots, num_envs, *act_shape), dtype=act_dtype)
        self.rewards = np.zeros((self.slots, num_envs), dtype=np.float32)
        self.terminated = np.zeros((self.slots, num_envs), dtype=np.float32)
        self.truncated = np.zeros((self.slots, num_envs), dtype=np.float32)
        self.next_frame = np.zeros((self.slots, num_envs), dtype=np.int64)
        self.first_frame = np.zeros((self.slots, num_envs), dtype=np.int64)
        #: Frames appended so far per sub-env (absolute: frame ``i`` is at ``i % ring``).
        self.frames_added = np.zeros(num_envs, dtype=np.int64)
        #: The running episode's first frame per sub-env; -1 where the next :meth:`add` starts
        #: an episode.
        self.episode_first = np.full(num_envs, -1, dtype=np.int64)
        self.steps = 0  # vector steps added
        self.size = 0
        self.rng = np.random.default_rng(seed)
        self._plan = None
        self._envs = np.arange(num_envs)
        self._offsets = np.arange(-frame_stack, 0)
        self._sampling(num_envs=num_envs, n_step=n_step, gamma=gamma, priority=priority)

    @property
    def next_row(self) -> int:
        """The flat index the next :meth:`add` writes its first row to."""
        return (self.steps % self.slots) * self.num_envs

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays."""
        return int(self.frames.nbytes + sum(getattr(self, name).nbytes for name in _FIELDS))

    def add(self, transitions: Transitions) -> None:
        """Append one vector step's transitions (one row per sub-env), overwriting the oldest."""
        obs, next_obs = transitions.observations, transitions.next_observations
        assert isinstance(obs, np.ndarray) and isinstance(next_obs, np.ndarray)
        if not np.array_equal(next_obs[:, :-1], obs[:, 1:]):
            raise ValueError(
                "FrameStackReplay: the observations are not frame stacks (a next observation's "
                f"first {self.k - 1} frames differ from its observation's last {self.k - 1}). "
                "Set strategy.frame_stack_replay=false to store whole observations.")
        for env in np.flatnonzero(self.episode_first < 0):
            self._start_episode(int(env), obs[env])
        slot = self.steps % self.slots
        self.frames[self.frames_added % self.ring, self._envs] = next_obs[:, -1]
        self.next_frame[slot] = self.frames_added
        self.first_frame[slot] = self.episode_first
        self.frames_added += 1
        self.actions[slot] = transitions.actions
        self.rewards[slot] = transitions.rewards
        self.terminated[slot] = transitions.terminated
        self.truncated[slot] = transitions.truncated
        ended = np.logical_or(transitions.terminated, transitions.truncated)
        self.episode_first[ended] = -1
        self._added(slot * self.num_envs, self.num_envs)
        self.steps += 1
        self.size = min(self.steps, self.slots) * self.num_envs

    def _start_episode(self, env: int, stack: np.ndarray) -> None:
        """Append an episode's first observation: its reset frame once when the stack repeats
        it, else all its frames."""
        repeated = bool((stack == stack[-1]).all())
        frames = stack[-1:] if repeated else stack
        first = int(self.frames_added[env])
        self.frames[(first + np.arange(len(frames))) % self.ring, env] = frames
        self.frames_added[env] += len(frames)
        self.episode_first[env] = first

    def _kept(self, idx: np.ndarray) -> np.ndarray:
        """Transitions whose frames are all still in the ring (the oldest lose theirs first
        when episodes are short)."""
        slot, env = np.divmod(idx, self.num_envs)
        oldest = np.maximum(self.next_frame[slot, env] - self.k, self.first_frame[slot, env])
        return oldest >= self.frames_added[env] - self.ring

    def _rows(self, idx: np.ndarray, last: np.ndarray) -> ReplayBatch:
        slot, env = np.divmod(idx, self.num_envs)
        end, _ = np.divmod(last, self.num_envs)  # the same sub-env
        first = self.first_frame[slot, env, None]
        before = np.maximum(self.next_frame[slot, env, None] + self._offsets, first)
        after = np.maximum(self.next_frame[end, env, None] + self._offsets + 1, first)

        def tensor(array: np.ndarray) -> torch.Tensor:
            return self._to_device(torch.from_numpy(array))

        return ReplayBatch(tensor(self.frames[before % self.ring, env[:, None]]),
                           tensor(self.actions[slot, env]), tensor(self.rewards[end, env]),
                           tensor(self.frames[after % self.ring, env[:, None]]),
                           tensor(self.terminated[end, env]), tensor(self.truncated[end, env]))

    def state_dict(self) -> dict[str, Any]:
        """The stored frames and transitions (as tensors), counters and sampler state."""
        used = min(self.steps, self.slots)
        frames = min(int(self.frames_added.max(initial=0)), self.ring)
        state: dict[str, Any] = {name: torch.from_numpy(getattr(self, name)[:used].copy())
                                 for name in _FIELDS}
        state.update(frames=torch.from_numpy(self.frames[:frames].copy()),
                     frames_added=torch.from_numpy(self.frames_added.copy()),
                     episode_first=torch.from_numpy(self.episode_first.copy()),
                     steps=self.steps, capacity=self.capacity, frame_stack=self.k,
                     num_envs=self.num_envs, **self._plan_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into a buffer of the same capacity, frame
        stack, sub-envs and spaces; every array and counter is checked before any is used."""
        saved = (state.get("capacity"), state.get("frame_stack"), state.get("num_envs"))
        if saved != (self.capacity, self.k, self.num_envs):
            raise ValueError(
                f"The saved FrameStackReplay has (capacity, frame_stack, num_envs) {saved}; "
                f"this one has {(self.capacity, self.k, self.num_envs)}. Resume with the "
                "checkpoint's settings.")
        steps = state.get("steps")
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"The saved FrameStackReplay's step count {steps!r} is not a "
                             "count; the checkpoint was altered.")
        used = min(steps, self.slots)
        expected = {name: torch.from_numpy(getattr(self, name)[:used]) for name in _FIELDS}
        expected.update(frames_added=torch.from_numpy(self.frames_added),
                        episode_first=torch.from_numpy(self.episode_first))
        for name, like in [*expected.items(), ("frames", torch.from_numpy(self.frames))]:
            found = mismatch(state.get(name), like, 1 if name == "frames" else 0)
            if found is not None:
                _, got, want = found
                raise ValueError(f"The saved FrameStackReplay's {name} have shape {got}; this "
                                 f"one expects {want}. Were they made for another "
                                 "environment?")
        _check_indices(state, used, self.ring)
        for name in _FIELDS:
            getattr(self, name)[:used] = state[name].numpy()
        self.frames[:len(state["frames"])] = state["frames"].numpy()
        self.frames_added[:] = state["frames_added"].numpy()
        self.episode_first[:] = state["episode_first"].numpy()
        self.steps, self.size = steps, used * self.num_envs
        self._load_plan(state)


def _check_indices(state: dict[str, Any], used: int, ring: int) -> None:
    """Refuse saved frame indices that do not fit together (an altered file): each
    transition's first frame at or before its next frame, both before the frames added."""
    added = state["frames_added"].numpy()
    nxt, first = state["next_frame"].numpy(), state["first_frame"].numpy()
    episode = state["episode_first"].numpy()
    frames = len(state["frames"])
    ok = ((added >= 0).all() and frames == min(int(added.max(initial=0)), ring)
          and (episode < added).all() and (episode >= -1).all())
    if used:
        ok = ok and (first >= 0).all() and (first <= nxt).all() and (nxt < added).all()
    if not ok:
        raise ValueError("The saved FrameStackReplay's frame indices do not fit together (each "
                         "transition's first frame at or before its next frame, all before the "
                         "frames added); the checkpoint was altered.")


def transition_replay(capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                      action_space: gym.Space[Any], seed: int, device: torch.device,
                      frame_stack: int = 1, sampling: ReplaySampling | None = None,
                      gamma: float | None = None) -> ReplayBuffer | FrameStackReplay:
    """The default replay of transitions: a :class:`FrameStackReplay` storing each frame once
    when the env stacks ``frame_stack`` frames, else a :class:`ReplayBuffer`; ``sampling``:
    n-step windows (discounted by ``gamma``, required for ``n_step > 1``) and prioritized
    draws."""
    sampling = sampling or ReplaySampling()
    kwargs: dict[str, Any] = {"seed": seed, "device": device, "priority": sampling.priority,
                              "n_step": sampling.n_step}
    if sampling.n_step > 1:
        if gamma is None:
            raise ValueError("n-step returns need the agent's discount (ReplayAgent.gamma); "
                             "it declares none.")
        kwargs["gamma"] = float(gamma)
    if frame_stack > 1 and frame_space_ok(observation_space, frame_stack):
        return FrameStackReplay(capacity, num_envs=num_envs, observation_space=observation_space,
                                action_space=action_space, frame_stack=frame_stack, **kwargs)
    return ReplayBuffer(capacity, observation_space=observation_space, action_space=action_space,
                        num_envs=num_envs, **kwargs)

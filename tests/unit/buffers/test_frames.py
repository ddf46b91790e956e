"""FrameStackReplay: each frame stored once, both stacks rebuilt exactly as the env gave them
(episode starts with repeated or zero padding, terminations, truncations' true last
observations, several sub-envs, a wrapped ring), its memory, its refusals and its exact resume
(also through a DQN run stopped and resumed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, straight_and_resumed

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.buffers import FrameStackReplay, ReplayBuffer
from rltrain.buffers.frames import EXTRA_FRAMES
from rltrain.buffers.sampled import STORED_FIELDS
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import Progress, Transitions

K, SIDE = 4, 36


class StackedCounter(gym.Env[np.ndarray, int]):
    """Frames that say which they are (sub-env, episode, step in their first bytes), stacked
    ``K`` deep with the reset frame repeated or zeros before it; episodes of 1 to
    ``max_length`` steps that end terminated or truncated at random (from the reset seed)."""

    def __init__(self, padding: str = "repeat", max_length: int = 9) -> None:
        self.metadata = {"frame_stack": K}
        self.observation_space = gym.spaces.Box(0, 255, (K, SIDE, SIDE), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.padding, self.max_length = padding, max_length
        self.episode, self.t, self.length = -1, 0, 1
        self.stack = np.zeros((K, SIDE, SIDE), np.uint8)

    def _frame(self) -> np.ndarray:
        frame = np.full((SIDE, SIDE), (self.episode * 7 + self.t) % 200 + 1, np.uint8)
        frame[0, :3] = [self.episode % 256, self.episode // 256, self.t]
        return frame

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode, self.t = int(self.np_random.integers(60_000)), 0
        self.length = int(self.np_random.integers(1, self.max_length + 1))
        frame = self._frame()
        self.stack[:] = frame if self.padding == "repeat" else 0
        self.stack[-1] = frame
        return self.stack.copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        self.stack = np.roll(self.stack, -1, axis=0)
        self.stack[-1] = self._frame()
        ended = self.t >= self.length
        terminated = ended and bool(self.np_random.integers(2))
        return self.stack.copy(), float(action), terminated, ended and not terminated, {}


def collect(padding: str, capacity: int, steps: int, num_envs: int = 3, max_length: int = 9
            ) -> tuple[FrameStackReplay, ReplayBuffer]:
    envs = make_vector_env(lambda: StackedCounter(padding, max_length), num_envs=num_envs,
                           seed=2)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    runner.reset(seed=2)
    space, actions = envs.single_observation_space, envs.single_action_space
    frames = FrameStackReplay(capacity, num_envs=num_envs, observation_space=space,
                              action_space=actions, frame_stack=K, seed=1)
    whole = ReplayBuffer(capacity, observation_space=space, action_space=actions, seed=1)
    for _ in range(steps):
        transitions, _ = runner.step(runner.random_actions())
        frames.add(transitions)
        whole.add(transitions)
    envs.close()
    return frames, whole


def whole_index(frames: FrameStackReplay, idx: np.ndarray) -> np.ndarray:
    """Where a FrameStackReplay index (slot x sub-env) is in a ReplayBuffer of the same
    capacity fed the same steps."""
    slot, env = np.divmod(idx, frames.num_envs)
    newest = (frames.steps - 1) % frames.slots
    step = frames.steps - 1 - (newest - slot) % frames.slots
    return (step * frames.num_envs + env) % frames.capacity


@pytest.mark.parametrize("padding", ["repeat", "zero"])
@pytest.mark.parametrize("capacity, steps", [(300, 60), (300, 400)])
def test_every_kept_transition_is_rebuilt_exactly(padding: str, capacity: int, steps: int
                                                  ) -> None:
    frames, whole = collect(padding, capacity, steps)
    assert len(frames) == len(whole) == min(steps * 3, capacity)
    idx = np.arange(len(frames))
    kept = frames._kept(idx)
    assert kept.mean() > 0.5
    rebuilt, stored = frames._gather(idx), whole._gather(whole_index(frames, idx))
    for name in STORED_FIELDS:
        assert torch.equal(getattr(rebuilt, name)[kept], getattr(stored, name)[kept]), name
    ended = (stored.terminated + stored.truncated)[kept] > 0
    assert ended.sum() > 20  # ends by both causes were checked


def test_episodes_shorter_than_the_margin_lose_their_oldest_and_those_are_never_drawn() -> None:
    frames, _ = collect("zero", 300, 400, max_length=2)  # 4 frames an episode start
    lost = ~frames._kept(np.arange(len(frames)))
    assert lost.any()
    drawn = frames._draw((20_000,))
    assert frames._kept(drawn).all()
    # the draws are uniform over the kept ones
    counts = np.bincount(drawn, minlength=len(frames))[~lost]
    assert counts.min() > 0 and counts.max() < 4 * counts.mean()


def test_long_episodes_keep_every_transition() -> None:
    frames, _ = collect("repeat", 300, 500, max_length=200)  # 1 frame an episode start
    assert frames._kept(np.arange(len(frames))).all()


def test_memory_is_one_frame_a_transition_plus_the_margin() -> None:
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    capacity, num_envs = 100_000, 8
    replay = FrameStackReplay(capacity, num_envs=num_envs, observation_space=space,
                              action_space=gym.spaces.Discrete(6), frame_stack=4)
    slots = capacity // num_envs
    frames = (slots + int(slots * EXTRA_FRAMES) + 4) * num_envs * 84 * 84
    per_transition = 8 + 3 * 4 + 2 * 8  # action, reward and flags, two frame indices
    assert replay.nbytes == frames + capacity * per_transition
    naive = 2 * capacity * 4 * 84 * 84
    assert replay.nbytes < naive / 7.4  # 56 GB of whole stacks for 1M; this 7.5 GB


def test_observations_that_are_not_stacks_are_refused_with_the_fix() -> None:
    space = gym.spaces.Box(0, 255, (4, SIDE, SIDE), np.uint8)
    replay = FrameStackReplay(10, num_envs=1, observation_space=space,
                              action_space=gym.spaces.Discrete(2), frame_stack=K)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, (1, K, SIDE, SIDE), dtype=np.uint8)
    with pytest.raises(ValueError, match="frame_stack_replay=false"):
        replay.add(Transitions(obs, np.zeros(1, np.int64), np.zeros(1), obs[:, ::-1].copy(),
                               np.zeros(1, bool), np.zeros(1, bool), {}))
    with pytest.raises(ValueError, match=r"shape \(4, \.\.\.\)"):
        FrameStackReplay(10, num_envs=1, observation_space=gym.spaces.Box(0, 255, (3, 8, 8)),
                         action_space=gym.spaces.Discrete(2), frame_stack=K)


def test_state_dict_round_trip_samples_the_same_batches() -> None:
    frames, _ = collect("repeat", 300, 250)
    frames.prefetch(3, 16)
    frames.sample(16)
    state = frames.state_dict()
    twin = FrameStackReplay(300, num_envs=3, observation_space=gym.spaces.Box(
        0, 255, (K, SIDE, SIDE), np.uint8), action_space=gym.spaces.Discrete(3),
        frame_stack=K, seed=99)
    twin.load_state_dict(state)
    for _ in range(4):
        a, b = frames.sample(16), twin.sample(16)
        for name in STORED_FIELDS:
            assert torch.equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("alter, message", [
    (lambda s: s.update(capacity=600), "capacity, frame_stack, num_envs"),
    (lambda s: s.update(steps=-1), "not a count"),
    (lambda s: s["next_frame"].add_(10_000), "do not fit together"),
    (lambda s: s["first_frame"].sub_(10_000), "do not fit together"),
    (lambda s: s.update(frames=s["frames"][:, :, :8]), "frames have shape"),
    (lambda s: s.update(rewards=s["rewards"].double()), "rewards have shape"),
])
def test_an_altered_state_is_refused_before_anything_changes(alter: Any, message: str) -> None:
    frames, _ = collect("repeat", 300, 120)
    state = frames.state_dict()
    alter(state)
    fresh, _ = collect("zero", 300, 10)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=message):
        fresh.load_state_dict(state)
    after = fresh.state_dict()
    for name, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[name]), name


# ------------------------------------------------------------------ a DQN run resumed


def counter_with_time_limit() -> gym.Env[np.ndarray, int]:
    return gym.wrappers.TimeLimit(StackedCounter(), max_episode_steps=50)


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> DQN:
    strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=8, warmup_steps=40, num_envs=2,
                                                 train_interval=4, train_steps=2,
                                                 buffer_size=200, seed=3))
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      eval_interval=None, **QUIET)
    agent = DQN(DQNConfig(hidden_sizes=[], exploration_steps=100))
    trainer.fit(counter_with_time_limit, agent, ckpt_path=ckpt_path)
    assert isinstance(trainer.strategy, OffPolicyStrategy)
    return agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, 240)
    return {"straight": straight, "split": split}


def test_a_dqn_run_stores_frames_once_and_resumes_bit_for_bit(runs: dict[str, Path]) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")
    split = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")
    assert "frames" in straight["buffer"] and straight["buffer"]["frame_stack"] == K
    for part in ("agent", "optimization", "buffer", "progress"):
        assert_same_tensors(straight[part], split[part], part)

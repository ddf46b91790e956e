"""An agent that declares a SequenceReplayBuffer trains under OffPolicyStrategy (the path a
world-model agent takes): it gets sequence batches, a recurrent policy state that resets at
episode starts, and a run that resumes bit for bit with the sequence buffer in the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from conftest import QUIET, assert_same_tensors, straight_and_resumed
from torch import nn

from rltrain import LearningAgent, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.agents.base import Policy
from rltrain.buffers import Buffer, SequenceBatch, SequenceReplayBuffer
from rltrain.checkpoint import read_checkpoint
from rltrain.optim import Optimization, adam
from rltrain.types import PolicyState, PolicyStep

ENV = "Pendulum-v1"
LENGTH = 16


class StepCountingPolicy(Policy):
    """Acts with a linear map; its recurrent state counts the steps of each env's episode."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.head = head

    def act(self, obs: torch.Tensor, state: PolicyState, deterministic: bool) -> PolicyStep:
        assert isinstance(state, torch.Tensor)
        return PolicyStep(torch.tanh(self.head(obs)) * 2.0, state + 1, {})

    def initial_state(self, num_envs: int) -> PolicyState:
        return torch.zeros(num_envs)

    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        assert isinstance(state, torch.Tensor)
        return torch.where(done, torch.zeros_like(state), state)


class RewardModel(LearningAgent):
    """Learns to predict the reward on arrival from the observation, on replayed sequences."""

    head: nn.Linear
    model: nn.Sequential

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[tuple[int, ...], float]] = []
        self.losses: list[float] = []

    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        assert isinstance(action_space, gym.spaces.Box)

    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        size = int(observation_space.shape[0])  # type: ignore[index]
        self.head = nn.Linear(size, 1)
        self.model = nn.Sequential(nn.Linear(size, 32), nn.Tanh(), nn.Linear(32, 1))

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device) -> Buffer:
        return SequenceReplayBuffer(capacity, num_envs=num_envs,
                                    observation_space=observation_space,
                                    action_space=action_space, sequence_length=LENGTH,
                                    seed=seed, device=device)

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"model": adam(self.model.parameters(), lr=1e-2)}

    def training_step(self, batch: SequenceBatch, optim: Optimization) -> dict[str, Any]:
        self.batches.append((tuple(batch.observations.shape), float(batch.is_first.sum())))
        predicted = self.model(batch.observations).squeeze(-1)
        arrived = 1.0 - batch.is_first  # first rows have no reward on arrival
        loss = ((predicted - batch.rewards) ** 2 * arrived).sum() / arrived.sum()
        optim.step("model", loss)
        self.losses.append(float(loss.detach()))
        return {"loss": loss.detach()}

    def policy(self, device: torch.device) -> Policy:
        return StepCountingPolicy(self.head)


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> RewardModel:
    strategy = OffPolicyStrategy(OffPolicyConfig(num_envs=2, buffer_size=2_000, batch_size=8,
                                                 warmup_steps=100, train_interval=50,
                                                 train_steps=5, seed=4))
    agent = RewardModel()
    Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir, eval_interval=None,
            **QUIET).fit(ENV, agent, ckpt_path=ckpt_path)
    return agent


def test_the_agent_trains_on_sequence_batches_and_its_loss_falls(tmp_path: Path) -> None:
    agent = fit(tmp_path, 1_200)
    shapes = {shape for shape, _ in agent.batches}
    assert shapes == {(8, LENGTH, 3)}
    assert len(agent.batches) == 5 * (1_200 // 50 - 1)  # rounds from 100 on, 5 steps each
    # Pendulum episodes last 200 steps: some 16-row windows hold an episode start
    assert sum(firsts for _, firsts in agent.batches) > 0
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert saved["buffer"]["observations"].shape == (2, 1_000, 3)
    # 600 arrival rows per env, plus a first row for each of its 3 episodes (200 steps each)
    assert saved["buffer"]["filled"].tolist() == [603, 603]
    losses = agent.losses
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])  # the reward model learns


def test_the_recurrent_policy_state_resets_where_episodes_start(tmp_path: Path) -> None:
    fit(tmp_path, 450)  # Pendulum truncates at 200 steps per env: 225 vector steps = 2 x 200 + 25
    runner = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["runner"]
    assert runner["policy_state"].tolist() == [25.0, 25.0]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, 800)
    return (read_checkpoint(straight / "checkpoints" / "last.pt"),
            read_checkpoint(split / "checkpoints" / "last.pt"))


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "progress"])
def test_a_run_with_a_sequence_buffer_resumes_bit_for_bit(
    resumed: tuple[dict[str, Any], dict[str, Any]], part: str,
) -> None:
    straight, split = resumed
    assert_same_tensors(straight[part], split[part], part)

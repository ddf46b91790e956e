"""PQN: its Q(λ) returns against the recursion walked by hand (terminations, a time limit's
true final observation, the rollout's end), the acting policy's values and exploration, the
learning-rate schedule, and a run stopped mid-rollout or mid-update that resumes bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import StopAtEnvStep, StopAtGradientStep, assert_same_tensors, fit_stopped

from rltrain import OnPolicyConfig, OnPolicyStrategy
from rltrain.agents import PQN, PQNConfig
from rltrain.buffers import RolloutBuffer
from rltrain.checkpoint import read_checkpoint
from rltrain.types import Progress, Transitions

SPACE = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def constant_pqn(values: list[float], **config: Any) -> PQN:
    """A PQN whose Q(s, ·) is ``values`` for every s (last layer: zero weights, those biases)."""
    agent = PQN(PQNConfig(hidden_sizes=[4], **config))
    agent.setup(observation_space=SPACE, action_space=gym.spaces.Discrete(len(values)),
                device=torch.device("cpu"), progress=Progress())
    last = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor(values))
    agent.configure_optimizers()
    return agent


def test_q_lambda_returns_walk_the_recursion() -> None:
    gamma, lam = 0.9, 0.5
    agent = constant_pqn([1.0, 3.0], gamma=gamma, q_lambda=lam)  # max Q = 3 everywhere
    rollout = RolloutBuffer(4, num_envs=1, observation_space=SPACE,
                            action_space=gym.spaces.Discrete(2))
    values = [2.0, 0.5, 1.5, 4.0]  # what the policy recorded as max Q when acting
    ends = [(False, False), (True, False), (False, True), (False, False)]
    rewards = [1.0, 2.0, -1.0, 0.5]
    for t in range(4):
        rollout.add(Transitions(np.zeros((1, 2), np.float32), np.zeros(1, np.int64),
                                np.array([rewards[t]]), np.zeros((1, 2), np.float32),
                                np.array([ends[t][0]]), np.array([ends[t][1]]),
                                {"value": torch.tensor([values[t]]),
                                 "log_prob": torch.zeros(1)}))
    agent.prepare_rollout(rollout)
    r3 = 0.5 + gamma * 3.0  # the rollout's end: max Q(last observation) = 3
    r2 = -1.0 + gamma * 3.0  # truncated: max Q(true final observation), no λ continuation
    r1 = 2.0  # terminated
    r0 = 1.0 + gamma * (lam * r1 + (1 - lam) * values[1])
    torch.testing.assert_close(rollout.returns[:, 0], torch.tensor([r0, r1, r2, r3]))


def test_the_policy_acts_epsilon_greedily_and_records_the_greedy_value() -> None:
    agent = constant_pqn([1.0, 3.0, 2.0], epsilon_start=0.0, epsilon_end=0.0)
    step = agent.policy(torch.device("cpu")).act(torch.zeros(5, 2), None, deterministic=False)
    assert step.action.tolist() == [1] * 5
    torch.testing.assert_close(step.info["value"], torch.full((5,), 3.0))
    agent.config.epsilon_start = agent.config.epsilon_end = 1.0
    actions = torch.cat([agent.policy(torch.device("cpu")).act(
        torch.zeros(50, 2), None, deterministic=False).action for _ in range(4)])
    assert set(actions.tolist()) == {0, 1, 2}


def test_epsilon_decays_over_its_fraction_of_the_run() -> None:
    agent = constant_pqn([0.0, 0.0], epsilon_start=1.0, epsilon_end=0.1,
                         exploration_fraction=0.5)
    agent.num_steps = 1000
    for steps, epsilon in [(0, 1.0), (250, 0.55), (500, 0.1), (900, 0.1)]:
        agent.progress.env_steps = steps
        assert agent.epsilon == pytest.approx(epsilon)


N = 640  # 5 rollouts of 4 envs x 32 steps


def fit(run_dir: Path, ckpt_path: str | None = None, stop: Any = None) -> None:
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=32, batch_size=32,
                                               update_epochs=2, seed=5))
    fit_stopped("CartPole-v1", PQN(PQNConfig(hidden_sizes=[16])), strategy, run_dir, N,
                stop=stop, ckpt_path=ckpt_path, eval_interval=None)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("straight")
    fit(run_dir)
    return run_dir


@pytest.mark.parametrize("where", ["mid-rollout", "mid-update"])
def test_a_stopped_run_resumes_bit_for_bit(straight: Path, tmp_path: Path, where: str) -> None:
    # rollouts of 128 transitions, 8 gradient steps each (2 epochs x 4 minibatches)
    stop = StopAtEnvStep(200) if where == "mid-rollout" else StopAtGradientStep(19)
    fit(tmp_path, stop=stop)
    stopped = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]
    assert (stopped["env_steps"], stopped["gradient_steps"]) == (
        (200, 8) if where == "mid-rollout" else (384, 19))
    fit(tmp_path, ckpt_path="last")
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == N
    for part in ("agent", "optimization", "buffer", "progress"):
        assert_same_tensors(a[part], b[part], part)

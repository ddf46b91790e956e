"""C51 and QR-DQN: C51's projection (Algorithm 1) and QR-DQN's quantile Huber loss (Eq. 10)
against hand arithmetic, the acting policy's Q as the distribution's mean, double Q choosing
with the online network, composition with n-step windows, priorities and the dueling head,
exact resume, the presets, and a short learning check on CartPole."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import StopAtGradientStep, assert_same_tensors, fit_stopped

from rltrain import OffPolicyConfig, OffPolicyStrategy, build, compose
from rltrain.agents import C51, QRDQN, C51Config, QRDQNConfig
from rltrain.agents.qrdqn import quantile_huber_loss
from rltrain.buffers import ReplayBatch
from rltrain.buffers.sampling import Prioritized, PriorityFeedback
from rltrain.checkpoint import read_checkpoint
from rltrain.optim import Optimization
from rltrain.settings.replay import PriorityConfig
from rltrain.types import Progress

SPACE = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def setup(agent: C51 | QRDQN, space: gym.Space[np.ndarray] = SPACE, actions: int = 2
          ) -> None:
    agent.setup(observation_space=space, action_space=gym.spaces.Discrete(actions),
                device=torch.device("cpu"), progress=Progress())


def c51(**kwargs: object) -> C51:
    agent = C51(C51Config(hidden_sizes=[8], **kwargs))  # type: ignore[arg-type]
    setup(agent)
    return agent


def batch(rewards: list[float], terminated: list[float],
          discounts: list[float] | None = None) -> ReplayBatch:
    n = len(rewards)
    return ReplayBatch(torch.zeros(n, 2), torch.zeros(n, dtype=torch.int64),
                       torch.tensor(rewards), torch.zeros(n, 2), torch.tensor(terminated),
                       torch.zeros(n), None if discounts is None else torch.tensor(discounts))


@pytest.mark.parametrize(("reward", "terminated", "discounts", "expected"), [
    # Tz = 0.5 + 0.5 z = [0.5, 1.0, 1.5]: 0.2 split 0.1/0.1 between atoms 0 and 1, 0.5 all on
    # atom 1 (an exact atom), 0.3 split 0.15/0.15 between atoms 1 and 2
    (0.5, 0.0, None, [0.1, 0.75, 0.15]),
    (0.5, 1.0, None, [0.5, 0.5, 0.0]),  # terminated: Tz = 0.5 for every atom
    (5.0, 0.0, None, [0.0, 0.0, 1.0]),  # clipped to v_max
    # an n-step window's own discount 0.25: Tz = [0.5, 0.75, 1.0]
    (0.5, 0.0, [0.25], [0.225, 0.775, 0.0]),
])
def test_the_projection_of_algorithm_1_by_hand(reward: float, terminated: float,
                                                discounts: list[float] | None,
                                                expected: list[float]) -> None:
    agent = c51(n_atoms=3, v_min=0.0, v_max=2.0, gamma=0.5)
    m = agent.project(batch([reward], [terminated], discounts), torch.tensor([[0.2, 0.5, 0.3]]))
    torch.testing.assert_close(m, torch.tensor([expected]))


def test_projected_distributions_are_distributions() -> None:
    agent = c51(n_atoms=51, v_min=-10.0, v_max=10.0, gamma=0.99)
    generator = torch.Generator().manual_seed(0)
    p = torch.rand(256, 51, generator=generator).softmax(dim=1)
    rows = batch((torch.randn(256, generator=generator) * 8).tolist(),
                 (torch.rand(256, generator=generator) < 0.3).float().tolist())
    m = agent.project(rows, p)
    assert (m >= 0).all()
    torch.testing.assert_close(m.sum(dim=1), torch.ones(256))
    z = agent.support
    # the mean moves as the Bellman operator says wherever nothing was clipped
    inside = (rows.rewards.abs() < 0.05)
    expected = rows.rewards + 0.99 * (1 - rows.terminated) * (p * z).sum(dim=1)
    torch.testing.assert_close((m * z).sum(dim=1)[inside], expected[inside], atol=1e-4,
                               rtol=1e-4)


def test_quantile_huber_loss_by_hand() -> None:
    # tau = [0.25, 0.75]; theta = [0, 1], targets [1, 1]: u_0j = 1 -> 0.25 x Huber(1) = 0.125,
    # u_1j = 0 -> 0; sum over i of the mean over j = 0.125
    # theta = [2, 2], targets [0, 0]: u = -2 -> Huber 1.5; weights 0.75 and 0.25 -> 1.5
    losses = quantile_huber_loss(torch.tensor([[0.0, 1.0], [2.0, 2.0]]),
                                 torch.tensor([[1.0, 1.0], [0.0, 0.0]]), kappa=1.0)
    torch.testing.assert_close(losses, torch.tensor([0.125, 1.5]))


def test_quantile_regression_finds_the_quantiles_of_a_distribution() -> None:
    # minimising Eq. 10 over samples of U(0, 1) puts theta_i at the midpoints (2i + 1) / 2N
    theta = torch.zeros(1, 4, requires_grad=True)
    optimizer = torch.optim.Adam([theta], lr=0.01)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3000):
        samples = torch.rand(1, 64, generator=generator)
        loss = quantile_huber_loss(theta, samples, kappa=0.01).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.testing.assert_close(theta.detach(), torch.tensor([[0.125, 0.375, 0.625, 0.875]]),
                               atol=0.03, rtol=0)


@pytest.mark.parametrize("agent_type", [C51, QRDQN])
@pytest.mark.parametrize("dueling", [False, True])
def test_the_policy_acts_greedily_on_the_distributions_mean(agent_type: type,
                                                             dueling: bool) -> None:
    config = (C51Config if agent_type is C51 else QRDQNConfig)(hidden_sizes=[8],
                                                                 dueling=dueling)
    agent = agent_type(config)
    setup(agent, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 4)
    obs = torch.randn(32, 3)
    out = agent.q_network(obs)
    assert out.shape == (32, 4, agent.atoms)
    q = ((out.softmax(-1) * agent.support).sum(-1) if agent_type is C51 else out.mean(-1))
    actions = agent.policy(torch.device("cpu")).act(obs, None, deterministic=True).action
    assert torch.equal(actions, q.argmax(dim=1))


@pytest.mark.parametrize("agent_type", [C51, QRDQN])
def test_a_step_weights_rows_and_sends_back_priorities(agent_type: type) -> None:
    agent = agent_type((C51Config if agent_type is C51 else QRDQNConfig)(hidden_sizes=[8]))
    setup(agent)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    sampler = Prioritized(4, PriorityConfig(alpha=1.0))
    rows = batch([1.0, -1.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.0], [0.9, 0.9, 0.81, 0.99])
    rows = rows._replace(observations=torch.randn(4, 2), next_observations=torch.randn(4, 2),
                         weights=torch.tensor([1.0, 0.0, 0.0, 0.0]),
                         priorities=PriorityFeedback(sampler, np.arange(4)))
    loss = float(optim.training_step(agent, rows)["loss"])
    priorities = sampler.tree.values()
    assert (priorities > 0).all() and len(set(priorities.round(6))) == 4
    # only row 0 has weight: the loss is its own priority (its loss, alpha 1) over 4 rows
    assert loss == pytest.approx((priorities[0] - 1e-6) / 4, rel=1e-4)


# ------------------------------------------------------------------ runs


def fit(agent_name: str, run_dir: Path, ckpt_path: str | None = None,
        stop_at: int | None = None, noisy: bool = False) -> None:
    config = (C51Config(hidden_sizes=[16], v_min=0.0, v_max=50.0, dueling=True, noisy=noisy)
              if agent_name == "c51"
              else QRDQNConfig(hidden_sizes=[16], dueling=True, noisy=noisy))
    strategy = OffPolicyStrategy(OffPolicyConfig(
        batch_size=16, warmup_steps=50, num_envs=2, train_interval=10, train_steps=3,
        buffer_size=500, seed=6, n_step=2, prioritized=True))
    fit_stopped("CartPole-v1", (C51 if agent_name == "c51" else QRDQN)(config), strategy,
                run_dir, 300, stop=StopAtGradientStep(stop_at) if stop_at else None,
                ckpt_path=ckpt_path, eval_interval=None)


@pytest.mark.parametrize(("agent_name", "noisy"),
                         [("c51", False), ("qrdqn", False), ("c51", True), ("qrdqn", True)])
def test_a_run_resumes_bit_for_bit(agent_name: str, noisy: bool, tmp_path: Path) -> None:
    """With noisy layers too: their noise is drawn from torch's generator, which checkpoints
    save, before each use."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    fit(agent_name, straight, noisy=noisy)
    fit(agent_name, split, stop_at=50, noisy=noisy)  # mid-round: 3 gradient steps a round
    fit(agent_name, split, ckpt_path="last", noisy=noisy)
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == 300
    assert noisy == any("weight_sigma" in key for key in a["agent"])
    for part in ("agent", "optimization", "buffer", "progress"):
        assert_same_tensors(a[part], b[part], part)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["qrdqn_cartpole", "rainbow_cartpole"])  # rainbow: C51
def test_the_cartpole_presets_learn_in_a_short_run(preset: str, tmp_path: Path) -> None:
    config = compose([preset], ["trainer.num_steps=6000", "trainer.eval_interval=3000",
                                "trainer.eval_episodes=5", f"trainer.run_dir={tmp_path}",
                                "trainer.enable_progress_bar=false",
                                "trainer.enable_console=false", "trainer.logger=false"])
    summary = build(config).fit().summary
    assert summary.best_eval_return is not None and summary.best_eval_return > 100  # random: 22

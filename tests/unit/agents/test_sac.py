"""SAC: the squashed log-probability, the twin-critic target by hand, the temperature, delayed
actor updates, space checks, exact resume and a short learning check."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from rltrain import SAC, OffPolicyConfig, OffPolicyStrategy, OnPolicyStrategy, SACConfig, Trainer
from rltrain.agents.base import SpaceError
from rltrain.agents.nn.networks import SquashedGaussianActor, TwinQ
from rltrain.buffers import ReplayBatch
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import EnvSpec
from rltrain.observe import EventRecorder, TrainStep
from rltrain.optim import Optimization
from rltrain.types import Progress

CPU = torch.device("cpu")
PENDULUM = "Pendulum-v1"


def built(**config: Any) -> SAC:
    agent = SAC(SACConfig(**config))
    env = gym.make(PENDULUM)
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=CPU, progress=Progress())
    return agent


def strategy(**overrides: Any) -> OffPolicyStrategy:
    settings: dict[str, Any] = dict(batch_size=64, warmup_steps=100, train_interval=1,
                                    train_steps=1, buffer_size=10_000, seed=5)
    settings.update(overrides)
    return OffPolicyStrategy(OffPolicyConfig(**settings))


# ------------------------------------------------------------------ the squashed Gaussian


@pytest.mark.parametrize("low, high", [([-1.0], [1.0]), ([-2.0, 0.0, -0.5], [2.0, 1.0, 3.0])])
def test_the_squashed_log_probability_equals_torchs_transformed_distribution(
        low: list[float], high: list[float]) -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(4, len(low), [16], torch.tensor(low), torch.tensor(high))
    obs = torch.randn(256, 4) * 3
    action, log_prob = actor(obs)
    mean, std = actor.distribution(obs)
    reference = TransformedDistribution(Independent(Normal(mean, std), 1),
                                        [TanhTransform(), AffineTransform(actor.bias, actor.scale)])
    # Actions that round to a bound have no finite inverse in float32: compare the rest.
    inside = ((action - actor.bias).abs() < actor.scale * (1 - 1e-5)).all(dim=1)
    assert inside.sum() > 200
    torch.testing.assert_close(log_prob[inside], reference.log_prob(action)[inside],
                               atol=2e-4, rtol=1e-4)
    assert torch.isfinite(log_prob).all()  # the stable form stays finite at the bounds too
    assert ((action >= actor.bias - actor.scale) & (action <= actor.bias + actor.scale)).all()


def test_the_log_std_is_bounded_and_the_mode_is_tanh_of_the_mean() -> None:
    torch.manual_seed(1)
    actor = SquashedGaussianActor(3, 2, [8], torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 3.0]))
    obs = torch.randn(64, 3) * 100  # drive the raw log-std far out
    mean, std = actor.distribution(obs)
    assert (std.log() >= -5.0 - 1e-5).all() and (std.log() <= 2.0 + 1e-5).all()
    torch.testing.assert_close(actor.mode(obs), torch.tanh(mean) * actor.scale + actor.bias)


def test_twin_critics_are_two_independent_networks_in_one_call() -> None:
    torch.manual_seed(2)
    q = TwinQ(3, 1, [8, 8])
    obs, action = torch.randn(5, 3), torch.randn(5, 1)
    out = q(obs, action)
    assert out.shape == (2, 5)
    x = torch.cat([obs, action], dim=1)
    for i, critic in enumerate(q.critics):
        torch.testing.assert_close(out[i], critic(x).squeeze(-1))
    assert not torch.allclose(out[0], out[1])  # initialised apart
    out[0].sum().backward()  # each critic's gradient stays its own
    assert all(p.grad is None or not p.grad.any() for p in q.critics[1].parameters())
    assert any(p.grad is not None and p.grad.any() for p in q.critics[0].parameters())


# ------------------------------------------------------------------ the losses


def constant_critic(critic: TwinQ, values: tuple[float, float]) -> None:
    """Make ``Q_i(s, a) = values[i]`` for every input."""
    with torch.no_grad():
        for net, value in zip(critic.critics, values, strict=True):
            for param in net.parameters():
                param.zero_()
            net[-1].bias.fill_(value)


def test_the_target_uses_the_minimum_of_the_twin_target_critics() -> None:
    # alpha = 0 removes the entropy term: y = r + γ (1 - terminated) min(Q'_1, Q'_2).
    # Q'_1 = 3, Q'_2 = -1 (min -1); Q_1 = 0.5, Q_2 = 2; γ = 0.5.
    #   row 0, ordinary:   r = 1, y = 1 + 0.5 * -1 = 0.5
    #   row 1, truncated:  r = 2, y = 2 + 0.5 * -1 = 1.5   (a time limit still bootstraps)
    #   row 2, terminated: r = 4, y = 4
    # L = mean_rows (0.5 - y)² + mean_rows (2 - y)²
    #   = (0 + 1 + 12.25) / 3 + (2.25 + 0.25 + 4) / 3 = 13.25/3 + 6.5/3 = 6.5833...
    agent = built(alpha=0.0, gamma=0.5, hidden_sizes=[8])
    constant_critic(agent.critic_target, (3.0, -1.0))
    constant_critic(agent.critic, (0.5, 2.0))
    batch = ReplayBatch(observations=torch.randn(3, 3), actions=torch.zeros(3, 1),
                        rewards=torch.tensor([1.0, 2.0, 4.0]),
                        next_observations=torch.randn(3, 3),
                        terminated=torch.tensor([0.0, 0.0, 1.0]),
                        truncated=torch.tensor([0.0, 1.0, 0.0]))
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    metrics = optim.training_step(agent, batch)
    assert float(metrics["critic_loss"]) == pytest.approx(13.25 / 3 + 6.5 / 3, rel=1e-6)
    assert float(metrics["alpha"]) == 0.0 and "alpha_loss" not in metrics


def test_the_entropy_term_enters_the_target_with_the_next_action_log_probability() -> None:
    # With both target critics 0 and Q = 0: y = r - γ α log π(a'|s'), the critic loss is
    # 2 mean(y²); recompute y from the same sample (the same torch seed: the training step
    # draws each sample's two normals at once, the first for a').
    agent = built(alpha=0.3, gamma=0.9, hidden_sizes=[8])
    constant_critic(agent.critic_target, (0.0, 0.0))
    constant_critic(agent.critic, (0.0, 0.0))
    next_obs = torch.randn(4, 3)
    batch = ReplayBatch(torch.randn(4, 3), torch.zeros(4, 1), torch.zeros(4), next_obs,
                        torch.zeros(4), torch.zeros(4))
    torch.manual_seed(9)
    noise = torch.randn(4, 2, 1)
    with torch.no_grad():
        _, next_log_prob = agent.actor(next_obs, noise[:, 0])
    y = -0.9 * 0.3 * next_log_prob
    torch.manual_seed(9)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    metrics = optim.training_step(agent, batch)
    assert float(metrics["critic_loss"]) == pytest.approx(float(2 * y.square().mean()), rel=1e-5)


def test_the_temperature_falls_from_its_start_while_the_entropy_is_above_the_target() -> None:
    agent = built(hidden_sizes=[16], lr=3e-3)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    assert set(optim.optimizers) == {"critic", "actor", "alpha"}
    alphas = []
    for _ in range(50):
        batch = ReplayBatch(torch.randn(32, 3), torch.rand(32, 1) * 4 - 2, torch.randn(32),
                            torch.randn(32, 3), torch.zeros(32), torch.zeros(32))
        metrics = optim.training_step(agent, batch)
        assert float(metrics["entropy"]) > agent.target_entropy  # a wide initial policy
        alphas.append(float(metrics["alpha"]))
    assert alphas[0] == pytest.approx(1.0) and alphas[-1] < 0.9
    assert all(b < a for a, b in itertools.pairwise(alphas))


def test_delayed_actor_updates_step_the_actor_every_policy_delay_gradient_steps() -> None:
    agent = built(policy_delay=3, hidden_sizes=[8])
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    for _ in range(9):
        batch = ReplayBatch(torch.randn(8, 3), torch.zeros(8, 1), torch.randn(8),
                            torch.randn(8, 3), torch.zeros(8), torch.zeros(8))
        optim.training_step(agent, batch)
    steps = {name: int(next(iter(opt.state.values()))["step"])
             for name, opt in optim.optimizers.items()}
    assert steps == {"critic": 9, "actor": 3, "alpha": 3}


def test_a_fixed_temperature_has_no_optimizer_and_stays_fixed() -> None:
    agent = built(alpha=0.2, hidden_sizes=[8])
    optimizers = agent.configure_optimizers()
    assert set(optimizers) == {"critic", "actor"}
    assert float(agent.alpha) == pytest.approx(0.2)


def test_deterministic_actions_are_within_bounds_and_repeatable() -> None:
    agent = built(hidden_sizes=[8])
    policy = agent.policy(CPU)
    obs = torch.randn(16, 3) * 5
    with torch.inference_mode():
        a1 = policy.act(obs, None, True).action
        a2 = policy.act(obs, None, True).action
        sampled = policy.act(obs, None, False).action
    assert torch.equal(a1, a2) and not torch.equal(a1, sampled)
    assert (a1.abs() <= 2.0).all() and (sampled.abs() <= 2.0).all()


# ------------------------------------------------------------------ spaces and schedules


def test_sac_refuses_a_discrete_action_space() -> None:
    with pytest.raises(SpaceError, match=r"needs a continuous \(Box\) action space.*DQN or PPO"):
        SAC().check_spaces(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))


class Unbounded(gym.ActionWrapper[Any, Any, Any]):
    """Pendulum whose action space claims no bounds."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action: Any) -> Any:
        return np.clip(action, -2.0, 2.0)


def test_sac_refuses_an_unbounded_box_before_anything_is_written(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=200, run_dir=tmp_path / "run", **QUIET)
    with pytest.raises(SpaceError, match=r"infinite ones.*TransformAction"):
        trainer.fit(EnvSpec(PENDULUM, wrappers=(Unbounded,)), SAC())
    assert not (tmp_path / "run").exists()


def test_sac_refuses_the_on_policy_strategy_naming_the_fix(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=200, strategy=OnPolicyStrategy(), run_dir=tmp_path / "run",
                      **QUIET)
    with pytest.raises(ValueError, match=r"SAC trains with off_policy strategies, not on_policy"
                                         r".*strategy of kind off_policy"):
        trainer.fit(PENDULUM, SAC())
    assert not (tmp_path / "run").exists()


def test_without_a_strategy_sac_gets_sb3s_schedule(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=150, eval_interval=None, run_dir=tmp_path, seed=2, **QUIET)
    result = trainer.fit(PENDULUM, SAC(SACConfig(hidden_sizes=[8])))
    assert isinstance(trainer.strategy, OffPolicyStrategy)
    assert trainer.strategy.config == OffPolicyConfig(
        seed=2, batch_size=256, warmup_steps=100, train_interval=1, train_steps=1,
        buffer_size=1_000_000)
    # One per env step once the buffer holds the 100 random ones (from env step 100 on).
    assert result.summary.gradient_steps == 51


def test_sac_config_values_are_checked() -> None:
    for bad, message in [(dict(tau=0.0), "tau must be in"), (dict(alpha=-1.0), "alpha must"),
                         (dict(policy_delay=0), "policy_delay")]:
        with pytest.raises(ValueError, match=message):
            SACConfig(**bad)


# ------------------------------------------------------------------ runs


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None,
        callbacks: tuple[Any, ...] = ()) -> tuple[SAC, Trainer]:
    trainer = Trainer(num_steps=num_steps, strategy=strategy(), run_dir=run_dir,
                      eval_interval=300, eval_episodes=2, callbacks=list(callbacks), **QUIET)
    agent = SAC(SACConfig(hidden_sizes=[32, 32], policy_delay=2))
    trainer.fit(PENDULUM, agent, ckpt_path=ckpt_path)
    return agent, trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, 800)
    return {"straight": straight, "split": split}


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "metrics", "progress"])
def test_stop_and_resume_equals_straight_run_bit_for_bit(runs: dict[str, Path],
                                                         part: str) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")
    split = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == 800
    if part == "runner":
        assert env_snapshot(straight["runner"].pop("envs")) == env_snapshot(
            split["runner"].pop("envs"))
    assert_same_tensors(straight[part], split[part], part)
    if part == "optimization":  # the temperature's optimizer is part of it
        assert set(split[part]["optimizers"]) == {"critic", "actor", "alpha"}


def test_a_stop_in_the_middle_resumes_exactly(tmp_path: Path) -> None:
    straight, _ = fit(tmp_path / "straight", 600)

    class StopAt(EventRecorder):
        def on_train_step(self, event: TrainStep, metrics: Any) -> None:
            if event.gradient_steps == 231:
                self.interrupter.stop("test")

    fit(tmp_path / "split", 600, callbacks=(StopAt(),))
    resumed, _ = fit(tmp_path / "split", 600, ckpt_path="last")
    assert_same_tensors(straight.state_dict(), resumed.state_dict(), "agent")


@pytest.mark.slow
def test_sac_learns_pendulum_a_little_within_3000_env_steps(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=3_000, eval_interval=1_000, eval_episodes=5, run_dir=tmp_path,
                      seed=0, num_threads=1, **QUIET)
    agent = SAC(SACConfig(hidden_sizes=[64, 64], lr=1e-3))  # the Pendulum preset's lr
    result = trainer.fit(PENDULUM, agent)
    best = result.summary.best_eval_return
    assert best is not None and best > -900  # a random policy scores about -1,200 to -1,600
    assert float(result.summary.final_metrics["train/alpha"]) < 0.5


@pytest.mark.slow
def test_rltrain_fit_sac_pendulum_from_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "fit", "sac_pendulum", "trainer.num_steps=300",
         "agent.hidden_sizes=[16]", "trainer.eval_interval=null", "trainer.logger=false",
         "trainer.enable_progress_bar=false", f"trainer.run_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    state = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state["agent_class"] == "SAC" and state["progress"]["gradient_steps"] == 201

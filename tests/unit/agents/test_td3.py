"""TD3 and DDPG: the clipped double-Q target with target policy smoothing by hand, delayed actor
and target updates, exploration noise in the env's units, DDPG's settings, space and config
checks, exact resume and a short learning check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed

from rltrain import TD3, OffPolicyConfig, OffPolicyStrategy, TD3Config, Trainer
from rltrain.agents import DDPG, DDPGConfig
from rltrain.agents.base import SpaceError
from rltrain.agents.nn.networks import DeterministicActor, TwinQ
from rltrain.buffers import ReplayBatch
from rltrain.buffers.sampling import Prioritized, PriorityFeedback
from rltrain.checkpoint import read_checkpoint
from rltrain.config.schema import compose
from rltrain.optim import Optimization
from rltrain.settings.replay import PriorityConfig
from rltrain.types import Progress

CPU = torch.device("cpu")
PENDULUM = "Pendulum-v1"  # actions in [-2, 2]: env units are twice the [-1, 1] ones


def built(agent_type: type[TD3] = TD3, **config: Any) -> TD3:
    agent = agent_type(agent_type.config_type(**config))
    env = gym.make(PENDULUM)
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=CPU, progress=Progress())
    return agent


def constant_critic(critic: TwinQ, values: tuple[float, ...]) -> None:
    """Make ``Q_i(s, a) = values[i]`` for every input."""
    with torch.no_grad():
        for net, value in zip(critic.critics, values, strict=True):
            for param in net.parameters():
                param.zero_()
            net[-1].bias.fill_(value)


def batch_of(rows: int, *, rewards: list[float] | None = None,
             terminated: list[float] | None = None) -> ReplayBatch:
    return ReplayBatch(observations=torch.randn(rows, 3), actions=torch.rand(rows, 1) * 4 - 2,
                       rewards=torch.tensor(rewards) if rewards else torch.randn(rows),
                       next_observations=torch.randn(rows, 3),
                       terminated=torch.tensor(terminated) if terminated else torch.zeros(rows),
                       truncated=torch.zeros(rows))


# ------------------------------------------------------------------ networks and losses


def test_the_deterministic_actor_maps_tanh_into_the_bounds_and_back() -> None:
    torch.manual_seed(0)
    actor = DeterministicActor(3, 2, [8], torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]))
    obs = torch.randn(64, 3) * 50
    action = actor(obs)
    assert (action.abs() <= 1).all()
    env_action = actor.to_env(action)
    assert (env_action[:, 0].abs() <= 2).all()
    assert ((env_action[:, 1] >= 0) & (env_action[:, 1] <= 1)).all()
    torch.testing.assert_close(actor.normalized(env_action), action)


def test_the_target_is_the_minimum_of_the_twin_target_critics_at_the_smoothed_action() -> None:
    # Q'_1 = 3, Q'_2 = -1 (min -1), Q_1 = 0.5, Q_2 = 2, γ = 0.5:
    #   row 0: r = 1, y = 1 - 0.5 = 0.5;  row 1 (terminated): r = 4, y = 4
    # L = mean (0.5 - y)² + mean (2 - y)² = (0 + 12.25)/2 + (2.25 + 4)/2 = 9.25
    agent = built(gamma=0.5, hidden_sizes=[8])
    constant_critic(agent.critic_target, (3.0, -1.0))
    constant_critic(agent.critic, (0.5, 2.0))
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    metrics = optim.training_step(agent, batch_of(2, rewards=[1.0, 4.0],
                                                  terminated=[0.0, 1.0]))
    assert float(metrics["critic_loss"]) == pytest.approx(9.25, rel=1e-6)


def test_an_n_step_window_bootstraps_with_its_discount_and_priorities_weight_the_rows() -> None:
    # As above with the rows' own bootstrap factors 0.25 and 0.5 and importance weights 1 and 0:
    #   row 0: y = 1 + 0.25 x -1 = 0.75; row 1 (terminated): y = 4, weight 0
    # L = Σ_i mean_rows w (Q_i - y)² = ((0.5 - 0.75)² + (2 - 0.75)²) / 2 = 0.8125
    agent = built(gamma=0.9, hidden_sizes=[8])
    constant_critic(agent.critic_target, (3.0, -1.0))
    constant_critic(agent.critic, (0.5, 2.0))
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    sampler = Prioritized(2, PriorityConfig(alpha=1.0))
    batch = batch_of(2, rewards=[1.0, 4.0], terminated=[0.0, 1.0])._replace(
        discounts=torch.tensor([0.25, 0.5]), weights=torch.tensor([1.0, 0.0]),
        priorities=PriorityFeedback(sampler, np.arange(2)))
    metrics = optim.training_step(agent, batch)
    assert float(metrics["critic_loss"]) == pytest.approx(0.8125, rel=1e-6)
    # |Q_i - y| averaged over the critics: row 0 (0.25 + 1.25) / 2, row 1 (3.5 + 2) / 2
    np.testing.assert_allclose(sampler.tree.values(), [0.75, 2.75], rtol=1e-5)


def test_target_policy_smoothing_is_clipped_noise_on_the_target_actors_action() -> None:
    # A critic linear in the action, Q'(s, a) = a (both target critics): y = r + γ ã' with
    # ã' = clip(μ'(s') + clip(ε σ̃, -c, c), -1, 1); recompute ã' from the same draw.
    agent = built(gamma=1.0, hidden_sizes=[8], target_policy_noise=0.7, target_noise_clip=0.3)
    constant_critic(agent.critic, (0.0, 0.0))
    with torch.no_grad():
        for net in agent.critic_target.critics:
            for param in net.parameters():
                param.zero_()
            net[0].weight[0, 3] = 1.0  # the first hidden unit is the action (input 3)
            net[-1].weight[0, 0] = 1.0
    batch = batch_of(64, rewards=[0.0] * 64)
    torch.manual_seed(4)
    noise = (torch.randn(64, 1) * 0.7).clamp(-0.3, 0.3)
    with torch.no_grad():
        smoothed = (agent.actor_target(batch.next_observations) + noise).clamp(-1, 1)
    y = torch.relu(smoothed).squeeze(-1)  # the ReLU of the hidden unit
    torch.manual_seed(4)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    metrics = optim.training_step(agent, batch)
    assert float(metrics["critic_loss"]) == pytest.approx(float(2 * y.square().mean()),
                                                          rel=1e-5)
    assert noise.abs().max() == pytest.approx(0.3)  # the clip was reached: it is applied


@pytest.mark.parametrize("agent_type, actor_steps", [(TD3, 4), (DDPG, 9)])
def test_actor_and_targets_update_every_policy_delay_gradient_steps(
        agent_type: type[TD3], actor_steps: int) -> None:
    agent = built(agent_type, hidden_sizes=[8])
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    target_changes = 0
    for _ in range(9):
        before = [p.clone() for p in agent.actor_target.parameters()]
        optim.training_step(agent, batch_of(8))
        target_changes += any(not torch.equal(a, b)
                              for a, b in zip(before, agent.actor_target.parameters(),
                                              strict=True))
    steps = {name: int(next(iter(opt.state.values()))["step"])
             for name, opt in optim.optimizers.items()}
    assert steps == {"critic": 9, "actor": actor_steps}
    assert target_changes == actor_steps  # the targets move with the actor, on steps 2, 4, ...


def test_ddpg_is_td3_with_one_critic_no_smoothing_and_no_delay() -> None:
    config = DDPGConfig()
    assert (config.n_critics, config.policy_delay, config.target_policy_noise) == (1, 1, 0.0)
    agent = built(DDPG, hidden_sizes=[8])
    assert isinstance(agent, TD3) and len(agent.critic.critics) == 1
    assert compose([], ["agent.name=ddpg", "env.id=Pendulum-v1"]).agent.n_critics == 1


def test_exploration_noise_is_in_the_env_units_and_within_the_bounds() -> None:
    # σ = 0.1 of Pendulum's half-range 2: a standard deviation of 0.2 in env units around μ
    agent = built(hidden_sizes=[8], exploration_noise=0.1)
    policy = agent.policy(CPU)
    obs = torch.zeros(20_000, 3)
    with torch.inference_mode():
        greedy = policy.act(obs, None, True).action
        noisy = policy.act(obs, None, False).action
    assert torch.equal(greedy, agent.actor.to_env(agent.actor(obs)))
    assert float(greedy.abs().max()) < 1.0  # far from the bounds: the clip plays no part
    assert float((noisy - greedy).std()) == pytest.approx(0.2, rel=0.05)
    wide = built(hidden_sizes=[8], exploration_noise=5.0).policy(CPU)
    with torch.inference_mode():
        clipped = wide.act(obs, None, False).action
    assert (clipped.abs() <= 2).all() and (clipped.abs() == 2).float().mean() > 0.5
    silent = built(hidden_sizes=[8], exploration_noise=0.0).policy(CPU)
    with torch.inference_mode():
        assert torch.equal(silent.act(obs[:4], None, False).action,
                           silent.act(obs[:4], None, True).action)


# ------------------------------------------------------------------ spaces and settings


def test_td3_refuses_a_discrete_action_space() -> None:
    with pytest.raises(SpaceError, match=r"needs a continuous \(Box\) action space"):
        TD3().check_spaces(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))


def test_td3_refuses_an_unbounded_box() -> None:
    with pytest.raises(SpaceError, match="infinite"):
        TD3().check_spaces(gym.spaces.Box(-1, 1, (3,)),
                           gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))


@pytest.mark.parametrize("bad, message", [
    (dict(tau=0.0), "tau must be in"), (dict(policy_delay=0), "policy_delay"),
    (dict(n_critics=0), "n_critics"), (dict(exploration_noise=-0.1), "a fraction of the action"),
    (dict(target_noise_clip=-1.0), "a fraction of the action"), (dict(lr=0.0), "lr must"),
    (dict(hidden_sizes=[0]), "hidden_sizes")])
def test_td3_config_values_are_checked(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TD3Config(**bad)


def test_without_a_strategy_td3_gets_sb3s_schedule_in_python_and_from_the_cli(
        tmp_path: Path) -> None:
    sb3 = dict(batch_size=256, warmup_steps=100, train_interval=1, train_steps=1,
               buffer_size=1_000_000)
    trainer = Trainer(num_steps=150, eval_interval=None, run_dir=tmp_path, seed=2, **QUIET)
    result = trainer.fit(PENDULUM, TD3(TD3Config(hidden_sizes=[8])))
    assert trainer.strategy.config == OffPolicyConfig(seed=2, **sb3)  # type: ignore[union-attr]
    assert result.summary.gradient_steps == 51
    cli = compose([], ["agent.name=td3", "env.id=MountainCarContinuous-v0"]).strategy
    assert {key: cli[key] for key in sb3} == sb3


# ------------------------------------------------------------------ runs


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> TD3:
    strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=64, warmup_steps=100,
                                                 train_interval=1, train_steps=1,
                                                 buffer_size=10_000, seed=5))
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      eval_interval=300, eval_episodes=2, **QUIET)
    agent = TD3(TD3Config(hidden_sizes=[32, 32]))
    trainer.fit(PENDULUM, agent, ckpt_path=ckpt_path)
    return agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, 700)
    return {"straight": straight, "split": split}


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "metrics", "progress"])
def test_stop_and_resume_equals_straight_run_bit_for_bit(runs: dict[str, Path],
                                                         part: str) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")
    split = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == 700
    if part == "runner":
        assert env_snapshot(straight["runner"].pop("envs")) == env_snapshot(
            split["runner"].pop("envs"))
    assert_same_tensors(straight[part], split[part], part)


@pytest.mark.slow
def test_td3_learns_pendulum_within_6000_env_steps(tmp_path: Path) -> None:
    strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=256, warmup_steps=1_000,
                                                 train_interval=1, train_steps=1, seed=0))
    trainer = Trainer(num_steps=6_000, eval_interval=2_000, eval_episodes=5,
                      run_dir=tmp_path, num_threads=1, strategy=strategy, **QUIET)
    result = trainer.fit(PENDULUM, TD3(TD3Config(hidden_sizes=[64, 64], gamma=0.98)))
    best = result.summary.best_eval_return
    assert best is not None and best > -700  # a random policy scores about -1,200 to -1,600


@pytest.mark.slow
def test_rltrain_fit_td3_pendulum_from_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "fit", "agent.name=td3", "env.id=Pendulum-v1",
         "trainer.num_steps=300", "strategy.warmup_steps=100", "agent.hidden_sizes=[16]",
         "trainer.eval_interval=null", "trainer.logger=false",
         "trainer.enable_progress_bar=false", f"trainer.run_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "starting from the preset td3_pendulum" in done.stderr + done.stdout
    state = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state["agent_class"] == "TD3" and state["progress"]["gradient_steps"] == 201

"""Gradient steps against Stable-Baselines3's own: from the same weights, on the same replayed
batches and the same target-smoothing noise, rltrain's TD3 and DDPG leave every network (online
and target) where SB3's ``train`` leaves it, step after step; on the same rollout minibatches,
PPO's update leaves the policy and value networks where SB3's does. The reference is SB3's code
itself, so a difference in a loss, the order of updates, the delay, the Polyak average, the
advantage normalisation or the gradient clip fails here."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch
from torch import nn

from rltrain import PPO, PPOConfig
from rltrain.agents import DDPG, TD3
from rltrain.buffers import ReplayBatch
from rltrain.buffers.rollout import RolloutBatch
from rltrain.optim import Optimization
from rltrain.types import Progress

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common.logger import configure  # noqa: E402
from stable_baselines3.common.type_aliases import (  # noqa: E402
    ReplayBufferSamples,
    RolloutBufferSamples,
)

CPU = torch.device("cpu")
PENDULUM = "Pendulum-v1"  # actions in [-2, 2]: SB3's replay holds them rescaled to [-1, 1]
HIDDEN = [16, 16]


def linear_layers(net: nn.Module) -> list[nn.Linear]:
    return [m for m in net.modules() if isinstance(m, nn.Linear)]


def copy_weights(source: nn.Module, target: nn.Module) -> None:
    """Copy ``source``'s linear layers into ``target``'s, in order."""
    pairs = zip(linear_layers(source), linear_layers(target), strict=True)
    with torch.no_grad():
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)


def assert_same_weights(ours: nn.Module, theirs: nn.Module, what: str) -> None:
    for i, (a, b) in enumerate(zip(linear_layers(ours), linear_layers(theirs), strict=True)):
        torch.testing.assert_close(a.weight, b.weight, msg=lambda m, i=i: f"{what} {i}: {m}")
        torch.testing.assert_close(a.bias, b.bias, msg=lambda m, i=i: f"{what} {i}: {m}")


def pair(kind: str) -> tuple[TD3, Any]:
    """rltrain's agent and SB3's model of the same kind and settings, SB3 holding rltrain's
    weights."""
    agent_type, sb3_type = {"td3": (TD3, sb3.TD3), "ddpg": (DDPG, sb3.DDPG)}[kind]
    env = gym.make(PENDULUM)
    agent = agent_type(agent_type.config_type(hidden_sizes=HIDDEN, lr=3e-3, tau=0.05))
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=CPU, progress=Progress())
    c = agent.config
    model = sb3_type("MlpPolicy", env, learning_rate=c.lr, tau=c.tau, gamma=c.gamma,
                     policy_kwargs=dict(net_arch=HIDDEN), device="cpu", seed=0,
                     **({"policy_delay": c.policy_delay, "target_policy_noise":
                         c.target_policy_noise, "target_noise_clip": c.target_noise_clip}
                        if kind == "td3" else {}))
    model.set_logger(configure(None, []))
    copy_weights(agent.actor, model.actor)
    copy_weights(agent.actor_target, model.actor_target)
    for ours, theirs in ((agent.critic, model.critic), (agent.critic_target, model.critic_target)):
        copy_weights(ours, theirs)
    return agent, model


def replayed(rows: int, seed: int) -> ReplayBatch:
    g = torch.Generator().manual_seed(seed)
    return ReplayBatch(observations=torch.randn(rows, 3, generator=g),
                       actions=torch.rand(rows, 1, generator=g) * 4 - 2,
                       rewards=torch.randn(rows, generator=g),
                       next_observations=torch.randn(rows, 3, generator=g),
                       terminated=(torch.rand(rows, generator=g) < 0.2).float(),
                       truncated=torch.zeros(rows))


def as_sb3(batch: ReplayBatch) -> ReplayBufferSamples:
    return ReplayBufferSamples(observations=batch.observations, actions=batch.actions / 2.0,
                               next_observations=batch.next_observations,
                               dones=batch.terminated[:, None], rewards=batch.rewards[:, None])


@pytest.mark.parametrize("kind", ["td3", "ddpg"])
def test_each_gradient_step_leaves_the_networks_where_sb3s_train_does(kind: str) -> None:
    agent, model = pair(kind)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    for step in range(6):
        batch = replayed(32, seed=step)
        model.replay_buffer.sample = lambda *_, batch=batch, **__: as_sb3(batch)  # its batch
        torch.manual_seed(100 + step)  # the same target-smoothing noise on both sides
        model.train(gradient_steps=1, batch_size=32)
        torch.manual_seed(100 + step)
        optim.training_step(agent, batch)
        assert_same_weights(agent.critic, model.critic, f"step {step + 1}: critic layer")
        assert_same_weights(agent.actor, model.actor, f"step {step + 1}: actor layer")
        assert_same_weights(agent.critic_target, model.critic_target,
                            f"step {step + 1}: target critic layer")
        assert_same_weights(agent.actor_target, model.actor_target,
                            f"step {step + 1}: target actor layer")


def ppo_pair(**settings: Any) -> tuple[PPO, Any]:
    """rltrain's PPO and SB3's on CartPole with the same settings (separate 8x8 tanh policy
    and value networks), SB3 holding rltrain's weights."""
    env = gym.make("CartPole-v1")
    agent = PPO(PPOConfig(hidden_sizes=[8, 8], shared_trunk=False, **settings))
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=CPU, progress=Progress())
    c = agent.config
    model = sb3.PPO("MlpPolicy", env, learning_rate=c.lr, n_epochs=1, batch_size=64,
                    clip_range=c.clip_range, clip_range_vf=c.clip_range_vf,
                    ent_coef=c.ent_coef, vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm,
                    normalize_advantage=c.normalize_advantage, device="cpu", seed=0,
                    policy_kwargs=dict(net_arch=dict(pi=[8, 8], vf=[8, 8])))
    model.set_logger(configure(None, []))
    with torch.no_grad():  # the same layers in the same order on both sides
        for ours, theirs in zip(agent.net.parameters(), model.policy.parameters(), strict=True):
            theirs.copy_(ours)
    return agent, model


def rollout_batch(rows: int, seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    return RolloutBatch(observations=torch.randn(rows, 4, generator=g),
                        actions=torch.randint(0, 2, (rows,), generator=g),
                        log_probs=-torch.rand(rows, generator=g) - 0.3,
                        values=torch.randn(rows, generator=g),
                        advantages=torch.randn(rows, generator=g) * 2 + 0.5,
                        returns=torch.randn(rows, generator=g) * 3)


def as_sb3_rollout(batch: RolloutBatch) -> RolloutBufferSamples:
    return RolloutBufferSamples(observations=batch.observations, actions=batch.actions[:, None],
                                old_values=batch.values, old_log_prob=batch.log_probs,
                                advantages=batch.advantages, returns=batch.returns)


@pytest.mark.parametrize("settings", [
    dict(), dict(ent_coef=0.01, vf_coef=0.25, clip_range=0.1, max_grad_norm=0.2),
    dict(normalize_advantage=False)])
def test_each_ppo_minibatch_step_leaves_the_networks_where_sb3s_train_does(
        settings: dict[str, Any]) -> None:
    agent, model = ppo_pair(**settings)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    for step in range(4):
        batch = rollout_batch(64, seed=step)
        model.rollout_buffer.get = lambda *_, batch=batch: iter([as_sb3_rollout(batch)])
        model.train()
        optim.training_step(agent, batch)
        for i, (ours, theirs) in enumerate(zip(agent.net.parameters(), model.policy.parameters(),
                                               strict=True)):
            where = f"step {step + 1}, parameter {i}"
            torch.testing.assert_close(ours, theirs, msg=lambda m, where=where: f"{where}: {m}")

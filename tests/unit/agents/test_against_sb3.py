"""Gradient steps against Stable-Baselines3's own: from the same weights, on the same replayed
batches and the same target-smoothing noise, rltrain's TD3 and DDPG leave every network (online
and target) where SB3's ``train`` leaves it, step after step. The reference is SB3's code itself,
so a difference in the loss, the order of updates, the delay or the Polyak average fails here."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch
from torch import nn

from rltrain.agents import DDPG, TD3
from rltrain.buffers import ReplayBatch
from rltrain.optim import Optimization
from rltrain.types import Progress

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common.logger import configure  # noqa: E402
from stable_baselines3.common.type_aliases import ReplayBufferSamples  # noqa: E402

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

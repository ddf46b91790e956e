"""PQN: parallelised Q-learning without a replay buffer or target network (Gallici et al.
2024, "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811; CleanRL's ``pqn.py``).

Many vector envs collect a short rollout epsilon-greedily; the Q-network, with a LayerNorm
after each hidden layer (what keeps TD learning stable without a target network, Section 4),
regresses ``Q(s_t, a_t)`` on Peng's Q(λ) returns computed over the rollout from its own greedy
values (Eq. 11):

    R_t = r_t + γ (1 - terminated_t) [λ R_{t+1} + (1 - λ) max_a Q(s_{t+1}, a)]

with ``R_t = r_t + γ max_a Q(s_{t+1}, a)`` at the rollout's end and at a time limit (from the
true final observation). Trained by the on-policy loop: epochs of shuffled minibatches of each
rollout, then the rollout is dropped. Action masks (a ``Dict`` observation's ``action_mask``)
restrict acting and every max to the valid actions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import override

from rltrain.agents.base import Policy, SpaceError
from rltrain.agents.dqn import linear_schedule
from rltrain.agents.kinds import RolloutAgent
from rltrain.agents.nn.encoders import check_observation_space, make_encoder
from rltrain.agents.nn.masking import (
    action_mask,
    check_mask_space,
    epsilon_greedy,
    masked_values,
)
from rltrain.agents.nn.networks import QNetwork
from rltrain.agents.nn.observation_spaces import encoder_setting
from rltrain.agents.returns import gae
from rltrain.buffers.observations import map_obs
from rltrain.buffers.rollout import RolloutBatch, RolloutBuffer
from rltrain.optim import Optimization
from rltrain.settings.base import Settings, discount_factor, learning_rate, setting, widths
from rltrain.settings.loops import OnPolicyConfig
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep


@dataclass
class PQNConfig(Settings):
    """PQN's hyperparameters (defaults: CleanRL's ``pqn.py``, for CartPole-v1).

    Attributes:
        hidden_sizes: Q-network hidden layer widths, each followed by a LayerNorm. Default
            [120, 84].
        lr: RAdam learning rate. Default 2.5e-4.
        anneal_lr: Anneal the learning rate linearly to 0 over ``trainer.num_steps``. Default
            True.
        gamma: Discount factor. Default 0.99.
        q_lambda: λ of the Q(λ) returns. Default 0.65.
        epsilon_start: Exploration rate at env step 0. Default 1.0.
        epsilon_end: Exploration rate after ``exploration_fraction`` of the run. Default 0.05.
        exploration_fraction: Fraction of ``trainer.num_steps`` over which epsilon decays
            linearly. Default 0.5.
        max_grad_norm: Clip the gradients' global 2-norm to this. Default 10.0.
        layer_norm: A LayerNorm after each hidden layer (the paper's). Default True.
        normalize_images: Scale image pixels to [0, 1] in the CNN encoder. Default True.
        encoder: ``"auto"``, ``"mlp"`` or ``"cnn"`` (docs/encoders.md). Default ``"auto"``.
    """

    hidden_sizes: list[int] = widths(120, 84)
    lr: float = learning_rate(2.5e-4)
    anneal_lr: bool = True
    gamma: float = discount_factor()
    q_lambda: float = discount_factor(0.65)
    epsilon_start: float = setting(1.0, ge=0, le=1)
    epsilon_end: float = setting(0.05, ge=0, le=1)
    exploration_fraction: float = setting(0.5, ge=0, le=1)
    max_grad_norm: float = setting(10.0, gt=0)
    layer_norm: bool = True
    normalize_images: bool = True
    encoder: str = encoder_setting()


class PQNPolicy(Policy):
    """Epsilon-greedy over the valid actions while collecting, returning ``max_a Q(s, a)`` as
    the step's ``value`` (and a log-probability of 0: the rollout's contract); greedy when
    ``deterministic``."""

    def __init__(self, q_network: nn.Module, num_actions: int,
                 epsilon: Any) -> None:
        super().__init__()
        self.q_network, self.num_actions, self.epsilon = q_network, num_actions, epsilon

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        mask = action_mask(obs)
        q = masked_values(self.q_network(obs), mask)
        value, greedy = q.max(dim=1)
        if deterministic:
            return PolicyStep(greedy, None, {})
        return PolicyStep(epsilon_greedy(greedy, mask, self.epsilon(), self.num_actions), None,
                          {"value": value, "log_prob": torch.zeros_like(value)})


@register_agent("pqn", PQNConfig,
                "parallelised Q-learning with Q(lambda) returns, no replay; discrete actions")
class PQN(RolloutAgent):
    """PQN for discrete actions, trained by the on-policy loop (module docstring).

    Args:
        config: Hyperparameters. Default: :class:`PQNConfig` ().
    """

    q_network: QNetwork

    def __init__(self, config: PQNConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else PQNConfig()
        self.num_actions = 0

    @override
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise SpaceError(f"PQN needs a Discrete action space; got {action_space}. Use PPO "
                             "or SAC for continuous actions.")
        check_observation_space("PQN", observation_space, self.config.encoder)
        check_mask_space("PQN", observation_space, action_space)

    @override
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        assert isinstance(action_space, gym.spaces.Discrete)
        c = self.config
        self.num_actions = int(action_space.n)
        encoder = make_encoder(observation_space, normalize_images=c.normalize_images,
                               encoder=c.encoder)
        self.q_network = QNetwork(encoder, self.num_actions, c.hidden_sizes,
                                  layer_norm=c.layer_norm)
        for module in self.q_network.modules():  # CleanRL's layer_init: orthogonal, gain √2
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, math.sqrt(2))
                nn.init.zeros_(module.bias)

    @override
    def default_strategy_settings(self) -> OnPolicyConfig:
        """CleanRL's: 4 envs, rollouts of 128 steps, 4 epochs of 4 minibatches."""
        return OnPolicyConfig(num_envs=4, n_steps=128, batch_size=128, update_epochs=4)

    @property
    def epsilon(self) -> float:
        """The exploration rate at the current env step."""
        c = self.config
        duration = int(c.exploration_fraction * self.num_steps)
        return linear_schedule(c.epsilon_start, c.epsilon_end, duration,
                               self.progress.env_steps)

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        # foreach: one kernel per step for all the parameters (on a CPU torch's default is a
        # loop over them, 665 against 386 us a step for CartPole's network).
        self.optimizer = torch.optim.RAdam(self.q_network.parameters(), lr=self.config.lr,
                                           foreach=True)
        return {"q": self.optimizer}

    @override
    def policy(self, device: torch.device) -> PQNPolicy:
        q_network: nn.Module = self.q_network
        if torch.device(device) != self.device:
            q_network = copy.deepcopy(q_network).to(device)
        return PQNPolicy(q_network, self.num_actions, epsilon=lambda: self.epsilon)

    def greedy_value(self, obs: ObsTensors) -> torch.Tensor:
        """``max_a Q(s, a)`` over the valid actions, ``[B]``."""
        obs = map_obs(lambda t: t.to(self.device), obs)
        return masked_values(self.q_network(obs), action_mask(obs)).max(dim=1).values

    @torch.no_grad()
    def prepare_rollout(self, rollout: RolloutBuffer) -> None:
        """The Q(λ) returns (module docstring), as GAE(λ) over the greedy values plus those
        values (the same recursion), and the learning rate for this update."""
        c = self.config
        values = rollout.values.to(self.device)
        next_values = torch.cat([values[1:], self.greedy_value(rollout.last_observations)[None]])
        truncated = rollout.truncated.to(self.device)
        if truncated.any():  # a time limit: bootstrap from the true final observation
            rows = truncated.cpu()
            final = map_obs(lambda t: t[rows], rollout.final_observations)
            next_values[truncated] = self.greedy_value(final)
        advantages = gae(rollout.rewards.to(self.device), values, next_values,
                         rollout.terminated.to(self.device), truncated, c.gamma, c.q_lambda)
        rollout.advantages.copy_(advantages)
        rollout.returns.copy_(advantages + values)
        if c.anneal_lr and self.num_steps:
            start = self.progress.env_steps - self.statistics.total(rollout.num_transitions)
            for group in self.optimizer.param_groups:
                group["lr"] = c.lr * max(0.0, 1.0 - start / self.num_steps)

    @override
    def training_step(self, batch: RolloutBatch, optim: Optimization) -> dict[str, MetricValue]:
        q = self.q_network(batch.observations)
        q_taken = q.gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
        loss = F.mse_loss(q_taken, batch.returns)  # (Q(s_t, a_t) - R_t^λ)²
        optim.step("q", loss, max_norm=self.config.max_grad_norm)
        return {"loss": loss.detach(), "q_value": q_taken.detach().mean(),
                "epsilon": self.epsilon,
                "learning_rate": float(self.optimizer.param_groups[0]["lr"])}

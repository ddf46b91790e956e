"""C51: distributional DQN over a fixed support of atoms (Bellemare, Dabney and Munos 2017,
"A Distributional Perspective on Reinforcement Learning", arXiv:1707.06887).

The Q-network outputs, per action, logits over ``n_atoms`` returns ``z_i`` evenly spaced on
``[v_min, v_max]``; ``Q(s, a) = sum_i z_i p_i(s, a)``. The target distribution is the next
state's (the target network's, at the greedy next action) shifted by the reward and shrunk by
the discount, ``Tz = r + gamma^k (1 - terminated) z``, projected back onto the support
(Algorithm 1); the loss is its cross-entropy with the predicted one. Everything else is
:class:`~rltrain.agents.dqn.DQN`'s: epsilon-greedy on ``Q``, target updates, double Q (the
online network picks the next action), dueling (per atom), n-step windows and prioritized
replay (the cross-entropy as the priority, as in Rainbow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from typing_extensions import override

from rltrain.agents.dqn import DQN, DQNConfig
from rltrain.agents.nn.masking import action_mask, masked_values
from rltrain.agents.nn.noisy import reset_noise
from rltrain.agents.replay_terms import discount, send_td_errors, weighted
from rltrain.buffers.replay import ReplayBatch
from rltrain.optim import Optimization
from rltrain.runtime.cadence import is_multiple
from rltrain.settings.base import learning_rate, setting
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue


@dataclass
class C51Config(DQNConfig):
    """C51's hyperparameters: :class:`~rltrain.agents.dqn.DQNConfig`'s (its defaults,
    Stable-Baselines3's DQN), the paper's optimizer and the support (tuned values are in the
    presets, ``configs/c51_cartpole.yaml``).

    Attributes:
        lr: Adam learning rate. Default 2.5e-4 (the paper's).
        adam_eps: Adam's epsilon. Default 0.01 / 32 (the paper's, for its batch of 32).
        n_atoms: Atoms of the support. Default 51 (the paper's).
        v_min: The smallest return the support holds. Default -10.0 (the paper's Atari value;
            CartPole's returns reach 100 undiscounted: the ``c51_cartpole`` preset widens it).
        v_max: The largest. Default 10.0.
    """

    n_atoms: int = setting(51, ge=2)
    lr: float = learning_rate(2.5e-4)
    adam_eps: float = 0.01 / 32
    v_min: float = -10.0
    v_max: float = 10.0

    @override
    def rules(self) -> list[tuple[bool, str]]:
        return [(self.v_min < self.v_max,
                 f"v_min ({self.v_min}) must be below v_max ({self.v_max}).")]


class ExpectedValue(nn.Module):
    """``Q(s, a) = sum_i z_i softmax(logits)_i``: what the acting policy maximises."""

    def __init__(self, network: nn.Module, support: torch.Tensor) -> None:
        super().__init__()
        self.network = network
        self.register_buffer("support", support)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, ``[batch, actions]``."""
        q: torch.Tensor = (self.network(obs).softmax(dim=-1) * self.support).sum(dim=-1)
        return q


@register_agent("c51", C51Config,
                "categorical distributional DQN (double Q, dueling, n-step, PER); discrete")
class C51(DQN):
    """Categorical distributional DQN for discrete actions (module docstring).

    Args:
        config: Hyperparameters. Default: :class:`C51Config` ().
    """

    config: C51Config

    def __init__(self, config: C51Config | None = None) -> None:
        super().__init__(config if config is not None else C51Config())

    @property
    @override
    def atoms(self) -> int:
        return self.config.n_atoms

    @property
    def support(self) -> torch.Tensor:
        """The atoms ``z_i``, ``[n_atoms]``, on the agent's device."""
        c = self.config
        return torch.linspace(c.v_min, c.v_max, c.n_atoms, device=self.device)

    @override
    def q_values(self, network: nn.Module) -> nn.Module:
        return ExpectedValue(network, self.support.to(next(network.parameters()).device))

    @override
    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        reset_noise(self.noisy_layers)  # one draw per network for the step (noisy layers)
        z = self.support
        with torch.no_grad():
            next_probs = self.target_network(batch.next_observations).softmax(dim=-1)
            chooser = (self.q_network(batch.next_observations).softmax(dim=-1) if c.double_q
                       else next_probs)
            valid = action_mask(batch.next_observations)
            # a* = argmax_a Q(s', a) over the valid actions
            next_action = masked_values((chooser * z).sum(dim=-1), valid).argmax(dim=1)
            p_next = next_probs[torch.arange(len(next_action)), next_action]  # [B, atoms]
            target = self.project(batch, p_next)
        logits = self.q_network(batch.observations)
        log_p = logits[torch.arange(len(batch.actions)), batch.actions.long()].log_softmax(-1)
        cross_entropy = -(target * log_p).sum(dim=-1)  # -sum_i m_i log p_i(s, a)
        loss = weighted(cross_entropy, batch)
        optim.step("q", loss)
        send_td_errors(batch, cross_entropy)
        if is_multiple(optim.gradient_step, c.target_update_interval):
            self._update_target()
        q_taken = (log_p.detach().exp() * z).sum(dim=-1)
        return {"loss": loss.detach(), "q_value": q_taken.mean(), "epsilon": self.epsilon}

    def project(self, batch: ReplayBatch, p_next: torch.Tensor) -> torch.Tensor:
        """Algorithm 1: ``Tz_j = r + gamma^k (1 - terminated) z_j`` clipped to the support,
        each ``p_j`` split between the two atoms around ``Tz_j`` in proportion to its
        distance to each; returns the target probabilities ``m``, ``[batch, n_atoms]``."""
        c = self.config
        z = self.support
        delta = (c.v_max - c.v_min) / (c.n_atoms - 1)
        scale = discount(batch, c.gamma) * (1.0 - batch.terminated)
        tz = (batch.rewards[:, None] + scale[:, None] * z).clamp(c.v_min, c.v_max)
        b = (tz - c.v_min) / delta  # fractional atom index, in [0, n_atoms - 1]
        lower, upper = b.floor().long(), b.ceil().long()
        # an exact atom (lower == upper) gives it all of p_j
        m = torch.zeros_like(p_next)
        m.scatter_add_(1, lower, p_next * (upper.float() - b + (lower == upper).float()))
        m.scatter_add_(1, upper, p_next * (b - lower.float()))
        return m

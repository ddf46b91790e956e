"""QR-DQN: distributional DQN by quantile regression (Dabney, Rowland, Bellemare and Munos
2018, "Distributional Reinforcement Learning with Quantile Regression", arXiv:1710.10044).

The Q-network outputs, per action, ``n_quantiles`` values ``theta_i(s, a)``: the return
distribution's quantiles at the midpoints ``tau_i = (2i + 1) / 2N``; ``Q(s, a) = mean_i
theta_i``. Each target quantile is ``T theta_j = r + gamma^k (1 - terminated) theta'_j(s',
a*)`` (the target network's, at the greedy next action), and the loss is the quantile Huber
loss (Eq. 10) summed over the predicted quantiles and averaged over the target ones. The rest is
:class:`~rltrain.agents.dqn.DQN`'s: epsilon-greedy on ``Q``, target updates, double Q (the
online network picks ``a*``), dueling (per quantile), n-step windows and prioritized replay
(each transition's loss as its priority).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
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
class QRDQNConfig(DQNConfig):
    """QR-DQN's hyperparameters: :class:`~rltrain.agents.dqn.DQNConfig`'s, with sb3-contrib's
    QR-DQN defaults where they differ, and the quantiles (tuned values are in the presets,
    ``configs/qrdqn_cartpole.yaml``).

    Attributes:
        n_quantiles: Quantiles per action. Default 200 (the paper's and sb3-contrib's).
        kappa: The quantile Huber loss's threshold κ (Eq. 10). Default 1.0.
        lr: Adam learning rate. Default 5e-5 (sb3-contrib's).
        adam_eps: Adam's epsilon. Default 0.01 / 32 (the paper's, for its batch of 32;
            sb3-contrib uses 0.01 / batch size).
        epsilon_end: Exploration rate after ``exploration_steps``. Default 0.01
            (sb3-contrib's; it decays over 0.5% of the run, :attr:`QRDQN.exploration_fraction`).
    """

    n_quantiles: int = setting(200, ge=1)
    kappa: float = setting(1.0, gt=0)
    lr: float = learning_rate(5e-5)
    adam_eps: float = 0.01 / 32
    epsilon_end: float = setting(0.01, ge=0, le=1)


class QuantileMean(nn.Module):
    """``Q(s, a) = mean_i theta_i(s, a)``: what the acting policy maximises."""

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, ``[batch, actions]``."""
        return self.network(obs).mean(dim=-1)  # type: ignore[no-any-return]


def quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor,
                        kappa: float) -> torch.Tensor:
    """Eq. 10 per transition: ``sum_i mean_j |tau_i - 1{u_ij < 0}| L_kappa(u_ij) / kappa`` with
    ``u_ij = targets_j - quantiles_i``; ``quantiles`` and ``targets`` are ``[batch, N]``;
    returns ``[batch]``."""
    n = quantiles.shape[1]
    tau = (torch.arange(n, device=quantiles.device, dtype=quantiles.dtype) + 0.5) / n
    u = targets[:, None, :] - quantiles[:, :, None]  # [batch, i, j]
    huber = F.huber_loss(quantiles[:, :, None].expand_as(u), targets[:, None, :].expand_as(u),
                         reduction="none", delta=kappa)
    weight = (tau[None, :, None] - (u.detach() < 0).to(u.dtype)).abs()
    return (weight * huber / kappa).mean(dim=2).sum(dim=1)


@register_agent("qrdqn", QRDQNConfig,
                "quantile-regression distributional DQN (double Q, dueling, n-step, PER)")
class QRDQN(DQN):
    """Distributional DQN by quantile regression, for discrete actions (module docstring).

    Args:
        config: Hyperparameters. Default: :class:`QRDQNConfig` ().
    """

    config: QRDQNConfig
    exploration_fraction = 0.005  # sb3-contrib's

    def __init__(self, config: QRDQNConfig | None = None) -> None:
        super().__init__(config if config is not None else QRDQNConfig())

    @property
    @override
    def atoms(self) -> int:
        return self.config.n_quantiles

    @override
    def q_values(self, network: nn.Module) -> nn.Module:
        return QuantileMean(network)

    @override
    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        reset_noise(self.noisy_layers)  # one draw per network for the step (noisy layers)
        with torch.no_grad():
            next_quantiles = self.target_network(batch.next_observations)  # [B, A, N]
            chooser = self.q_network(batch.next_observations) if c.double_q else next_quantiles
            valid = action_mask(batch.next_observations)
            # a* = argmax_a Q(s', a) over the valid actions
            next_action = masked_values(chooser.mean(dim=-1), valid).argmax(dim=1)
            theta_next = next_quantiles[torch.arange(len(next_action)), next_action]
            scale = discount(batch, c.gamma) * (1.0 - batch.terminated)
            targets = batch.rewards[:, None] + scale[:, None] * theta_next  # T theta_j
        quantiles = self.q_network(batch.observations)
        theta = quantiles[torch.arange(len(batch.actions)), batch.actions.long()]  # [B, N]
        losses = quantile_huber_loss(theta, targets, c.kappa)
        loss = weighted(losses, batch)
        optim.step("q", loss)
        send_td_errors(batch, losses)
        if is_multiple(optim.gradient_step, c.target_update_interval):
            self._update_target()
        return {"loss": loss.detach(), "q_value": theta.detach().mean(),
                "epsilon": self.epsilon}

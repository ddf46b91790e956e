"""Network building blocks shared by agents."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int,
        activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """A multilayer perceptron: Linear + activation per hidden size, then a Linear output."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [nn.Linear(in_features, size), activation()]
        in_features = size
    layers.append(nn.Linear(in_features, out_features))
    return nn.Sequential(*layers)


class QNetwork(nn.Module):
    """State-action values ``Q(s, ·)`` for a discrete action space.

    Args:
        obs_dim: Flattened observation size.
        num_actions: Number of discrete actions.
        hidden_sizes: Hidden layer widths. The dueling head splits after the last one.
        dueling: Use the dueling head ``Q = V + A - mean(A)`` (Wang et al. 2016,
            arXiv:1511.06581, Eq. 9).
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: Sequence[int],
                 *, dueling: bool = False) -> None:
        super().__init__()
        self.dueling = dueling
        if dueling:
            if not hidden_sizes:
                raise ValueError("A dueling Q-network needs at least one hidden layer.")
            self.torso = mlp(obs_dim, hidden_sizes[:-1], hidden_sizes[-1])
            self.value = nn.Sequential(nn.ReLU(), nn.Linear(hidden_sizes[-1], 1))
            self.advantage = nn.Sequential(nn.ReLU(), nn.Linear(hidden_sizes[-1], num_actions))
        else:
            self.q = mlp(obs_dim, hidden_sizes, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, shape ``[batch, num_actions]``."""
        obs = obs.flatten(1)
        if not self.dueling:
            return self.q(obs)  # type: ignore[no-any-return]
        features = self.torso(obs)
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)  # type: ignore[no-any-return]


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak-average ``online``'s parameters into ``target``'s: ``θ' ← τθ + (1-τ)θ'``;
    ``tau >= 1`` copies them exactly (a hard update)."""
    for target_param, param in zip(target.parameters(), online.parameters(), strict=True):
        if tau >= 1.0:
            target_param.copy_(param)
        else:
            target_param.lerp_(param, tau)

"""Noisy linear layers (Fortunato et al. 2018, "Noisy Networks for Exploration",
arXiv:1706.10295): exploration by learned noise on a Q-network's weights, Rainbow's in place of
epsilon-greedy."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn


class NoisyLinear(nn.Module):
    """A linear layer whose weights and biases carry factorised Gaussian noise of learned scale
    (Eq. 10-11): ``y = (μ_w + σ_w ⊙ f(ε_out) f(ε_in)ᵀ) x + μ_b + σ_b ⊙ f(ε_out)``, with
    ``f(x) = sgn(x) √|x|`` and ``ε`` standard normal.

    The noise is drawn by :meth:`reset_noise` (from torch's generator of the layer's device,
    which checkpoints save), not at each forward: the agent draws it once per acting step and
    once per gradient step, for every forward pass of that step. With ``noisy`` False the
    layer is its means alone (greedy evaluation and export). The noise is not saved in
    checkpoints: it is drawn again before each use.

    Args:
        in_features: Inputs ``p``.
        out_features: Outputs ``q``.
        sigma0: Initial noise scale: every ``σ`` starts at ``sigma0 / √p``. Default 0.5 (the
            paper's for factorised noise). The means start uniform in ``±1 / √p``.
    """

    epsilon_in: torch.Tensor
    epsilon_out: torch.Tensor

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("epsilon_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("epsilon_out", torch.zeros(out_features), persistent=False)
        #: Whether the forward adds the noise (False: the means alone).
        self.noisy = True
        bound = 1.0 / math.sqrt(in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(sigma0 * bound)
            self.bias_sigma.fill_(sigma0 * bound)

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new ``ε_in`` and ``ε_out`` (``p + q`` normal draws)."""
        self.epsilon_in.copy_(_scaled(torch.randn(self.in_features,
                                                  device=self.epsilon_in.device)))
        self.epsilon_out.copy_(_scaled(torch.randn(self.out_features,
                                                   device=self.epsilon_out.device)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.noisy:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.epsilon_out,
                                                                  self.epsilon_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.epsilon_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def _scaled(x: torch.Tensor) -> torch.Tensor:
    """``f(x) = sgn(x) √|x|``."""
    return x.sign() * x.abs().sqrt()


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    """The noisy layers in ``module`` (none for a network without noise)."""
    return [layer for layer in module.modules() if isinstance(layer, NoisyLinear)]


def reset_noise(layers: Sequence[NoisyLinear]) -> None:
    """New noise in each layer."""
    for layer in layers:
        layer.reset_noise()


@contextlib.contextmanager
def means_only(layers: Sequence[NoisyLinear]) -> Iterator[None]:
    """The layers without their noise for the block (greedy acting)."""
    for layer in layers:
        layer.noisy = False
    try:
        yield
    finally:
        for layer in layers:
            layer.noisy = True

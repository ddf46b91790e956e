"""Action distributions for stochastic policies, one per Gymnasium action space.

:class:`ActionHead` maps a space to how many outputs the policy network
needs and the distribution those outputs parameterise. Every distribution offers ``sample``,
``mode`` (the deterministic action), ``log_prob`` and ``entropy`` per batch row, summed over
the action's components. torch's argument validation is off: it costs more than the forward
pass of a small policy, and the networks' outputs are checked for NaN elsewhere (the loss).
"""

# torch.distributions is untyped: its calls return Any here.
# mypy: disable-error-code="no-untyped-call,no-any-return"
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Bernoulli, Categorical, Normal

#: A ``log_std_init`` beyond ±this makes a standard deviation whose log-probabilities and
#: ratios overflow float32 (the first update's loss is then NaN).
LOG_STD_LIMIT = 20.0


def rejected_parameters(owner: str, error: ValueError, settings: str) -> FloatingPointError:
    """The error to raise when a torch distribution's argument check refuses the parameters
    ``owner``'s network gave it (``error``): its outputs are not finite, so its weights or
    inputs are not; ``settings`` names what to change."""
    detail = " ".join(str(error).split())
    detail = detail if len(detail) <= 300 else detail[:297] + "..."
    return FloatingPointError(
        f"The action distribution of {owner} refused its parameters ({detail}): the network's "
        f"outputs are not finite, so its weights (a gradient step overflowed) or its inputs "
        f"are not. {settings}")


class ActionDistribution:
    """A batch of action distributions (a thin, uniform face over torch's)."""

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def mode(self) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError


class CategoricalActions(ActionDistribution):
    """``Discrete``: one categorical per row; actions are indices ``[B]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.dist = Categorical(logits=logits, validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.dist.sample()

    def mode(self) -> torch.Tensor:
        return self.dist.logits.argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions.long())

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy()


class MultiCategoricalActions(ActionDistribution):
    """``MultiDiscrete``: independent categoricals; actions ``[B, k]``."""

    def __init__(self, logits: torch.Tensor, sizes: list[int]) -> None:
        self.dists = [Categorical(logits=part, validate_args=False)
                      for part in logits.split(sizes, dim=-1)]

    def sample(self) -> torch.Tensor:
        return torch.stack([d.sample() for d in self.dists], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([d.logits.argmax(dim=-1) for d in self.dists], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        parts = actions.long().unbind(dim=-1)
        return torch.stack([d.log_prob(a) for d, a in zip(self.dists, parts, strict=True)],
                           dim=-1).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([d.entropy() for d in self.dists], dim=-1).sum(dim=-1)


class BernoulliActions(ActionDistribution):
    """``MultiBinary``: independent coins; actions ``[B, n]`` of 0 and 1."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.dist = Bernoulli(logits=logits, validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.dist.sample()

    def mode(self) -> torch.Tensor:
        return (self.dist.logits > 0).float()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions.float()).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy().sum(dim=-1)


class GaussianActions(ActionDistribution):
    """``Box``: a diagonal Gaussian (the policy's mean, a state-independent log-std); actions
    ``[B, *shape]``, unbounded (the policy clips what it sends to the env's bounds)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.dist = Normal(mean, log_std.exp().expand_as(mean), validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.dist.sample()

    def mode(self) -> torch.Tensor:
        return self.dist.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions).flatten(1).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy().flatten(1).sum(dim=-1)


class ActionHead(nn.Module):
    """The policy network's output layer size for a space, and its distribution.

    Args:
        space: ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box``.
        log_std_init: Initial log-std of a ``Box`` space's Gaussian. Default 0.
        state_independent_std: Whether a ``Box`` space's Gaussian has a learned log-std of its
            own (False where gSDE gives the spread: :mod:`rltrain.agents.nn.sde`). Default True.
    """

    def __init__(self, space: gym.Space[Any], log_std_init: float = 0.0,
                 state_independent_std: bool = True) -> None:
        super().__init__()
        self.kind = type(space).__name__
        self.shape = tuple(space.shape or ())
        self.sizes: list[int] = []
        if isinstance(space, gym.spaces.Discrete):
            self.out_features = int(space.n)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.sizes = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
            self.out_features = sum(self.sizes)
        elif isinstance(space, (gym.spaces.MultiBinary, gym.spaces.Box)):
            self.out_features = int(np.prod(self.shape))
        else:
            raise TypeError(f"No action distribution for {type(space).__name__} spaces.")
        if isinstance(space, gym.spaces.Box) and state_independent_std:
            self.log_std = nn.Parameter(torch.full((self.out_features,), float(log_std_init)))

    def forward(self, out: torch.Tensor) -> ActionDistribution:
        """The distribution the policy network's outputs ``out`` (``[B, out_features]``)
        parameterise."""
        if self.kind == "Discrete":
            return CategoricalActions(out)
        if self.kind == "MultiDiscrete":
            return MultiCategoricalActions(out, self.sizes)
        if self.kind == "MultiBinary":
            return BernoulliActions(out.reshape(-1, *self.shape))
        return GaussianActions(out.reshape(-1, *self.shape), self.log_std.reshape(self.shape))


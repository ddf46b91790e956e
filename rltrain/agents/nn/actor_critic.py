"""The actor-critic network of PPO: an encoder, MLP trunks and the policy and value heads."""

from __future__ import annotations

import math

import torch
from torch import nn

from rltrain.agents.nn.distributions import ActionDistribution, ActionHead
from rltrain.agents.nn.encoders import Encoder, orthogonal
from rltrain.agents.nn.masking import action_mask, masked_logits
from rltrain.agents.nn.networks import MLP, check_parameters_fit, linear_parameters
from rltrain.agents.nn.sde import StateDependentNoise
from rltrain.types import ObsTensors

#: The trunks' activations by name (``PPOConfig.activation``).
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def layer(in_features: int, out_features: int, gain: float | None) -> nn.Linear:
    """A linear layer with orthogonal weights of ``gain`` and zero biases (``gain=None``:
    PyTorch's default initialisation)."""
    linear = nn.Linear(in_features, out_features)
    if gain is not None:
        nn.init.orthogonal_(linear.weight, gain)
        nn.init.zeros_(linear.bias)
    return linear


def trunk(in_features: int, hidden_sizes: list[int], activation: type[nn.Module],
          gain: float | None) -> MLP:
    """Linear + activation per hidden width, orthogonal with ``gain`` (None: PyTorch's
    default initialisation)."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [layer(in_features, size, gain), activation()]
        in_features = size
    return MLP(*layers)


class ActorCritic(nn.Module):
    """``π(·|s)`` and ``V(s)``: an encoder, two trunks (or one shared), policy and value heads,
    initialised as "The 37 Implementation Details of PPO" do (orthogonal: √2 encoder and trunk,
    0.01 policy head, 1 value head), or with ``ortho_init=False`` as PyTorch initialises
    layers (SB3's ``ortho_init=False``)."""

    def __init__(self, encoder: Encoder, head: ActionHead, hidden_sizes: list[int],
                 activation: str, shared_trunk: bool, *, ortho_init: bool = True,
                 sde: StateDependentNoise | None = None) -> None:
        super().__init__()
        hidden, act = list(hidden_sizes), ACTIVATIONS[activation]
        obs_dim = encoder.out_features
        features = hidden[-1] if hidden else obs_dim
        trunks = 1 if shared_trunk else 2
        check_parameters_fit(
            trunks * linear_parameters([obs_dim, *hidden])
            + linear_parameters([features, head.out_features]) + features + 1,
            f"PPO's networks of hidden_sizes {hidden}")
        def gain(value: float) -> float | None:
            return value if ortho_init else None

        # CleanRL's layer_init for the CNN
        self.encoder = orthogonal(encoder, math.sqrt(2)) if ortho_init else encoder
        self.head = head
        self.actor = trunk(obs_dim, hidden, act, gain(math.sqrt(2)))
        self.critic = self.actor if shared_trunk else trunk(obs_dim, hidden, act,
                                                            gain(math.sqrt(2)))
        self.policy_out = layer(features, head.out_features, gain(0.01))
        self.value_out = layer(features, 1, gain(1.0))
        self.sde = sde

    def forward(self, obs: ObsTensors) -> tuple[ActionDistribution, torch.Tensor]:
        """The action distribution (over the valid actions where the observation carries an
        ``action_mask``) and the value (``[B]``) of a batch of observations."""
        return self.from_features(self.encoder(obs), action_mask(obs))

    def from_features(self, features: torch.Tensor, mask: torch.Tensor | None = None
                      ) -> tuple[ActionDistribution, torch.Tensor]:
        """The distribution and value from encoded ``features`` (``[B, F]``)."""
        hidden = self.actor(features)
        value_hidden = hidden if self.critic is self.actor else self.critic(features)
        return self.policy_head(hidden, mask), self.value_out(value_hidden).squeeze(-1)

    def distribution(self, obs: ObsTensors) -> ActionDistribution:
        """``π(·|s)`` alone."""
        return self.policy_head(self.actor(self.encoder(obs)), action_mask(obs))

    def policy_head(self, hidden: torch.Tensor, mask: torch.Tensor | None = None
                    ) -> ActionDistribution:
        """``π(·|s)`` from the actor trunk's features: the head's distribution (invalid
        actions' logits masked, so their probability is 0 and the log-probabilities and
        entropy are the masked distribution's), or gSDE's over the features (detached unless
        its ``learn_features``)."""
        out = self.policy_out(hidden)
        if self.sde is not None:
            return self.sde.distribution(out, hidden)
        return self.head(masked_logits(out, mask))  # type: ignore[no-any-return]

    def value(self, obs: ObsTensors) -> torch.Tensor:
        """``V(s)``, ``[B]``."""
        return self.value_out(self.critic(self.encoder(obs))).squeeze(-1)  # type: ignore[no-any-return]

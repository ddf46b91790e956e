"""Dreamer's world model: encoder, RSSM, decoder, reward and continue heads, and their loss.

Names follow "Dream to Control" (DreamerV1, Hafner et al. 2020, arXiv:1912.01603), Sec. 3 and
Eq. 10, with DreamerV3's refinements for vector inputs (arXiv:2301.04104): symlog-squashed
observations and rewards, and a balanced KL with free nats.

The recurrent state-space model (RSSM) keeps a deterministic state ``h`` (a GRU) and a
stochastic state ``z`` (a diagonal Gaussian):

    h_t = f(h_{t-1}, z_{t-1}, a_{t-1})        deterministic path
    z_t ~ p(z_t | h_t)                        prior (imagination)
    z_t ~ q(z_t | h_t, e_t), e_t = enc(o_t)   posterior (training, acting)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Independent, Normal, kl_divergence

from rltrain.agents.networks import mlp


def symlog(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) log(1 + |x|)`` (DreamerV3, Eq. 1): squashes large inputs and targets."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`symlog`."""
    return torch.sign(x) * torch.expm1(x.abs())


class State(NamedTuple):
    """An RSSM state: deterministic ``h`` and stochastic ``z`` with its distribution."""

    h: torch.Tensor
    z: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    def features(self) -> torch.Tensor:
        """``[h, z]``, what the heads, the actor and the critic read."""
        return torch.cat([self.h, self.z], dim=-1)

    def distribution(self) -> Independent[Normal]:
        return Independent(Normal(self.mean, self.std), 1)


class RSSM(nn.Module):
    """The recurrent state-space model (DreamerV1, Sec. 3 and Appendix A)."""

    def __init__(self, *, action_size: int, embed_size: int, deter_size: int, stoch_size: int,
                 hidden_size: int, min_std: float = 0.1) -> None:
        super().__init__()
        self.deter_size, self.stoch_size, self.min_std = deter_size, stoch_size, min_std
        self.input = nn.Sequential(nn.Linear(stoch_size + action_size, hidden_size), nn.ELU())
        self.gru = nn.GRUCell(hidden_size, deter_size)
        self.prior_net = mlp(deter_size, [hidden_size], 2 * stoch_size, nn.ELU)
        self.posterior_net = mlp(deter_size + embed_size, [hidden_size], 2 * stoch_size, nn.ELU)

    def initial(self, batch: int, device: torch.device) -> State:
        """The all-zero state every episode starts from."""
        zeros = torch.zeros(batch, self.stoch_size, device=device)
        return State(torch.zeros(batch, self.deter_size, device=device), zeros, zeros,
                     torch.ones_like(zeros))

    def _gaussian(self, h: torch.Tensor, stats: torch.Tensor, sample: bool) -> State:
        mean, std = stats.chunk(2, dim=-1)
        std = F.softplus(std) + self.min_std
        z = mean + std * torch.randn_like(std) if sample else mean
        return State(h, z, mean, std)

    def img_step(self, state: State, action: torch.Tensor, sample: bool = True) -> State:
        """One step of the prior: ``h_t = f(h_{t-1}, z_{t-1}, a_{t-1})``, ``z_t ~ p(z_t|h_t)``."""
        h = self.gru(self.input(torch.cat([state.z, action], dim=-1)), state.h)
        return self._gaussian(h, self.prior_net(h), sample)

    def obs_step(self, state: State, action: torch.Tensor, embed: torch.Tensor,
                 is_first: torch.Tensor, sample: bool = True) -> tuple[State, State]:
        """Prior and posterior for the next observation's embedding. Rows where ``is_first``
        start from the initial state and a zero action (a new episode)."""
        keep = (1.0 - is_first).unsqueeze(-1)
        state = State(*(part * keep for part in state))
        prior = self.img_step(state, action * keep, sample)
        posterior = self._gaussian(prior.h, self.posterior_net(
            torch.cat([prior.h, embed], dim=-1)), sample)
        return prior, posterior

    def observe(self, embeds: torch.Tensor, actions: torch.Tensor,
                is_first: torch.Tensor) -> tuple[State, State]:
        """Priors and posteriors along sequences (``[B, L, ...]`` in, ``[B, L, ...]`` out)."""
        state = self.initial(embeds.shape[0], embeds.device)
        priors, posteriors = [], []
        for t in range(embeds.shape[1]):
            prior, state = self.obs_step(state, actions[:, t], embeds[:, t], is_first[:, t])
            priors.append(prior)
            posteriors.append(state)
        return (State(*(torch.stack(parts, 1) for parts in zip(*priors, strict=True))),
                State(*(torch.stack(parts, 1) for parts in zip(*posteriors, strict=True))))


class WorldModelLosses(NamedTuple):
    """The world-model loss and its parts (DreamerV1, Eq. 10; scalars)."""

    total: torch.Tensor
    reconstruction: torch.Tensor
    reward: torch.Tensor
    continuation: torch.Tensor
    kl: torch.Tensor


class WorldModel(nn.Module):
    """Encoder, RSSM, decoder, reward head and continue head for vector observations."""

    def __init__(self, *, obs_size: int, action_size: int, deter_size: int, stoch_size: int,
                 hidden_size: int, layers: int) -> None:
        super().__init__()
        hidden = [hidden_size] * layers
        feature_size = deter_size + stoch_size
        self.encoder = mlp(obs_size, hidden, hidden_size, nn.ELU)
        self.rssm = RSSM(action_size=action_size, embed_size=hidden_size, deter_size=deter_size,
                         stoch_size=stoch_size, hidden_size=hidden_size)
        self.decoder = mlp(feature_size, hidden, obs_size, nn.ELU)
        self.reward_head = mlp(feature_size, hidden, 1, nn.ELU)
        self.continue_head = mlp(feature_size, hidden, 1, nn.ELU)

    def embed(self, observations: torch.Tensor) -> torch.Tensor:
        """``e_t = enc(symlog(o_t))``."""
        return self.encoder(symlog(observations))  # type: ignore[no-any-return]

    def loss(self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
             is_first: torch.Tensor, is_terminal: torch.Tensor, *, free_nats: float,
             kl_balance: float) -> tuple[WorldModelLosses, State]:
        """Eq. 10 on a batch of sequences; also returns the posteriors (imagination starts).

        Reconstruction and reward are regressed in symlog space (DreamerV3, Sec. 3); the
        continue head predicts ``1 - is_terminal`` (a time-limit truncation continues). The KL
        term balances the prior's and the posterior's updates (DreamerV2, Sec. 2.2 "KL
        balancing": ``kl_balance`` of the gradient trains the prior) and is clipped from below
        at ``free_nats`` (DreamerV1, Appendix A).
        """
        priors, posteriors = self.rssm.observe(self.embed(observations), actions, is_first)
        features = posteriors.features()
        reconstruction = (self.decoder(features) - symlog(observations)).pow(2).sum(-1).mean()
        reward = (self.reward_head(features).squeeze(-1) - symlog(rewards)).pow(2).mean()
        continuation = F.binary_cross_entropy_with_logits(
            self.continue_head(features).squeeze(-1), 1.0 - is_terminal)
        kl = self.kl(priors, posteriors, kl_balance).mean()
        kl_loss = torch.clamp(kl, min=free_nats)  # free nats: no pressure below the floor
        total = reconstruction + reward + continuation + kl_loss
        return WorldModelLosses(total, reconstruction, reward, continuation, kl), posteriors

    @staticmethod
    def kl(priors: State, posteriors: State, balance: float) -> torch.Tensor:
        """Balanced ``KL(q || p)``: ``balance`` trains the prior toward the posterior, the rest
        regularises the posterior toward the prior."""
        sg = State(*(part.detach() for part in posteriors))
        sg_prior = State(*(part.detach() for part in priors))
        train_prior = kl_divergence(sg.distribution(), priors.distribution())
        train_posterior = kl_divergence(posteriors.distribution(), sg_prior.distribution())
        return balance * train_prior + (1.0 - balance) * train_posterior

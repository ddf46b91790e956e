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

from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from rltrain.agents.nn.networks import check_parameters_fit, mlp


def symlog(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) log(1 + |x|)`` (DreamerV3, Eq. 1): squashes large inputs and targets."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`symlog`."""
    return torch.sign(x) * torch.expm1(x.abs())


def rows(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``net`` on the last dimension of ``x``, its leading dimensions flattened into one batch.

    A 2-D input keeps each Linear's output a tensor of its own, which the in-place :class:`ELU`
    then overwrites for free; on a view of one (what a Linear returns for a 3-D input),
    autograd would copy the whole tensor first.
    """
    out: torch.Tensor = net(x.reshape(-1, x.shape[-1]))
    return out.view(*x.shape[:-1], out.shape[-1])


class ELU(nn.ELU):
    """``nn.ELU`` in place, the activation of every Dreamer network: the same function, one
    tensor fewer per layer, and a backward pass that reads the output (``y + 1 = exp(x)``
    where ``x < 0``) instead of computing ``exp(x)`` again."""

    def __init__(self) -> None:
        super().__init__(inplace=True)


class State(NamedTuple):
    """An RSSM state: deterministic ``h`` and stochastic ``z`` with its Gaussian's mean and
    standard deviation."""

    h: torch.Tensor
    z: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    def features(self) -> torch.Tensor:
        """``[h, z]``, what the heads, the actor and the critic read."""
        return torch.cat([self.h, self.z], dim=-1)


class RSSM(nn.Module):
    """The recurrent state-space model (DreamerV1, Sec. 3 and Appendix A)."""

    def __init__(self, *, action_size: int, embed_size: int, deter_size: int, stoch_size: int,
                 hidden_size: int, min_std: float = 0.1) -> None:
        super().__init__()
        self.deter_size, self.stoch_size, self.min_std = deter_size, stoch_size, min_std
        check_parameters_fit(3 * deter_size * (hidden_size + deter_size + 2),
                             f"Dreamer's recurrent model of deter_size {deter_size:,}",
                             "Lower the agent's deter_size and hidden_size.")
        self.input = nn.Sequential(nn.Linear(stoch_size + action_size, hidden_size), ELU())
        self.gru = nn.GRUCell(hidden_size, deter_size)
        self.prior_net = mlp(deter_size, [hidden_size], 2 * stoch_size, ELU)
        self.posterior_net = mlp(deter_size + embed_size, [hidden_size], 2 * stoch_size, ELU)

    def initial(self, batch: int, device: torch.device) -> State:
        """The all-zero state every episode starts from."""
        zeros = torch.zeros(batch, self.stoch_size, device=device)
        return State(torch.zeros(batch, self.deter_size, device=device), zeros, zeros,
                     torch.ones_like(zeros))

    def _stats(self, stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A net's output as the latent's mean and standard deviation (at least ``min_std``)."""
        mean, std = stats.chunk(2, dim=-1)
        return mean, F.softplus(std) + self.min_std

    def _gaussian(self, h: torch.Tensor, stats: torch.Tensor, sample: bool,
                  noise: torch.Tensor | None = None) -> State:
        mean, std = self._stats(stats)
        if not sample:
            return State(h, mean, mean, std)
        noise = torch.randn_like(std) if noise is None else noise
        return State(h, torch.addcmul(mean, std, noise), mean, std)  # mean + std ε, one op

    def _gru(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``self.gru(x, h)`` without ``nn.GRUCell.forward``'s checks, a cost paid at every
        call (``docs/benchmarks.md``, "Figures behind implementation choices")."""
        gru = self.gru
        return torch.gru_cell(x, h, gru.weight_ih, gru.weight_hh, gru.bias_ih, gru.bias_hh)

    def img_step(self, state: State, action: torch.Tensor, sample: bool = True,
                 noise: torch.Tensor | None = None) -> State:
        """One step of the prior: ``h_t = f(h_{t-1}, z_{t-1}, a_{t-1})``, ``z_t ~ p(z_t|h_t)``
        (with ``noise``, drawn beforehand, in place of a fresh draw)."""
        layer = cast(nn.Linear, self.input[0])  # self.input, its ELU called in place
        x = F.elu_(F.linear(torch.cat([state.z, action], dim=-1), layer.weight, layer.bias))
        h = self._gru(x, state.h)
        return self._gaussian(h, self.prior_net(h), sample, noise)

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
        """Priors and posteriors along sequences (``[B, L, ...]`` in, ``[B, L, ...]`` out).

        What :meth:`obs_step` computes at every step, with only the recurrence in the loop:
        ``h_t = f(h_{t-1}, z_{t-1}, a_{t-1})`` and the posterior ``z_t ~ q(z_t | h_t, e_t)``.
        What does not depend on it is computed for all ``L`` steps at once: the masks, the
        noise (the same draws, in the same order, as stepping :meth:`obs_step`), the action's
        and the embedding's parts of the input and posterior layers
        (``[z, a] Wᵀ = z W_zᵀ + a W_aᵀ``, ``[h, e] Wᵀ = h W_hᵀ + e W_eᵀ``), and the prior
        ``p(z_t | h_t)``, which reads ``h_t`` alone and feeds nothing back.
        """
        batch, length = embeds.shape[:2]
        keep = (1.0 - is_first).unsqueeze(-1)  # [B, L, 1]: 0 where an episode starts
        noise = torch.randn(length, 2, batch, self.stoch_size, device=embeds.device)
        input_layer, post_layer, post_out = (cast(nn.Linear, layer) for layer in (
            self.input[0], self.posterior_net[0], self.posterior_net[2]))
        w_z, w_a = torch.split(input_layer.weight, [self.stoch_size, actions.shape[-1]], dim=1)
        w_h, w_e = torch.split(post_layer.weight, [self.deter_size, embeds.shape[-1]], dim=1)
        action_in = F.linear(actions * keep, w_a, input_layer.bias)  # a W_aᵀ + b, [B, L, hidden]
        embed_in = F.linear(embeds, w_e, post_layer.bias)  # e W_eᵀ + b
        w_z, w_h, w_out = w_z.t(), w_h.t(), post_out.weight.t()  # transposed once, not per step
        # On the CPU, steps where no sequence starts an episode skip the masks (a product by
        # 1), and so does step 0, whose state is all zeros (elsewhere, reading is_first to the
        # host would wait for the device).
        starts = ((is_first != 0).any(0).tolist() if is_first.device.type == "cpu"
                  else [True] * length)
        starts[0] = False
        start = self.initial(batch, embeds.device)
        h, z = start.h, start.z
        hs, zs, means, stds = [], [], [], []
        for a_in, e_in, keep_t, starting, eps in zip(
                action_in.unbind(1), embed_in.unbind(1), keep.unbind(1), starts,
                noise[:, 1].unbind(0), strict=True):
            if starting:
                z, h = z * keep_t, h * keep_t
            h = self._gru(F.elu_(torch.addmm(a_in, z, w_z)), h)  # (the layers' ELU, in place)
            hidden = F.elu_(torch.addmm(e_in, h, w_h))
            mean, std = self._stats(torch.addmm(post_out.bias, hidden, w_out))
            z = torch.addcmul(mean, std, eps)
            hs.append(h)
            zs.append(z)
            means.append(mean)
            stds.append(std)
        deter = torch.stack(hs, 1)
        posteriors = State(deter, torch.stack(zs, 1), torch.stack(means, 1),
                           torch.stack(stds, 1))
        prior_mean, prior_std = self._stats(rows(self.prior_net, deter))
        prior_z = prior_mean + prior_std * noise[:, 0].transpose(0, 1)
        return State(deter, prior_z, prior_mean, prior_std), posteriors


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
        self.encoder = mlp(obs_size, hidden, hidden_size, ELU)
        self.rssm = RSSM(action_size=action_size, embed_size=hidden_size, deter_size=deter_size,
                         stoch_size=stoch_size, hidden_size=hidden_size)
        self.decoder = mlp(feature_size, hidden, obs_size, ELU)
        self.reward_head = mlp(feature_size, hidden, 1, ELU)
        self.continue_head = mlp(feature_size, hidden, 1, ELU)

    def embed(self, observations: torch.Tensor) -> torch.Tensor:
        """``e_t = enc(symlog(o_t))``."""
        return rows(self.encoder, symlog(observations))

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
        targets = symlog(observations)  # the encoder's input and the decoder's target
        priors, posteriors = self.rssm.observe(rows(self.encoder, targets), actions, is_first)
        features = posteriors.features()
        reconstruction = (rows(self.decoder, features) - targets).pow(2).sum(-1).mean()
        reward = (rows(self.reward_head, features).squeeze(-1) - symlog(rewards)).pow(2).mean()
        continuation = F.binary_cross_entropy_with_logits(
            rows(self.continue_head, features).squeeze(-1), 1.0 - is_terminal)
        kl = self.kl(priors, posteriors, kl_balance).mean()
        kl_loss = torch.clamp(kl, min=free_nats)  # free nats: no pressure below the floor
        total = reconstruction + reward + continuation + kl_loss
        return WorldModelLosses(total, reconstruction, reward, continuation, kl), posteriors

    @staticmethod
    def kl(priors: State, posteriors: State, balance: float) -> torch.Tensor:
        """Balanced ``KL(q || p)``: ``balance`` trains the prior toward the posterior, the rest
        regularises the posterior toward the prior. Both terms are the same number; they
        differ in where the gradient stops."""
        train_prior = gaussian_kl(posteriors.mean.detach(), posteriors.std.detach(),
                                  priors.mean, priors.std)
        train_posterior = gaussian_kl(posteriors.mean, posteriors.std,
                                      priors.mean.detach(), priors.std.detach())
        return balance * train_prior + (1.0 - balance) * train_posterior


def gaussian_kl(mean_q: torch.Tensor, std_q: torch.Tensor, mean_p: torch.Tensor,
                std_p: torch.Tensor) -> torch.Tensor:
    """``KL(q || p)`` of diagonal Gaussians, summed over the last dimension: what
    ``kl_divergence`` gives for two ``Independent(Normal(...), 1)``, in its arithmetic, without
    the distribution objects (argument checks, broadcasting: Python work per call)."""
    var_ratio = (std_q / std_p).pow(2)
    t1 = ((mean_q - mean_p) / std_p).pow(2)
    return (0.5 * (var_ratio + t1 - 1 - var_ratio.log())).sum(-1)

"""Dreamer's behaviour: an actor and a critic learned from rollouts imagined by the world model.

DreamerV1 (arXiv:1912.01603), Sec. 4: from each posterior state of the replayed batch, the
actor imagines ``horizon`` steps in the model's latent space; the critic regresses the
λ-returns of those rollouts (Eq. 6), and the actor maximises them (Eq. 7), through the
model's dynamics for continuous actions and with REINFORCE for discrete ones (DreamerV2,
Sec. 2.3). Returns are divided by their 5th-95th percentile range (DreamerV3, Sec. 3), so one
entropy scale suits rewards of any size.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Distribution, Independent, Normal, OneHotCategorical
from torch.distributions.transformed_distribution import TransformedDistribution
from torch.distributions.transforms import TanhTransform

from rltrain.agents.dreamer.world_model import ELU, RSSM, State
from rltrain.agents.nn.distributions import rejected_parameters
from rltrain.agents.nn.networks import mlp

#: What to change when Dreamer's networks diverged (their outputs are no longer finite).
DIVERGED = ("Lower the learning rates (agent.model_lr, agent.actor_lr, agent.critic_lr), or "
            "clip gradients (trainer.gradient_clip_val).")


class Actor(nn.Module):
    """``π(a | s)``: a tanh-squashed Gaussian in ``[-1, 1]`` (continuous actions) or a
    categorical over one-hot actions (discrete)."""

    def __init__(self, feature_size: int, action_size: int, hidden: list[int], *,
                 discrete: bool, min_std: float = 0.1) -> None:
        super().__init__()
        self.discrete, self.min_std, self.action_size = discrete, min_std, action_size
        self.net = mlp(feature_size, hidden, action_size if discrete else 2 * action_size,
                       ELU)

    def forward(self, features: torch.Tensor) -> Distribution:
        out = self.net(features)
        try:  # torch checks the parameters: non-finite ones name the settings that cause them
            if self.discrete:
                return OneHotCategorical(logits=out)
            base = Normal(*self._gaussian(out))
        except ValueError as error:
            raise rejected_parameters("Dreamer's actor", error, DIVERGED) from error
        return Independent(TransformedDistribution(base, TanhTransform(cache_size=1)), 1)

    def _gaussian(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # DreamerV1's squashed Gaussian: the mean scaled into tanh's working range
        mean, std = out.chunk(2, dim=-1)
        return 5.0 * torch.tanh(mean / 5.0), F.softplus(std) + self.min_std

    def rsample(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action ``a = tanh(u)``, ``u = mean + std ε``, and its
        ``log π(a | s)``: what :meth:`forward`'s distribution gives from ``rsample()`` and
        ``log_prob()``, written out (without the distribution objects, whose argument checks
        cost more than the arithmetic here). Continuous actions only."""
        mean, std = self._gaussian(self.net(features))
        noise = torch.randn_like(mean)
        u = mean + noise * std
        return torch.tanh(u), self.log_prob(u, noise, std)

    @staticmethod
    def log_prob(u: torch.Tensor, noise: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """``log π(tanh(u))`` of ``u = mean + std ε`` (``noise`` is ε). It reads ``u`` itself,
        as the tanh transform's cache does: inverting a saturated action (``atanh(±1)``) would
        overflow.

            log π(a) = Σ [log N(u; mean, std) - log(1 - tanh²(u))]
            log(1 - tanh²(u)) = 2 (log 2 - u - softplus(-2u))    (stable for large |u|)
        """
        log_normal = -0.5 * noise.pow(2) - std.log() - 0.5 * math.log(2.0 * math.pi)
        log_jacobian = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return (log_normal - log_jacobian).sum(-1)

    @staticmethod
    def mode(distribution: Distribution, discrete: bool) -> torch.Tensor:
        """The greedy action: the most likely one-hot, or the squashed Gaussian's mean."""
        if discrete:
            assert isinstance(distribution, OneHotCategorical)
            probs = distribution.probs
            return F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)
        assert isinstance(distribution, Independent)
        base = distribution.base_dist
        assert isinstance(base, TransformedDistribution)
        return torch.tanh(base.base_dist.mean)


class Imagination(NamedTuple):
    """An imagined rollout of ``H`` steps from ``N`` starts: the states each step leaves
    (``s_0 ... s_{H-1}``, detached: what the actor read, and what the critic learns on), the
    states it reaches (``s_1 ... s_H``, with gradients through the dynamics), ``[H, N, F]``
    both; the actions ``[H, N, A]``, their log-probabilities and entropies ``[H, N]``."""

    features: torch.Tensor
    next_features: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    entropies: torch.Tensor


def imagine(rssm: RSSM, actor: Actor, start: State, horizon: int) -> Imagination:
    """Roll the prior forward ``horizon`` steps from ``start`` with actions from ``actor``.

    Continuous actions are reparameterised samples, so the returns' gradient reaches the actor
    through the dynamics; discrete ones are straight samples, for REINFORCE.
    """
    if actor.discrete:
        return _imagine_discrete(rssm, actor, start, horizon)
    # The loop keeps only the recurrence. The noise of all steps comes from one draw, in the
    # order stepping draws it (each step the actor's N x A, then the prior's N x S: the same
    # numbers where each is a multiple of 16, as the CPU generator fills 16 at a time), and
    # the log-probabilities of all steps are taken after the loop.
    n, action_size, stoch_size = start.z.shape[0], actor.action_size, rssm.stoch_size
    noise = torch.randn(horizon, n * (action_size + stoch_size), device=start.z.device)
    action_noise = noise[:, :n * action_size].view(horizon, n, action_size)
    state_noise = noise[:, n * action_size:].view(horizon, n, stoch_size)
    state, feature = start, start.features()
    features, next_features, actions, us, stds = [], [], [], [], []
    for eps_action, eps_state in zip(action_noise.unbind(0), state_noise.unbind(0),
                                     strict=True):
        feature = feature.detach()  # the behaviour losses do not train the world model
        mean, std = actor._gaussian(actor.net(feature))
        u = torch.addcmul(mean, eps_action, std)
        action = torch.tanh(u)
        state = rssm.img_step(state, action, noise=eps_state)
        features.append(feature)
        feature = state.features()
        next_features.append(feature)
        actions.append(action)
        us.append(u)
        stds.append(std)
    log_probs = Actor.log_prob(torch.stack(us), action_noise, torch.stack(stds))
    # a tanh-squashed Gaussian has no closed-form entropy: use -log π(a) of the sample
    return Imagination(torch.stack(features), torch.stack(next_features), torch.stack(actions),
                       log_probs, -log_probs)


def _imagine_discrete(rssm: RSSM, actor: Actor, start: State, horizon: int) -> Imagination:
    state, feature = start, start.features()
    features, next_features, actions, log_probs, entropies = [], [], [], [], []
    for _ in range(horizon):
        feature = feature.detach()
        policy = actor(feature)
        action = policy.sample()
        log_probs.append(policy.log_prob(action))
        entropies.append(policy.entropy())
        state = rssm.img_step(state, action)
        features.append(feature)
        feature = state.features()
        next_features.append(feature)
        actions.append(action)
    return Imagination(torch.stack(features), torch.stack(next_features), torch.stack(actions),
                       torch.stack(log_probs), torch.stack(entropies))


class ReturnScale(nn.Module):
    """DreamerV3's return normaliser: an EMA of the 5th-95th percentile range of the
    λ-returns, at least 1 (small returns are not scaled up)."""

    low: torch.Tensor
    high: torch.Tensor
    initialized: torch.Tensor

    def __init__(self, decay: float = 0.99) -> None:
        super().__init__()
        self.decay = decay
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))

    @torch.no_grad()
    def update(self, returns: torch.Tensor) -> torch.Tensor:
        """Fold in a batch of returns; returns the current scale."""
        low, high = quantiles(returns.detach().float().flatten(), [0.05, 0.95])
        if not bool(self.initialized):
            self.low.copy_(low)
            self.high.copy_(high)
            self.initialized.fill_(True)
        else:
            self.low.lerp_(low, 1.0 - self.decay)
            self.high.lerp_(high, 1.0 - self.decay)
        return torch.clamp(self.high - self.low, min=1.0)


def quantiles(flat: torch.Tensor, qs: list[float]) -> torch.Tensor:
    """``torch.quantile(flat, qs)`` (linear interpolation), the same numbers in its arithmetic,
    from the two order statistics around each quantile (``kthvalue``: a selection, much cheaper
    than quantile's sort; ``docs/benchmarks.md``, "Figures behind implementation choices").
    With a NaN, quantile's NaN. Off the CPU, ``torch.quantile`` itself: the selection needs the
    ranks on the host."""
    q = flat.new_tensor(qs)
    if flat.device.type != "cpu" or bool(flat.isnan().any()):
        return torch.quantile(flat, q)
    ranks = q * (flat.numel() - 1)
    below, above = ranks.long(), ranks.ceil().long()
    values = [torch.stack([flat.kthvalue(int(k) + 1).values for k in ks.tolist()])
              for ks in (below, above)]
    return values[0].lerp(values[1], ranks - below)

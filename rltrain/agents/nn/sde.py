"""Generalized state-dependent exploration (gSDE; Raffin et al. 2022, arXiv:2005.05719), as
Stable-Baselines3's ``use_sde``, with its ``full_std``, ``use_expln`` and ``learn_features``.

The exploration noise is a function of the policy's last hidden features ``z(s)``:
``ε(s) = z(s) θ`` with ``θ ~ N(0, σ²)`` a ``[latent, action]`` matrix per sub-env, drawn again
only every ``sample_freq`` env steps (and at each rollout's start), so the noise is smooth in
time and in the state. The action is ``μ(s) + ε(s)``; its distribution given ``s`` is Gaussian
with variance ``Σ_j z_j(s)² σ_jk²`` (+1e-6), which gives the log-probability and entropy the
loss uses. ``σ`` is learned from ``log σ``, which starts at ``log_std_init``: ``σ = exp(log σ)``,
or with ``expln`` ``exp(log σ)`` below 0 and ``log1p(log σ) + 1`` above (SB3's ``use_expln``: it
grows linearly, not exponentially); one per feature and action (``full_std``) or one per
feature shared by the actions. With ``learn_features`` the loss's gradient reaches the features
through the noise and the variance (SB3's SAC does this); without, the features are detached
(SB3's PPO).
"""

# torch.distributions is untyped: its calls return Any here.
# mypy: disable-error-code="no-untyped-call,no-any-return"
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.distributions import Normal

from rltrain.agents.nn.distributions import ActionDistribution
from rltrain.agents.nn.encoders import Encoder
from rltrain.agents.nn.networks import MLP, BoundedActor, as_encoder, check_mlp_fits, squash
from rltrain.types import ObsTensors

#: Added to the variance of the actions' Gaussian (SB3's epsilon).
VARIANCE_FLOOR = 1e-6
#: Added to ``log σ`` inside ``expln``'s ``log1p`` (SB3's epsilon there).
EXPLN_EPS = 1e-6


class StateDependentNoise(nn.Module):
    """gSDE's learned ``log σ`` and the exploration matrices of the sub-envs (saved with the
    agent, so a resumed run explores on as the straight one).

    Args:
        latent_dim: Size of the features ``z(s)``.
        action_dim: Action size.
        log_std_init: The start of every ``log σ``.
        sample_freq: Env steps between draws of new matrices; -1 draws only at each
            rollout's start (:meth:`new_rollout`). Default -1.
        full_std: One ``σ`` per feature and action (``[latent, action]``); False: one per
            feature, shared by the actions. Default True.
        expln: ``σ`` from ``log σ`` by SB3's ``expln`` (linear growth above ``log σ = 0``)
            instead of ``exp``. Default False.
        learn_features: Let the gradient reach the features through the noise and the
            variance; False detaches them. Default False.
    """

    matrices: torch.Tensor
    steps: torch.Tensor

    def __init__(self, latent_dim: int, action_dim: int, log_std_init: float,
                 sample_freq: int = -1, *, full_std: bool = True, expln: bool = False,
                 learn_features: bool = False) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((latent_dim, action_dim if full_std else 1),
                                               float(log_std_init)))
        self.action_dim, self.sample_freq = action_dim, sample_freq
        self.expln, self.learn_features = expln, learn_features
        self.register_buffer("matrices", torch.zeros(0, latent_dim, action_dim))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def sigma(self) -> torch.Tensor:
        """``σ`` ``[latent, action]`` from ``log σ``: ``exp``, or SB3's ``expln``
        (``exp(x)`` for ``x <= 0``, ``log1p(x) + 1`` above)."""
        log_std = self.log_std
        if self.expln:
            below = log_std.clamp(max=0.0).exp() * (log_std <= 0)
            above = (torch.log1p(log_std.clamp(min=0.0) + EXPLN_EPS) + 1.0) * (log_std > 0)
            std = below + above
        else:
            std = log_std.exp()
        return std.expand(-1, self.action_dim)

    def features(self, latent: torch.Tensor) -> torch.Tensor:
        """The features the noise and the variance read: ``latent``, detached unless
        ``learn_features``."""
        return latent if self.learn_features else latent.detach()

    def weights(self) -> torch.Tensor:
        """One matrix ``θ ~ N(0, σ²)`` ``[latent, action]``, reparameterised (its gradient
        reaches ``log σ``), for a batch of training samples."""
        std = self.sigma()
        return std * torch.randn_like(std)

    def new_rollout(self) -> None:
        """Draw new matrices at the next env step (a rollout starts)."""
        self.matrices = self.matrices[:0]
        self.steps.zero_()

    def noise(self, latent: torch.Tensor) -> torch.Tensor:
        """``ε(s) = z(s) θ_i`` of each sub-env ``i`` (``latent`` ``[num_envs, latent]``),
        drawing new matrices first when they are due."""
        due = self.sample_freq > 0 and int(self.steps) % self.sample_freq == 0
        if due or self.matrices.shape[0] != latent.shape[0]:
            std = self.sigma().detach()
            self.matrices = torch.randn(latent.shape[0], *std.shape, device=std.device) * std
        self.steps += 1
        return torch.bmm(latent.unsqueeze(1), self.matrices).squeeze(1)

    def std(self, latent: torch.Tensor) -> torch.Tensor:
        """The actions' standard deviation given the features: ``sqrt(z² σ² + 1e-6)``."""
        return (latent.square() @ self.sigma().square() + VARIANCE_FLOOR).sqrt()

    def distribution(self, mean: torch.Tensor, latent: torch.Tensor) -> StateDependentActions:
        """The actions' distribution given the mean ``μ(s)`` and the features ``z(s)``
        (detached here unless ``learn_features``)."""
        latent = self.features(latent)
        return StateDependentActions(mean, self.std(latent), latent, self)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        saved = state_dict.get(prefix + "matrices")
        if isinstance(saved, torch.Tensor) and saved.dim() == 3:  # as many as saved
            self.matrices = self.matrices.new_zeros(saved.shape)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class StateDependentActions(ActionDistribution):
    """Actions ``μ(s) + z(s) θ``: Gaussian given ``s`` (``std`` from gSDE's variance), sampled
    through the exploration matrices."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, latent: torch.Tensor,
                 noise: StateDependentNoise) -> None:
        self.mean, self.latent, self.source = mean, latent, noise
        self.dist = Normal(mean, std, validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.mean + self.source.noise(self.latent)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions.reshape(self.mean.shape)).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy().sum(dim=-1)


class StateDependentSquashedActor(BoundedActor):
    """SAC's actor with gSDE: ``a = tanh(μ(s) + z(s) θ) * scale + bias`` (SB3's SAC with
    ``use_sde``): the features ``z(s)`` of a ReLU trunk, the mean clipped to
    ``±clip_mean``, the same interface as
    :class:`~rltrain.agents.nn.networks.SquashedGaussianActor`. ``sde`` settings: those of
    :class:`StateDependentNoise` (SB3's SAC learns the features: ``learn_features=True``).

    Args:
        obs: The observation encoder, or a flat observation size.
        action_dim: Action size.
        hidden_sizes: Hidden widths (ReLU); the last is the size of ``z(s)``.
        low: The action space's lower bounds (finite).
        high: Its upper bounds.
        log_std_init: The start of gSDE's ``log σ``.
        sample_freq: Env steps between draws of the acting matrices (-1: at each
            :meth:`StateDependentNoise.new_rollout`).
        clip_mean: Bound of ``μ(s)`` before the squash (SB3's ``clip_mean``). Default 2.
        **sde: ``full_std``, ``expln``, ``learn_features`` of :class:`StateDependentNoise`.
    """

    def __init__(self, obs: int | Encoder, action_dim: int, hidden_sizes: Sequence[int],
                 low: torch.Tensor, high: torch.Tensor, log_std_init: float, sample_freq: int,
                 clip_mean: float = 2.0, **sde: bool) -> None:
        super().__init__(low, high)
        self.encoder = as_encoder(obs)
        width = self.encoder.out_features
        check_mlp_fits(width, hidden_sizes, action_dim)
        layers: list[nn.Module] = []
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.trunk = MLP(*layers)
        self.mu = nn.Linear(width, action_dim)
        self.sde = StateDependentNoise(width, action_dim, log_std_init, sample_freq, **sde)
        self.clip_mean = clip_mean

    def features(self, obs: ObsTensors) -> tuple[torch.Tensor, torch.Tensor]:
        """The clipped mean ``μ(s)`` and the features ``z(s)`` (detached unless the noise
        learns them)."""
        latent = self.trunk(self.encoder(obs))
        return (self.mu(latent).clamp(-self.clip_mean, self.clip_mean),
                self.sde.features(latent))

    def forward(self, obs: ObsTensors, noise: torch.Tensor | None = None,
                matrix: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample in the env's bounds and its log-probability ``[B]``: with ``matrix``
        (one ``θ`` for the whole batch, :meth:`StateDependentNoise.weights`) in training,
        else with the sub-envs' acting matrices. ``noise`` is not used (the squashed
        Gaussian's per-sample draws; gSDE's come from ``θ``)."""
        mean, latent = self.features(obs)
        offset = latent @ matrix if matrix is not None else self.sde.noise(latent)
        return squash(mean + offset, mean, self.sde.std(latent), self.scale, self.bias)

    def mode(self, obs: ObsTensors) -> torch.Tensor:
        """The deterministic action ``tanh(μ(s)) * scale + bias``."""
        return self.to_env(torch.tanh(self.features(obs)[0]))

"""Network building blocks shared by agents: an observation encoder (:mod:`.encoders`) followed
by an MLP."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rltrain.agents.nn.encoders import Encoder, FlatEncoder
from rltrain.agents.nn.noisy import NoisyLinear
from rltrain.buffers.replay import check_fits
from rltrain.types import ObsTensors

#: Bytes one float32 parameter takes while it trains: itself, its gradient and Adam's two
#: moments (a target network's copy is counted as a parameter of its own).
TRAINING_BYTES = 16


def as_encoder(obs: int | Encoder) -> Encoder:
    """``obs`` itself, or for an observation size a :class:`FlatEncoder` of that many features."""
    return FlatEncoder((obs,)) if isinstance(obs, int) else obs


class MLP(nn.Sequential):
    """An ``nn.Sequential`` of linear layers and activations whose forward calls each layer's
    function itself (``F.linear`` on the layer's weight and bias, the activation's
    ``forward``) rather than each layer's ``__call__``.

    A ReLU after a linear layer runs in place on that layer's output (one allocation fewer per
    layer). Same parameters, state-dict keys and results as ``nn.Sequential``. ``Module.__call__``
    has a fixed cost per layer, which at the batch of one an agent acts on is a large share of
    a small MLP's forward pass (``docs/benchmarks.md``, "Figures behind implementation
    choices"). Hooks registered on the inner layers therefore do not run; register them on the
    MLP itself.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fresh = False  # whether x is a linear layer's output, this call's own tensor
        for layer in self._modules.values():
            kind = type(layer)
            if isinstance(layer, nn.Linear) and kind is nn.Linear:
                x, fresh = F.linear(x, layer.weight, layer.bias), True
            elif kind is nn.ReLU and fresh:  # in place: a linear's backward needs its input only
                x = torch.relu_(x)
            else:
                x, fresh = layer.forward(x), False
        return x


def linear_parameters(widths: Sequence[int]) -> int:
    """Weights and biases of a stack of linear layers of these widths (input first)."""
    return sum((a + 1) * b for a, b in itertools.pairwise(widths))


def check_parameters_fit(parameters: int, what: str,
                         fix: str = "Lower the agent's hidden_sizes.") -> None:
    """Raise ``MemoryError`` before ``parameters`` are allocated when training them (with
    their gradients and Adam's moments: :data:`TRAINING_BYTES` each) needs more memory than
    is available; ``what`` names the network and ``fix`` the setting to change."""
    check_fits(parameters * TRAINING_BYTES,
               f"Training {what} ({parameters:,} parameters, with their gradients and Adam's "
               "two moments)",
               fix)


def check_mlp_fits(in_features: int, hidden_sizes: Sequence[int], out_features: int,
                   *, noisy: bool = False) -> None:
    """:func:`check_parameters_fit` for an MLP of these widths (``noisy``: of noisy layers,
    two parameters per weight)."""
    widths = [in_features, *hidden_sizes, out_features]
    check_parameters_fit((2 if noisy else 1) * linear_parameters(widths),
                         f"a network of layer widths {', '.join(f'{w:,}' for w in widths)}")


def linear(in_features: int, out_features: int, noise: float | None = None) -> nn.Module:
    """``nn.Linear``, or with ``noise`` a :class:`~rltrain.agents.nn.noisy.NoisyLinear` of that
    initial scale (``sigma0``)."""
    if noise is None:
        return nn.Linear(in_features, out_features)
    return NoisyLinear(in_features, out_features, sigma0=noise)


def mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int,
        activation: type[nn.Module] = nn.ReLU, *, layer_norm: bool = False,
        noise: float | None = None) -> MLP:
    """A multilayer perceptron: Linear (+ LayerNorm with ``layer_norm``) + activation per hidden
    size, then a Linear output; with ``noise``, noisy linear layers of that ``sigma0``
    (:func:`linear`). Refused with ``MemoryError`` before anything is allocated when it could
    not train in the memory available (:func:`check_mlp_fits`)."""
    check_mlp_fits(in_features, hidden_sizes, out_features, noisy=noise is not None)
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        norm = [nn.LayerNorm(size)] if layer_norm else []
        layers += [linear(in_features, size, noise), *norm, activation()]
        in_features = size
    layers.append(linear(in_features, out_features, noise))
    return MLP(*layers)


class QNetwork(nn.Module):
    """State-action values ``Q(s, ·)`` for a discrete action space: encoder, then MLP; or, with
    ``atoms > 1``, ``atoms`` outputs per action (a distributional agent's logits or quantiles).

    Args:
        obs: The observation encoder (:func:`~rltrain.agents.nn.encoders.make_encoder`), or a
            flat observation size.
        num_actions: Number of discrete actions.
        hidden_sizes: Hidden layer widths. The dueling head splits after the last one.
        dueling: Use the dueling head ``Q = V + A - mean(A)`` (Wang et al. 2016,
            arXiv:1511.06581, Eq. 9), per atom for ``atoms > 1`` (as Rainbow).
        atoms: Outputs per action. Default 1.
        layer_norm: A LayerNorm after each hidden layer (PQN's). Default False.
        noise: Noisy linear layers after the encoder, of this initial scale ``sigma0``
            (:class:`~rltrain.agents.nn.noisy.NoisyLinear`; Rainbow's exploration); None:
            plain ones. Default None.

    Its forward calls the encoder's and the MLP's ``forward`` directly, as :class:`MLP` calls
    its layers': hooks registered on those parts do not run; register them on the QNetwork.
    """

    def __init__(self, obs: int | Encoder, num_actions: int, hidden_sizes: Sequence[int],
                 *, dueling: bool = False, atoms: int = 1, layer_norm: bool = False,
                 noise: float | None = None) -> None:
        super().__init__()
        self.encoder = as_encoder(obs)
        obs_dim = self.encoder.out_features
        self.dueling, self.num_actions, self.atoms = dueling, num_actions, atoms
        if dueling:
            if not hidden_sizes:
                raise ValueError("A dueling Q-network needs at least one hidden layer.")
            self.torso = mlp(obs_dim, hidden_sizes[:-1], hidden_sizes[-1],
                             layer_norm=layer_norm, noise=noise)
            self.value = nn.Sequential(nn.ReLU(), linear(hidden_sizes[-1], atoms, noise))
            self.advantage = nn.Sequential(
                nn.ReLU(), linear(hidden_sizes[-1], num_actions * atoms, noise))
        else:
            self.q = mlp(obs_dim, hidden_sizes, num_actions * atoms, layer_norm=layer_norm,
                         noise=noise)

    def forward(self, obs: ObsTensors) -> torch.Tensor:
        """Q-values, shape ``[batch, num_actions]``; ``[batch, num_actions, atoms]`` for
        ``atoms > 1``."""
        # Two Module.__call__ fewer per acting step (docs/benchmarks.md, "Figures behind
        # implementation choices").
        encoded: torch.Tensor = self.encoder.forward(obs)
        if not self.dueling:
            out: torch.Tensor = self.q.forward(encoded)
            return out if self.atoms == 1 else out.view(-1, self.num_actions, self.atoms)
        features = self.torso.forward(encoded)
        shape = (-1, self.num_actions) if self.atoms == 1 else (-1, self.num_actions, self.atoms)
        advantage = self.advantage(features).view(shape)
        value = self.value(features).view(shape[0], 1, *shape[2:])
        return value + advantage - advantage.mean(dim=1, keepdim=True)  # type: ignore[no-any-return]


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak-average ``online``'s parameters into ``target``'s: ``θ' ← τθ + (1-τ)θ'``;
    ``tau >= 1`` copies them exactly (a hard update)."""
    targets: list[torch.Tensor] = list(target.parameters())
    params: list[torch.Tensor] = list(online.parameters())
    if len(targets) != len(params):
        raise ValueError(f"soft_update: the target has {len(targets)} parameters, the online "
                         f"network {len(params)}.")
    if tau >= 1.0:
        torch._foreach_copy_(targets, params)
    else:  # one call for every parameter (a loop of lerp_ costs a call each)
        torch._foreach_lerp_(targets, params, tau)


#: Bounds of a squashed Gaussian's log-std (CleanRL's and SpinningUp's).
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def squash(u: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, scale: torch.Tensor,
           bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a = tanh(u) * scale + bias`` for a draw ``u ~ N(mean, std)``, and ``log π(a)``
    (``[B]``): the Gaussian's, less ``Σ log(1 - tanh(u)²)`` (written ``2 (log 2 - u -
    softplus(-2u))``, finite where ``tanh(u)`` rounds to ±1) and ``Σ log scale``."""
    log_prob = (-0.5 * ((u - mean) / std).square() - std.log()
                - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
    return torch.tanh(u) * scale + bias, log_prob - scale.log().sum()


class BoundedActor(nn.Module):
    """An actor whose actions in ``[-1, 1]`` map into a ``Box``'s bounds: ``a * scale + bias``
    (``scale``, ``bias``: buffers of the half-range and the centre).

    Args:
        low: The action space's lower bounds (finite).
        high: Its upper bounds.
    """

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """An action in ``[-1, 1]`` in the env's units."""
        return action * self.scale + self.bias

    def normalized(self, action: torch.Tensor) -> torch.Tensor:
        """An env-unit action in ``[-1, 1]`` (the inverse of :meth:`to_env`)."""
        return (action - self.bias) / self.scale


class SquashedGaussianActor(BoundedActor):
    """``a = tanh(u) * scale + bias`` with ``u ~ N(μ(s), σ(s))``: a Gaussian policy squashed into
    a ``Box``'s bounds, the log-std bounded to ``[LOG_STD_MIN, LOG_STD_MAX]`` by a tanh.

    ``log π(a|s) = log N(u; μ, σ) - Σ log(1 - tanh(u)²) - Σ log scale`` (Haarnoja et al. 2018,
    arXiv:1801.01290, Appendix C), with ``log(1 - tanh(u)²)`` written ``2 (log 2 - u -
    softplus(-2u))`` so it stays finite where ``tanh(u)`` rounds to ±1.

    Args:
        obs: The observation encoder, or a flat observation size.
        action_dim: Action size.
        hidden_sizes: Hidden widths (ReLU).
        low: The action space's lower bounds (finite).
        high: Its upper bounds.
    """

    def __init__(self, obs: int | Encoder, action_dim: int, hidden_sizes: Sequence[int],
                 low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__(low, high)
        self.encoder = as_encoder(obs)
        self.net = mlp(self.encoder.out_features, hidden_sizes, 2 * action_dim)

    def distribution(self, obs: ObsTensors) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and std before the squash, ``[B, action_dim]`` each."""
        mean, log_std = self.net(self.encoder(obs)).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std.exp()

    def forward(self, obs: ObsTensors, noise: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample in the env's bounds and its log-probability ``[B]``.
        ``noise``: the standard normal draws ``[B, action_dim]`` (default: drawn here)."""
        mean, std = self.distribution(obs)
        u = mean + std * (torch.randn_like(mean) if noise is None else noise)
        return squash(u, mean, std, self.scale, self.bias)

    def mode(self, obs: ObsTensors) -> torch.Tensor:
        """The deterministic action ``tanh(μ(s)) * scale + bias``."""
        return self.to_env(torch.tanh(self.distribution(obs)[0]))


class DeterministicActor(BoundedActor):
    """``a = tanh(μ(s))``: a deterministic policy in ``[-1, 1]`` (TD3's and DDPG's actor);
    :meth:`to_env` maps it into a ``Box``'s bounds (``a * scale + bias``).

    Args:
        obs: The observation encoder, or a flat observation size.
        action_dim: Action size.
        hidden_sizes: Hidden widths (ReLU).
        low: The action space's lower bounds (finite).
        high: Its upper bounds.
    """

    def __init__(self, obs: int | Encoder, action_dim: int, hidden_sizes: Sequence[int],
                 low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__(low, high)
        self.encoder = as_encoder(obs)
        self.net = mlp(self.encoder.out_features, hidden_sizes, action_dim)

    def forward(self, obs: ObsTensors) -> torch.Tensor:
        """The action in ``[-1, 1]``, ``[B, action_dim]``."""
        return torch.tanh(self.net(self.encoder(obs)))


class TwinQ(nn.Module):
    """Two critics ``Q₁(s, a)``, ``Q₂(s, a)`` behind one call (``[2, B]``), over the features
    of one observation encoder (shared by both, as SB3's critics share theirs); ``n_critics``
    makes another number of them (DDPG's one).

    Two plain MLPs: stacking their weights into one batched matrix product (as LeanRL does
    with ``torch.func``; ``baddbmm`` against two ``linear`` calls) was slower per forward and
    backward pass on a CPU (``docs/benchmarks.md``, "Figures behind implementation choices").

    Args:
        obs: The observation encoder, or a flat observation size.
        action_dim: Action size.
        hidden_sizes: Hidden widths (ReLU).
        n_critics: How many critics. Default 2.
    """

    def __init__(self, obs: int | Encoder, action_dim: int, hidden_sizes: Sequence[int],
                 n_critics: int = 2) -> None:
        super().__init__()
        self.encoder = as_encoder(obs)
        self.critics = nn.ModuleList(
            [mlp(self.encoder.out_features + action_dim, hidden_sizes, 1)
             for _ in range(n_critics)])

    def forward(self, obs: ObsTensors, action: torch.Tensor) -> torch.Tensor:
        """``[Q₁(s, a), Q₂(s, a)]``, shape ``[n_critics, B]``."""
        x = torch.cat([self.encoder(obs), action], dim=-1)
        return torch.stack([critic(x).squeeze(-1) for critic in self.critics])

    def first(self, obs: ObsTensors, action: torch.Tensor) -> torch.Tensor:
        """``Q₁(s, a)`` alone, ``[B]`` (TD3's actor loss)."""
        return self.critics[0](torch.cat([self.encoder(obs), action], dim=-1)).squeeze(-1)  # type: ignore[no-any-return]

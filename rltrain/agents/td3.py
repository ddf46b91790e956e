"""Twin Delayed DDPG (Fujimoto et al. 2018, arXiv:1802.09477) for continuous actions, and DDPG
(Lillicrap et al. 2015, arXiv:1509.02971) as TD3 with one critic, no target smoothing and no
delay (as Stable-Baselines3 builds it), trained by the off-policy strategy.

Per gradient step, on a replayed batch ``(s, a, r, s', terminated)``, with the actor's actions
``μ(s)`` in ``[-1, 1]`` (``tanh``) and the critics seeing actions rescaled to ``[-1, 1]``:

    smoothing: ã' = clip(μ'(s') + clip(ε, -c, c), -1, 1),  ε ~ N(0, σ̃²)
    critic:    y = r + γ (1 - terminated) min_i Q'_i(s', ã')
               L_Q = Σ_i E[(Q_i(s, a) - y)²]
    actor:     L_μ = -E[Q_1(s, μ(s))]                              (every ``policy_delay``)
    targets:   θ' ← τ θ + (1 - τ) θ'  for the critics and the actor (every ``policy_delay``)

Exploration adds ``N(0, σ²)`` to ``μ(s)`` while collecting and clips to the bounds.

Units: ``exploration_noise`` (σ), ``target_policy_noise`` (σ̃) and ``target_noise_clip`` (c)
are fractions of the action space's half-range ``(high - low) / 2``, so in the env's action
units the exploration noise's standard deviation is ``σ (high - low) / 2``: the paper's
``policy_noise * max_action`` for symmetric bounds, CleanRL's ``* action_scale`` and SB3's
noise on actions rescaled to ``[-1, 1]``. For HalfCheetah's ``[-1, 1]`` they are the same.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from typing_extensions import override

from rltrain.agents.base import Policy
from rltrain.agents.continuous import box_bounds, check_continuous_spaces, sb3_schedule
from rltrain.agents.kinds import ReplayAgent
from rltrain.agents.nn.encoders import Encoder, make_encoder
from rltrain.agents.nn.networks import DeterministicActor, TwinQ, soft_update
from rltrain.agents.nn.observation_spaces import encoder_setting
from rltrain.agents.replay_terms import discount, send_td_errors, weighted
from rltrain.buffers.replay import ReplayBatch
from rltrain.optim import Optimization, adam
from rltrain.runtime.cadence import is_multiple
from rltrain.settings.base import Settings, discount_factor, learning_rate, polyak, setting, widths
from rltrain.settings.loops import OffPolicyConfig
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep


@dataclass
class TD3Config(Settings):
    """TD3's hyperparameters (defaults: the paper's and Stable-Baselines3's; noise settings are
    fractions of the action half-range, see the module docstring).

    Attributes:
        hidden_sizes: Hidden widths of the actor and of each critic. Default [400, 300].
        lr: Adam learning rate of the actor and the critics. Default 1e-3.
        gamma: Discount factor. Default 0.99.
        tau: Polyak rate of the target networks. Default 0.005.
        policy_delay: Gradient steps per actor and target update. Default 2.
        n_critics: Critics whose minimum is the target (1: DDPG's single critic). Default 2.
        exploration_noise: Standard deviation σ of the Gaussian noise added to the actor's
            action while collecting (0: none). Default 0.1.
        target_policy_noise: Standard deviation σ̃ of the target policy smoothing noise
            (0: none). Default 0.2.
        target_noise_clip: The smoothing noise is clipped to ``±`` this. Default 0.5.
        normalize_images: Scale image pixels to [0, 1] in the CNN encoders. Default True.
        encoder: How 3-D ``Box`` observations are encoded: ``"auto"``, ``"mlp"`` or ``"cnn"``.
            Default ``"auto"`` (docs/encoders.md).
    """

    hidden_sizes: list[int] = widths(400, 300)
    lr: float = learning_rate(1e-3)
    gamma: float = discount_factor()
    tau: float = polyak(0.005)
    policy_delay: int = setting(2, ge=1, unit="gradient steps")
    n_critics: int = setting(2, ge=1)
    exploration_noise: float = setting(0.1, ge=0, why="a fraction of the action half-range")
    target_policy_noise: float = setting(0.2, ge=0, why="a fraction of the action half-range")
    target_noise_clip: float = setting(0.5, ge=0, why="a fraction of the action half-range")
    normalize_images: bool = True
    encoder: str = encoder_setting()


@dataclass
class DDPGConfig(TD3Config):
    """DDPG as TD3 with one critic, no target smoothing and an actor update every gradient
    step (Stable-Baselines3's ``DDPG``). Same attributes as :class:`TD3Config`."""

    policy_delay: int = 1
    n_critics: int = 1
    target_policy_noise: float = 0.0
    target_noise_clip: float = 0.0


class TD3Policy(Policy):
    """``μ(s)`` plus Gaussian exploration noise while collecting (clipped to the bounds);
    ``μ(s)`` alone when ``deterministic``. Actions in the env's units."""

    def __init__(self, actor: DeterministicActor, exploration_noise: float) -> None:
        super().__init__()
        self.actor, self.exploration_noise = actor, exploration_noise

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        action = self.actor(obs)
        if not deterministic and self.exploration_noise > 0:
            noise = torch.randn_like(action) * self.exploration_noise
            action = (action + noise).clamp(-1.0, 1.0)
        return PolicyStep(self.actor.to_env(action), None, {})


@register_agent("td3", TD3Config,
                "twin delayed DDPG (clipped double Q, target smoothing); continuous actions")
class TD3(ReplayAgent):
    """TD3 for vector, image, ``Discrete``, ``MultiDiscrete`` or ``Dict`` observations and
    bounded ``Box`` actions.

    Args:
        config: Hyperparameters. Default: the class's config type's defaults.
    """

    replay_sampling = frozenset({"n_step", "prioritized"})

    config_type: type[TD3Config] = TD3Config
    actor: DeterministicActor
    actor_target: DeterministicActor
    critic: TwinQ
    critic_target: TwinQ

    @override
    def gamma(self) -> float:
        return self.config.gamma

    def __init__(self, config: TD3Config | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else self.config_type()

    @override
    def default_strategy_settings(self) -> OffPolicyConfig:
        return sb3_schedule()

    @override
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        check_continuous_spaces(type(self).__name__, observation_space, action_space,
                                self.config.encoder)

    @override
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        c = self.config
        action_dim, low, high = box_bounds(action_space)
        self.actor = DeterministicActor(self.encoder(observation_space), action_dim,
                                        c.hidden_sizes, low, high)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = TwinQ(self.encoder(observation_space), action_dim, c.hidden_sizes,
                            c.n_critics)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)

    def encoder(self, observation_space: gym.Space[Any]) -> Encoder:
        """A new observation encoder (one for the actor, one for the critics)."""
        return make_encoder(observation_space, normalize_images=self.config.normalize_images,
                            encoder=self.config.encoder)

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"critic": adam(self.critic.parameters(), lr=self.config.lr),
                "actor": adam(self.actor.parameters(), lr=self.config.lr)}

    @override
    def policy(self, device: torch.device) -> TD3Policy:
        actor = self.actor
        if torch.device(device) != self.device:
            actor = copy.deepcopy(actor).to(device)
        return TD3Policy(actor, self.config.exploration_noise)

    @override
    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        obs, next_obs = batch.observations, batch.next_observations
        with torch.no_grad():
            next_action = self.actor_target(next_obs)
            # ε ~ N(0, σ̃²) clipped to ±c; drawn for the whole batch in one call, so a batch
            # split over several processes draws as the whole batch would
            noise = (torch.randn(next_action.shape, device=self.device)
                     * c.target_policy_noise).clamp(-c.target_noise_clip, c.target_noise_clip)
            next_action = (next_action + noise).clamp(-1.0, 1.0)  # ã' = clip(μ'(s') + ε, -1, 1)
            next_q = self.critic_target(next_obs, next_action).min(dim=0).values
            # y = r + γ (1 - terminated) min_i Q'_i(s', ã'); γ^k for an n-step window
            target = batch.rewards + discount(batch, c.gamma) * (1.0 - batch.terminated) * next_q
        actions = self.actor.normalized(batch.actions.reshape(next_action.shape))
        q = self.critic(obs, actions)
        td = q - target
        critic_loss = weighted(td.square().sum(dim=0), batch)  # Σ_i E[(Q_i(s, a) - y)²]
        optim.step("critic", critic_loss)
        send_td_errors(batch, td.abs().mean(dim=0))
        metrics: dict[str, MetricValue] = {"critic_loss": critic_loss.detach(),
                                           "q": q.detach().mean()}
        # after every d-th critic step (the d-th, 2d-th, ...), as the paper's code and SB3's
        if is_multiple(optim.gradient_step, c.policy_delay):
            actor_loss = -self.critic.first(obs, self.actor(obs)).mean()  # -E[Q_1(s, μ(s))]
            optim.step("actor", actor_loss)
            metrics["actor_loss"] = actor_loss.detach()
            soft_update(self.critic_target, self.critic, c.tau)
            soft_update(self.actor_target, self.actor, c.tau)
        return metrics


@register_agent("ddpg", DDPGConfig,
                "deep deterministic policy gradient (TD3 with one critic); continuous actions")
class DDPG(TD3):
    """DDPG: :class:`TD3` with :class:`DDPGConfig`'s settings.

    Args:
        config: Hyperparameters. Default: :class:`DDPGConfig` ().
    """

    config_type = DDPGConfig

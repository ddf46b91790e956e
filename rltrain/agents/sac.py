"""Soft Actor-Critic (Haarnoja et al. 2018, arXiv:1801.01290 and arXiv:1812.05905) for
continuous actions, trained by the off-policy strategy.

Per gradient step, on a replayed batch ``(s, a, r, s', terminated)``:

    critic:  y = r + γ (1 - terminated) (min_i Q'_i(s', a') - α log π(a'|s')),  a' ~ π(·|s')
             L_Q = Σ_i E[(Q_i(s, a) - y)²]
    actor:   L_π = E[α log π(ã|s) - min_i Q_i(s, ã)],  ã ~ π(·|s)   (every ``policy_delay``)
    alpha:   L_α = -E[log α (log π(ã|s) + H̄)],  H̄ = target entropy (-|A| by default)
    targets: θ'_i ← τ θ_i + (1 - τ) θ'_i

A truncated episode bootstraps from its true final observation: only ``terminated`` stops
the target. Actions are stored in the env's units; the critics see them rescaled to [-1, 1].
Observations go through encoders chosen from the observation space (a CNN for images:
:mod:`rltrain.agents.nn.encoders`), one for the actor and one shared by the twin critics (SB3's
``share_features_extractor=False``), each trained by its own loss.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from typing_extensions import override

from rltrain.agents.base import Policy
from rltrain.agents.continuous import box_bounds, check_continuous_spaces, sb3_schedule
from rltrain.agents.kinds import ReplayAgent
from rltrain.agents.nn.distributions import LOG_STD_LIMIT
from rltrain.agents.nn.encoders import Encoder, make_encoder
from rltrain.agents.nn.networks import SquashedGaussianActor, TwinQ, soft_update
from rltrain.agents.nn.observation_spaces import encoder_setting
from rltrain.agents.nn.sde import StateDependentSquashedActor
from rltrain.agents.replay_terms import discount, send_td_errors, weighted
from rltrain.buffers.replay import ReplayBatch
from rltrain.optim import Optimization, adam
from rltrain.runtime.cadence import is_multiple
from rltrain.settings.base import Settings, discount_factor, learning_rate, polyak, setting, widths
from rltrain.settings.loops import OffPolicyConfig
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep


@dataclass
class SACConfig(Settings):
    """SAC's hyperparameters (defaults: Stable-Baselines3's, RL-Zoo's learning rate for
    Pendulum-v1).

    Attributes:
        hidden_sizes: Hidden widths of the actor and of each critic. Default [256, 256].
        lr: Adam learning rate of the actor, the critics and the temperature. Default 3e-4
            (the SAC paper's and SB3's; the Pendulum preset takes RL-Zoo's 1e-3).
        gamma: Discount factor. Default 0.99.
        tau: Polyak rate of the target critics. Default 0.005.
        alpha: A fixed temperature; None learns it (log α by Adam). Default None.
        alpha_init: The learned temperature's start. Default 1.0.
        target_entropy: The entropy the learned temperature aims at; None: ``-|A|``.
            Default None.
        policy_delay: Gradient steps per actor (and temperature) update, TD3's delayed
            updates; 1 updates every step. Default 1.
        target_update_interval: Gradient steps between target updates. Default 1.
        use_sde: Explore with generalized state-dependent noise (gSDE; SB3's ``use_sde``):
            ``tanh(μ(s) + z(s) θ)``, the mean clipped to ±2, one ``θ`` per sub-env for acting
            and one per gradient step in training (:mod:`rltrain.agents.nn.sde`). Default False.
        sde_sample_freq: Env steps between draws of the acting matrices; -1 draws after each
            round of gradient steps, as SB3 draws at each collection's start. Default -1.
        log_std_init: The start of gSDE's ``log σ`` (SB3's SAC default). Default -3.0.
        sde_full_std: gSDE learns one ``σ`` per feature and action; False: one per feature,
            shared by the actions (SB3's ``full_std``). Default True.
        sde_expln: gSDE's ``σ`` grows linearly above ``log σ = 0`` instead of exponentially
            (SB3's ``use_expln``, which RL-Zoo's gSDE entries set). Default False.
        sde_learn_features: The loss's gradient reaches the policy's features through gSDE's
            noise and variance (SB3's ``learn_features``, which its SAC sets). Default True.
        normalize_images: Scale image pixels to [0, 1] in the CNN encoders (``uint8`` by 255;
            SB3's ``normalize_images``); False feeds them as they are. Default True.
        encoder: How 3-D ``Box`` observations are encoded: ``"auto"`` (a CNN for images,
            decided as Stable-Baselines3 does; other grids flattened), ``"mlp"`` (flattened)
            or ``"cnn"`` (a CNN). Default ``"auto"`` (docs/encoders.md).
    """

    hidden_sizes: list[int] = widths(256, 256)
    lr: float = learning_rate(3e-4)
    gamma: float = discount_factor()
    tau: float = polyak(0.005)
    alpha: float | None = setting(None, ge=0, none="to learn it")
    alpha_init: float = setting(1.0, gt=0)
    target_entropy: float | None = None
    policy_delay: int = setting(1, ge=1, unit="gradient steps")
    target_update_interval: int = setting(1, ge=1, unit="gradient steps")
    use_sde: bool = False
    sde_sample_freq: int = -1
    sde_full_std: bool = True
    sde_expln: bool = False
    sde_learn_features: bool = True
    log_std_init: float = setting(-3.0, ge=-LOG_STD_LIMIT, le=LOG_STD_LIMIT)
    normalize_images: bool = True
    encoder: str = encoder_setting()

    @override
    def rules(self) -> list[tuple[bool, str]]:
        return [(self.sde_sample_freq == -1 or self.sde_sample_freq >= 1,
                 f"sde_sample_freq must be >= 1 env step, or -1 (draw after each round of "
                 f"gradient steps); got {self.sde_sample_freq}.")]


class SACPolicy(Policy):
    """Samples from the squashed Gaussian while collecting; ``tanh(mean)`` (rescaled) when
    ``deterministic``."""

    def __init__(self, actor: SquashedGaussianActor | StateDependentSquashedActor) -> None:
        super().__init__()
        self.actor = actor

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        action = self.actor.mode(obs) if deterministic else self.actor(obs)[0]
        return PolicyStep(action, None, {})


@register_agent("sac", SACConfig,
                "soft actor-critic (twin Q, learned temperature); continuous actions")
class SAC(ReplayAgent):
    """SAC for vector, image, ``Discrete``, ``MultiDiscrete`` or ``Dict`` observations and
    bounded ``Box`` actions.

    Args:
        config: Hyperparameters. Default: :class:`SACConfig` ().
    """

    replay_sampling = frozenset({"n_step", "prioritized"})

    actor: SquashedGaussianActor | StateDependentSquashedActor
    critic: TwinQ
    critic_target: TwinQ
    log_alpha: torch.nn.Parameter

    @override
    def gamma(self) -> float:
        return self.config.gamma

    def __init__(self, config: SACConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else SACConfig()

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
        self.actor = (
            StateDependentSquashedActor(self.encoder(observation_space), action_dim,
                                        c.hidden_sizes, low, high, c.log_std_init,
                                        c.sde_sample_freq, full_std=c.sde_full_std,
                                        expln=c.sde_expln,
                                        learn_features=c.sde_learn_features)
            if c.use_sde else SquashedGaussianActor(self.encoder(observation_space),
                                                    action_dim, c.hidden_sizes, low, high))
        self.critic = TwinQ(self.encoder(observation_space), action_dim, c.hidden_sizes)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(c.alpha_init)),
                                            requires_grad=c.alpha is None)
        self.target_entropy = (-float(action_dim) if c.target_entropy is None
                               else c.target_entropy)

    def encoder(self, observation_space: gym.Space[Any]) -> Encoder:
        """A new observation encoder (one for the actor, one for the critics)."""
        return make_encoder(observation_space, normalize_images=self.config.normalize_images,
                            encoder=self.config.encoder)

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        optimizers: dict[str, torch.optim.Optimizer] = {
            "critic": adam(self.critic.parameters(), lr=c.lr),
                      "actor": adam(self.actor.parameters(), lr=c.lr)}
        if c.alpha is None:
            optimizers["alpha"] = adam([self.log_alpha], lr=c.lr)
        return optimizers

    @override
    def policy(self, device: torch.device) -> SACPolicy:
        actor = self.actor
        if torch.device(device) != self.device:
            actor = copy.deepcopy(actor).to(device)
        return SACPolicy(actor)

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature α (fixed, or ``exp(log α)``), detached."""
        c = self.config
        return (torch.tensor(c.alpha, device=self.device) if c.alpha is not None
                else self.log_alpha.detach().exp())

    def normalized(self, action: torch.Tensor) -> torch.Tensor:
        """Env-unit actions rescaled to [-1, 1], as the critics see them."""
        return self.actor.normalized(action)

    @override
    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        obs, next_obs = batch.observations, batch.next_observations
        alpha = self.alpha
        # Every sample's two draws (a' for the target, ã for the actor) in one sample-major
        # draw: a batch split over several processes draws as the whole batch would.
        noise = torch.randn(batch.rewards.shape[0], 2, self.actor.scale.numel(),
                            device=self.device)
        # gSDE: one θ for the batch, both draws (SB3's reset_noise() per gradient step)
        theta = self.actor.sde.weights() if isinstance(
            self.actor, StateDependentSquashedActor) else None
        with torch.no_grad():
            next_action, next_log_prob = self.actor(next_obs, noise[:, 0], *self.matrix(theta))
            next_q = self.critic_target(next_obs, self.normalized(next_action)).min(dim=0).values
            # y = r + γ (1 - terminated) (min_i Q'_i(s', a') - α log π(a'|s')); γ^k for an
            # n-step window of k transitions, r its discounted sum
            target = batch.rewards + discount(batch, c.gamma) * (1.0 - batch.terminated) * (
                next_q - alpha * next_log_prob)
        q = self.critic(obs, self.normalized(batch.actions.reshape(next_action.shape)))
        td = q - target
        critic_loss = weighted(td.square().sum(dim=0), batch)  # Σ_i E[(Q_i(s, a) - y)²]
        optim.step("critic", critic_loss)
        send_td_errors(batch, td.abs().mean(dim=0))
        metrics: dict[str, MetricValue] = {"critic_loss": critic_loss.detach(),
                                           "q": q.detach().mean(), "alpha": alpha}
        done = optim.gradient_step - 1  # gradient steps before this one
        if is_multiple(done, c.policy_delay):
            action, log_prob = self.actor(obs, noise[:, 1], *self.matrix(theta, detach=False))
            q_pi = self.critic(obs, self.normalized(action)).min(dim=0).values
            actor_loss = (alpha * log_prob - q_pi).mean()  # E[α log π(ã|s) - min_i Q_i(s, ã)]
            optim.step("actor", actor_loss)
            metrics.update(actor_loss=actor_loss.detach(), entropy=-log_prob.detach().mean())
            if c.alpha is None:
                # -E[log α (log π(ã|s) + H̄)]
                alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
                optim.step("alpha", alpha_loss)
                metrics["alpha_loss"] = alpha_loss.detach()
        if is_multiple(done, c.target_update_interval):
            soft_update(self.critic_target, self.critic, c.tau)
        if isinstance(self.actor, StateDependentSquashedActor) and c.sde_sample_freq == -1:
            self.actor.sde.new_rollout()
        return metrics

    @staticmethod
    def matrix(theta: torch.Tensor | None, detach: bool = True) -> tuple[torch.Tensor, ...]:
        """The gSDE actor's extra argument (``θ``, detached for the target), or none."""
        if theta is None:
            return ()
        return (theta.detach() if detach else theta,)

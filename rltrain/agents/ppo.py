"""Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347), clipped objective.

The loss of one minibatch (Eq. 7 and 9 of the paper), with the ratio
``r = π(a|s) / π_old(a|s)`` and advantages ``A`` from GAE(λ) (normalised per minibatch):

    L = E[max(-A r, -A clip(r, 1-ε, 1+ε))] + c_v E[(V(s) - R)²] - c_e E[H(π(·|s))]

With the implementation details of "The 37 Implementation Details of PPO" (Huang et al. 2022)
that apply to vector observations: orthogonal initialisation (√2 encoder and trunk, 0.01 policy
head, 1 value head), Adam with eps 1e-5, linear learning-rate (and optional clip-range) annealing,
shuffled minibatches covering the rollout each epoch, optional value clipping, a global
gradient-norm clip, and for ``Box`` actions a state-independent log-std, the unclipped action
stored and the clipped one sent. Observation normalisation and reward scaling live in the
agent's state (:mod:`rltrain.agents.nn.normalize`), so every checkpoint evaluates as trained.
The rollout, minibatches and epochs are the on-policy strategy's. Observations go through the
encoder of their space (:mod:`rltrain.agents.nn.encoders`), one for π and V (CleanRL's Atari PPO).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, cast

import gymnasium as gym
import torch
import torch.nn.functional as F
from typing_extensions import override

from rltrain.agents.base import Policy, SpaceError
from rltrain.agents.kinds import RolloutAgent
from rltrain.agents.nn.actor_critic import ActorCritic
from rltrain.agents.nn.distributions import ActionHead
from rltrain.agents.nn.encoders import check_observation_space, make_encoder
from rltrain.agents.nn.masking import check_mask_space
from rltrain.agents.nn.normalize import RunningMeanStd
from rltrain.agents.nn.observation_spaces import check_normalizable
from rltrain.agents.nn.recurrent import (
    RecurrentActorCritic,
    recurrent_next_values,
)
from rltrain.agents.nn.sde import StateDependentNoise
from rltrain.agents.ppo_config import PPOConfig
from rltrain.agents.returns import gae
from rltrain.buffers.observations import leading_tensor, map_obs
from rltrain.buffers.recurrent import STATE_IN, RecurrentBatch, RecurrentRollout
from rltrain.buffers.rollout import RolloutBatch, RolloutBuffer
from rltrain.optim import Optimization, adam
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep

__all__ = ["PPO", "PPOConfig", "PPOPolicy", "explained_variance"]


class PPOPolicy(Policy):
    """Samples from ``π`` while collecting (returning the log-probability, the value and the
    unclipped action in ``info``); the distribution's mode when ``deterministic``."""

    low: torch.Tensor
    high: torch.Tensor
    offset: torch.Tensor

    def __init__(self, net: ActorCritic, obs_rms: RunningMeanStd | None, clip_obs: float,
                 low: torch.Tensor, high: torch.Tensor, offset: torch.Tensor) -> None:
        super().__init__()
        self.net, self.obs_rms, self.clip_obs = net, obs_rms, clip_obs
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        self.register_buffer("offset", offset)

    def observe(self, obs: ObsTensors) -> ObsTensors:
        """Observations as the networks see them: normalised (flattened) when that is on
        (vectors only: ``PPO.check_spaces``)."""
        if self.obs_rms is None:
            return obs
        return self.obs_rms.normalize(cast(torch.Tensor, obs).flatten(1).float(), self.clip_obs)

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """What the env receives: indices shifted by the space's start, or continuous
        actions clipped to its bounds."""
        kind = self.net.head.kind
        if kind == "Box":
            return torch.maximum(torch.minimum(raw, self.high), self.low)
        return raw.long() if kind == "MultiBinary" else raw.long() + self.offset

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        obs = self.observe(obs)
        if isinstance(self.net, RecurrentActorCritic):
            return self._act_recurrent(obs, state, deterministic)
        if deterministic:  # evaluation: the mode, no value needed
            return PolicyStep(self.to_env(self.net.distribution(obs).mode()), None, {})
        dist, value = self.net(obs)
        raw = dist.sample()
        return PolicyStep(self.to_env(raw), None,
                          {"log_prob": dist.log_prob(raw), "value": value, "raw_action": raw})

    def _act_recurrent(self, obs: ObsTensors, state: PolicyState,
                       deterministic: bool) -> PolicyStep:
        assert isinstance(self.net, RecurrentActorCritic)
        before = (state if state is not None
                  else self.initial_state(leading_tensor(obs).shape[0]))[0]  # type: ignore[index]
        dist, value, after = self.net.step(obs, before)
        if deterministic:
            return PolicyStep(self.to_env(dist.mode()), (after,), {})
        raw = dist.sample()
        return PolicyStep(self.to_env(raw), (after,),
                          {"log_prob": dist.log_prob(raw), "value": value, "raw_action": raw,
                           STATE_IN: before})

    @override
    def initial_state(self, num_envs: int) -> PolicyState:
        if not isinstance(self.net, RecurrentActorCritic):
            return None
        return (torch.zeros(num_envs, self.net.core.state_size, device=self.low.device),)

    @override
    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        if state is None:
            return None
        assert isinstance(state, tuple)
        keep = (~done.to(state[0].device)).to(state[0].dtype)[:, None]
        return (state[0] * keep,)


@register_agent("ppo", PPOConfig,
                "proximal policy optimization; discrete or continuous actions")
class PPO(RolloutAgent):
    """PPO for vector, image, ``Discrete``, ``MultiDiscrete`` or ``Dict`` observations and
    ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box`` actions (on-policy).

    Args:
        config: Hyperparameters. Default: :class:`PPOConfig` ().
    """

    net: ActorCritic
    clip_now: torch.Tensor

    def __init__(self, config: PPOConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else PPOConfig()
        self.obs_rms: RunningMeanStd | None = None
        self.return_rms: RunningMeanStd | None = None

    @override
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        check_observation_space(type(self).__name__, observation_space, self.config.encoder)
        check_mask_space(type(self).__name__, observation_space, action_space)
        if self.config.normalize_observations:
            check_normalizable(type(self).__name__, observation_space, self.config.encoder)
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                         gym.spaces.MultiBinary, gym.spaces.Box)):
            raise SpaceError(f"{type(self).__name__} needs a Discrete, MultiDiscrete, "
                             f"MultiBinary or Box action space; got {action_space}.")
        if self.config.use_sde and not (isinstance(action_space, gym.spaces.Box)
                                        and len(action_space.shape) == 1):
            raise SpaceError(f"{type(self).__name__}'s gSDE (use_sde) explores 1-D Box action "
                             f"spaces; got {action_space}. Set agent.use_sde=false.")
        if (isinstance(action_space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))
                and len(action_space.shape) > 1):
            raise SpaceError(
                f"{type(self).__name__} takes 1-D {type(action_space).__name__} actions; got "
                f"shape {action_space.shape}. Flatten them with a gymnasium.ActionWrapper that "
                "reshapes a 1-D action into the env's.")

    @override
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        c = self.config
        encoder = make_encoder(observation_space, normalize_images=c.normalize_images,
                               encoder=c.encoder)
        head = ActionHead(action_space, c.log_std_init, state_independent_std=not c.use_sde)
        latent = c.hidden_sizes[-1] if c.hidden_sizes else encoder.out_features
        sde = (StateDependentNoise(latent, head.out_features, c.log_std_init, c.sde_sample_freq,
                                   full_std=c.sde_full_std, expln=c.sde_expln,
                                   learn_features=c.sde_learn_features)
               if c.use_sde else None)
        if c.recurrent is not None:
            self.net = RecurrentActorCritic(encoder, head, c.recurrent, c.recurrent_hidden_size,
                                            list(c.hidden_sizes), c.activation, c.shared_trunk,
                                            ortho_init=c.ortho_init)
        else:
            self.net = ActorCritic(encoder, head, list(c.hidden_sizes), c.activation,
                                   c.shared_trunk, ortho_init=c.ortho_init, sde=sde)
        if c.normalize_observations:
            self.obs_rms = RunningMeanStd((encoder.out_features,))
        if c.normalize_rewards:
            self.return_rms = RunningMeanStd(())
        self.register_buffer("clip_now", torch.tensor(c.clip_range))
        box = action_space if isinstance(action_space, gym.spaces.Box) else None
        self.action_bounds = (
            torch.as_tensor(box.low if box is not None else 0.0, dtype=torch.float32),
            torch.as_tensor(box.high if box is not None else 0.0, dtype=torch.float32),
            torch.as_tensor(getattr(action_space, "start", 0), dtype=torch.int64))

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        self.optimizer = adam(self.net.parameters(), lr=self.config.lr, eps=self.config.adam_eps)
        return {"ppo": self.optimizer}

    @override
    def make_rollout(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any], seed: int, device: torch.device
                     ) -> RolloutBuffer:
        """A :class:`~rltrain.buffers.RolloutBuffer`; for a recurrent PPO, a
        :class:`~rltrain.buffers.recurrent.RecurrentRollout` of whole sequences."""
        if isinstance(self.net, RecurrentActorCritic):
            return RecurrentRollout(n_steps, num_envs=num_envs,
                                    observation_space=observation_space,
                                    action_space=action_space,
                                    state_size=self.net.core.state_size, seed=seed,
                                    device=device)
        return super().make_rollout(n_steps, num_envs=num_envs,
                                    observation_space=observation_space,
                                    action_space=action_space, seed=seed, device=device)

    @override
    def policy(self, device: torch.device) -> PPOPolicy:
        net, obs_rms = self.net, self.obs_rms
        if torch.device(device) != self.device:
            net, obs_rms = copy.deepcopy(net).to(device), copy.deepcopy(obs_rms)
            obs_rms = obs_rms.to(device) if obs_rms is not None else None
        low, high, offset = (t.to(device) for t in self.action_bounds)
        return PPOPolicy(net, obs_rms, self.config.clip_observations, low, high, offset)

    @torch.no_grad()
    def prepare_rollout(self, rollout: RolloutBuffer) -> None:
        """Bootstrap values, GAE(λ) advantages and returns; then the statistics and schedules
        the update uses (observations normalised with the statistics the policy acted on)."""
        c, policy = self.config, self.policy(self.device)

        def seen(x: ObsTensors) -> ObsTensors:  # a batch [B, ...] as the networks see it
            return policy.observe(map_obs(lambda t: t.to(self.device), x))

        values = rollout.values.to(self.device)
        truncated = rollout.truncated.to(self.device)
        if isinstance(self.net, RecurrentActorCritic):
            assert isinstance(rollout, RecurrentRollout)
            next_values = recurrent_next_values(self.net, rollout, seen, values)
        else:
            last = seen(rollout.last_observations)
            next_values = torch.cat([values[1:], self.net.value(last).unsqueeze(0)])
            if truncated.any():  # bootstrap a time limit from the true final observation
                rows = truncated.cpu()
                final = seen(map_obs(lambda t: t[rows], rollout.final_observations))
                next_values[truncated] = self.net.value(final)
        rewards = self.scaled_rewards(rollout).to(self.device)
        advantages = gae(rewards, values, next_values, rollout.terminated.to(self.device),
                         truncated, c.gamma, c.gae_lambda)
        rollout.advantages.copy_(advantages)
        rollout.returns.copy_(advantages + values)
        if self.obs_rms is not None:  # vectors: normalised with the statistics acted on
            obs = cast(torch.Tensor, rollout.observations)
            normalized = cast(torch.Tensor, seen(obs.flatten(0, 1)))
            self.obs_rms.update(obs.flatten(0, 1).flatten(1), self.statistics)
            obs.copy_(normalized.reshape(obs.shape))
        self.set_schedules(rollout)
        if self.net.sde is not None:  # the next rollout explores with new matrices
            self.net.sde.new_rollout()
        self.log("explained_variance", explained_variance(values, advantages + values))

    def scaled_rewards(self, rollout: RolloutBuffer) -> torch.Tensor:
        """The rollout's rewards, divided by the running spread of the discounted return
        when ``normalize_rewards`` is on (statistics updated step by step, as SB3's
        ``VecNormalize``; the per-env returns carry over in the rollout). With several
        processes the statistics follow every rank's sub-envs together, ``[n_steps, ranks x
        num_envs]``, so that every rank keeps the same ones."""
        if self.return_rms is None:
            return rollout.rewards
        together = self.statistics.together  # [..., num_envs] of every rank side by side
        rewards, running = together(rollout.rewards), together(rollout.running_returns)
        ends = together((rollout.terminated | rollout.truncated).to(torch.uint8)).bool()
        scaled = torch.empty_like(rewards)
        for t in range(rollout.n_steps):
            running.mul_(self.config.gamma).add_(rewards[t])
            self.return_rms.update(running)  # every rank's returns are all here
            scaled[t] = self.return_rms.scale(rewards[t].to(self.device),
                                              self.config.clip_rewards).cpu()
            running[ends[t]] = 0.0
        rollout.running_returns.copy_(self.statistics.own(running, rollout.num_envs))
        return self.statistics.own(scaled, rollout.num_envs)

    def set_schedules(self, rollout: RolloutBuffer) -> None:
        """Learning rate and clip range for this update: linear in the env steps done before
        the rollout, from their start values to 0 at ``num_steps``."""
        c = self.config
        start = self.progress.env_steps - self.statistics.total(rollout.num_transitions)
        remaining = max(0.0, 1.0 - start / self.num_steps) if self.num_steps else 1.0
        if c.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = c.lr * remaining
        if c.anneal_clip_range:
            self.clip_now.fill_(c.clip_range * remaining)

    @override
    def training_step(self, batch: RolloutBatch | RecurrentBatch, optim: Optimization
                      ) -> dict[str, MetricValue]:
        c, clip = self.config, self.clip_now
        if isinstance(batch, RecurrentBatch):  # whole sequences, from their first state
            assert isinstance(self.net, RecurrentActorCritic)
            dist, values = self.net.sequences(batch.observations, batch.episode_starts,
                                              batch.initial_state)
        else:
            dist, values = self.net(batch.observations)
        log_ratio = dist.log_prob(batch.actions) - batch.log_probs
        ratio = log_ratio.exp()
        advantages = batch.advantages
        if c.normalize_advantage and self.statistics.total(advantages.numel()) > 1:
            mean, std = self.statistics.minibatch_mean_std(advantages, batch.advantage_moments)
            advantages = (advantages - mean) / (std + 1e-8)
        # Clipped surrogate (Eq. 7), as a loss: max(-A r, -A clip(r, 1-ε, 1+ε)).
        policy_loss = torch.max(-advantages * ratio,
                                -advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
        if c.clip_range_vf is None:
            value_loss = F.mse_loss(values, batch.returns)
        else:  # V clipped around the collected value; the larger error counts
            clipped = batch.values + (values - batch.values).clamp(-c.clip_range_vf,
                                                                   c.clip_range_vf)
            value_loss = torch.max((values - batch.returns).square(),
                                   (clipped - batch.returns).square()).mean()
        entropy = dist.entropy().mean()
        loss = policy_loss - c.ent_coef * entropy + c.vf_coef * value_loss
        optim.step("ppo", loss, max_norm=c.max_grad_norm)
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # k3: unbiased, always >= 0
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return {"policy_loss": policy_loss.detach(), "value_loss": value_loss.detach(),
                "entropy": entropy.detach(), "approx_kl": approx_kl,
                "clip_fraction": clip_fraction, "ratio": ratio.detach().mean(),
                "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
                "clip_range": float(clip)}

    @override
    def update_done(self, metrics: Mapping[str, MetricValue]) -> bool:
        target = self.config.target_kl
        return target is not None and float(metrics["approx_kl"]) > 1.5 * target

    @override
    def ends_updates_early(self) -> bool:
        return self.config.target_kl is not None or type(self).update_done is not PPO.update_done


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var[R - V] / Var[R]``: 1 for a perfect critic, 0 for a constant one (NaN when the
    returns do not vary)."""
    variance = returns.var()
    return float("nan") if variance == 0 else float(1 - (returns - values).var() / variance)

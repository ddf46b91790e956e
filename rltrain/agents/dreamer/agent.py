"""Dreamer: learn a world model from replayed sequences, and an actor and critic in its
imagination (DreamerV1, arXiv:1912.01603, Algorithm 1, with DreamerV3's symlog, KL balance and
return normalisation). One ``training_step`` steps three optimizers in order: the world model,
then the actor, then the critic."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import override

from rltrain.agents.base import Policy, SpaceError, require_bounded
from rltrain.agents.dreamer.behavior import Actor, ReturnScale, imagine
from rltrain.agents.dreamer.world_model import ELU, State, WorldModel, rows, symexp, symlog
from rltrain.agents.kinds import ReplayAgent
from rltrain.agents.nn.networks import mlp, soft_update
from rltrain.agents.nn.observation_spaces import cli, flattenable
from rltrain.agents.returns import lambda_returns
from rltrain.buffers import Buffer, SequenceBatch, SequenceReplayBuffer
from rltrain.optim import Optimization, adam
from rltrain.settings.base import Settings, discount_factor, learning_rate, polyak, setting
from rltrain.settings.loops import OffPolicyConfig
from rltrain.settings.registry import register_agent
from rltrain.settings.replay import ReplaySampling
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep


@dataclass
class DreamerConfig(Settings):
    """Dreamer hyperparameters, sized for small vector tasks on a CPU; the defaults learn
    Pendulum-v1 (``configs/dreamer_pendulum.yaml``, docs/dreamer.md). DreamerV1's values
    (Appendix A, for DeepMind Control from pixels) are given where they differ.

    Attributes:
        deter_size: GRU state size ``h``. Default 64 (DreamerV1: 200).
        stoch_size: Gaussian latent size ``z``. Default 16 (DreamerV1: 30).
        hidden_size: Width of every MLP layer and of the embedding. Default 64 (DreamerV1: 200).
        layers: Hidden layers of the encoder, decoder, heads, actor and critic. Default 2.
        sequence_length: Rows per replayed sequence. Default 32 (DreamerV1: 50).
        horizon: Imagination steps ``H``. Default 15.
        gamma: Discount. Default 0.99.
        lambda_: λ of the λ-returns. Default 0.95.
        free_nats: KL below this many nats is not penalised. Default 1.0 (DreamerV1: 3.0).
        kl_balance: Share of the KL gradient that trains the prior (DreamerV2). Default 0.8.
        model_lr: World-model Adam learning rate. Default 1e-3 (DreamerV1: 6e-4).
        actor_lr: Actor learning rate. Default 3e-4 (DreamerV1: 8e-5).
        critic_lr: Critic learning rate. Default 3e-4 (DreamerV1: 8e-5).
        entropy_scale: Actor entropy bonus (on normalised returns, DreamerV3). Default 3e-4.
        critic_tau: Rate of the slow target critic that bootstraps the returns. Default 0.02.
    """

    deter_size: int = setting(64, ge=1)
    stoch_size: int = setting(16, ge=1)
    hidden_size: int = setting(64, ge=1)
    layers: int = setting(2, ge=1)
    sequence_length: int = setting(32, ge=2)
    horizon: int = setting(15, ge=1)
    gamma: float = discount_factor()
    lambda_: float = discount_factor(0.95)
    free_nats: float = 1.0
    kl_balance: float = setting(0.8, ge=0, le=1)
    model_lr: float = learning_rate(1e-3)
    actor_lr: float = learning_rate(3e-4)
    critic_lr: float = learning_rate(3e-4)
    entropy_scale: float = 3e-4
    critic_tau: float = polyak(0.02)

    @property
    def hidden(self) -> list[int]:
        """The hidden layer widths of every MLP."""
        return [self.hidden_size] * self.layers


class DreamerPolicy(Policy):
    """Carries each env's latent state and previous action; filters observations through the
    posterior and acts with the actor (a sample while collecting, the mode in evaluation)."""

    def __init__(self, agent: Dreamer) -> None:
        super().__init__()
        self.world_model, self.actor = agent.world_model, agent.actor
        self.to_env = agent.to_env_action
        self.action_size = agent.action_size

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        assert isinstance(state, tuple) and isinstance(obs, torch.Tensor)  # check_spaces: vectors
        obs = obs.float()  # an integer Box reaches the policy in its own dtype
        h, z, action = state
        rssm = self.world_model.rssm
        latent = State(h, z, z, torch.ones_like(z))
        _, posterior = rssm.obs_step(latent, action, self.world_model.embed(obs),
                                     torch.zeros(obs.shape[0], device=obs.device),
                                     sample=not deterministic)
        policy = self.actor(posterior.features())
        if deterministic:
            action = Actor.mode(policy, self.actor.discrete)
        else:
            action = policy.sample()
        return PolicyStep(self.to_env(action), (posterior.h, posterior.z, action), {})

    @override
    def initial_state(self, num_envs: int) -> PolicyState:
        rssm = self.world_model.rssm
        device = next(self.actor.parameters()).device
        start = rssm.initial(num_envs, device)
        return start.h, start.z, torch.zeros(num_envs, self.action_size, device=device)

    @override
    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        assert isinstance(state, tuple)
        keep = (~done.to(state[0].device)).float().unsqueeze(-1)
        return tuple(part * keep for part in state)


@register_agent("dreamer", DreamerConfig,
                "world model + actor-critic in imagination; vector observations")
class Dreamer(ReplayAgent):
    """A world model and an actor-critic trained in its imagination, for vector observations
    and discrete or continuous (``Box``) actions.

    Args:
        config: Hyperparameters. Default: :class:`DreamerConfig` ().
    """

    world_model: WorldModel
    action_mid: torch.Tensor
    action_half: torch.Tensor
    actor: Actor
    critic: nn.Sequential
    target_critic: nn.Sequential
    return_scale: ReturnScale

    def __init__(self, config: DreamerConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else DreamerConfig()
        self.discrete = False
        self.action_size = 0

    @override
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        if not (isinstance(observation_space, gym.spaces.Box)
                and len(observation_space.shape) == 1):
            raise SpaceError(vector_advice(observation_space))
        if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise SpaceError(f"Dreamer needs a Box or Discrete action space; got "
                             f"{action_space}.")
        if isinstance(action_space, gym.spaces.Box):
            require_bounded("Dreamer", action_space, "scales its tanh actions to the action "
                            "space's bounds")

    @override
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        c = self.config
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if isinstance(action_space, gym.spaces.Discrete):
            self.action_size = int(action_space.n)
            low = high = np.zeros(1, np.float32)
        else:
            assert isinstance(action_space, gym.spaces.Box)
            self.action_size = int(np.prod(action_space.shape))
            low, high = action_space.low.astype(np.float32), action_space.high.astype(np.float32)
        self.register_buffer("action_mid", torch.as_tensor((high + low) / 2))
        self.register_buffer("action_half", torch.as_tensor((high - low) / 2))
        obs_size = int(np.prod(observation_space.shape or (1,)))
        self.world_model = WorldModel(obs_size=obs_size, action_size=self.action_size,
                                      deter_size=c.deter_size, stoch_size=c.stoch_size,
                                      hidden_size=c.hidden_size, layers=c.layers)
        features = c.deter_size + c.stoch_size
        self.actor = Actor(features, self.action_size, c.hidden, discrete=self.discrete)
        self.critic = mlp(features, c.hidden, 1, ELU)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.return_scale = ReturnScale()

    def to_env_action(self, action: torch.Tensor) -> torch.Tensor:
        """The actor's action as the env takes it: an index, or scaled to the bounds."""
        if self.discrete:
            return action.argmax(-1)
        return self.action_mid + self.action_half * action

    def from_env_action(self, action: torch.Tensor) -> torch.Tensor:
        """The env's action as the world model reads it: one-hot, or in ``[-1, 1]``."""
        if self.discrete:
            return F.one_hot(action.long(), self.action_size).float()
        return (action - self.action_mid) / self.action_half

    @override
    def default_strategy_settings(self) -> OffPolicyConfig:
        # configs/dreamer_pendulum.yaml's schedule: batches of 16 sequences, a 2,000-step
        # random prefill, 0.2 gradient steps per env step (10 every 50).
        return OffPolicyConfig(batch_size=16, warmup_steps=2_000, train_interval=50,
                               train_steps=10)

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device,
                    frame_stack: int = 1, sampling: ReplaySampling | None = None) -> Buffer:
        # sequences of whole observations: a frame stack is stored as it comes (n-step and
        # prioritized sampling are refused by the strategy: replay_sampling is empty)
        return SequenceReplayBuffer(capacity, num_envs=num_envs,
                                    observation_space=observation_space,
                                    action_space=action_space,
                                    sequence_length=self.config.sequence_length, seed=seed,
                                    device=device)

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        return {"world_model": adam(self.world_model.parameters(), lr=c.model_lr, eps=1e-5),
                "actor": adam(self.actor.parameters(), lr=c.actor_lr, eps=1e-5),
                "critic": adam(self.critic.parameters(), lr=c.critic_lr, eps=1e-5)}

    @override
    def training_step(self, batch: SequenceBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        # 1. World model (Eq. 10) on the replayed sequences.
        losses, posteriors = self.world_model.loss(
            batch.observations.float(), self.from_env_action(batch.actions), batch.rewards,
            batch.is_first, batch.is_terminal, free_nats=c.free_nats, kl_balance=c.kl_balance)
        optim.step("world_model", losses.total)

        # 2. Actor: imagine H steps from every posterior state (detached: the world model is
        # not trained by the behaviour losses), maximise the λ-returns (Eq. 7).
        start = State(*(part.detach().flatten(0, 1) for part in posteriors))
        rollout = imagine(self.world_model.rssm, self.actor, start, c.horizon)
        # Step t goes from s_t to s_{t+1}: its reward and continue probability are predicted at
        # s_{t+1} (the arrival convention of the replay); values come from the slow critic.
        wm, arrivals = self.world_model, rollout.next_features  # s_1 ... s_H
        rewards = symexp(rows(wm.reward_head, arrivals).squeeze(-1))
        discounts = c.gamma * torch.sigmoid(rows(wm.continue_head, arrivals).squeeze(-1))
        next_values = self.value(self.target_critic, arrivals)  # v(s_1) ... v(s_H)
        returns = lambda_returns(rewards, next_values, discounts, c.lambda_)
        # Discount weights: an imagined step counts as much as the chance of still being
        # in the episode there (Appendix A); no gradient through them.
        alive = discounts.detach()
        weights = torch.cumprod(torch.cat([torch.ones_like(alive[:1]), alive[:-1]]), dim=0)
        scale = self.return_scale.update(returns)
        if self.discrete:  # REINFORCE with the critic as baseline (DreamerV2, Eq. 9)
            baseline = self.value(self.critic, rollout.features)
            advantage = ((returns - baseline) / scale).detach()
            objective = rollout.log_probs * advantage
        else:  # dynamics backpropagation (DreamerV1, Eq. 7)
            objective = returns / scale
        actor_loss = -(weights * (objective + c.entropy_scale * rollout.entropies)).mean()
        optim.step("actor", actor_loss)

        # 3. Critic: regress the λ-returns from the imagined states (Eq. 8).
        critic_loss = self.critic_loss(rollout.features, returns, weights)
        optim.step("critic", critic_loss)
        self._update_target_critic()
        return {
            "world_model/loss": losses.total.detach(),
            "world_model/reconstruction": losses.reconstruction.detach(),
            "world_model/reward": losses.reward.detach(),
            "world_model/continue": losses.continuation.detach(),
            "world_model/kl": losses.kl.detach(),
            "actor/loss": actor_loss.detach(),
            "actor/entropy": rollout.entropies.detach().mean(),
            "critic/loss": critic_loss.detach(),
            "imagined_return": returns.detach().mean(),
        }

    @staticmethod
    def value(critic: nn.Module, features: torch.Tensor) -> torch.Tensor:
        """``v(s)``: the critic predicts it in symlog space."""
        return symexp(rows(critic, features).squeeze(-1))

    def critic_loss(self, features: torch.Tensor, returns: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
        """The discount-weighted squared error of the critic against the λ-returns (Eq. 8),
        in symlog space (DreamerV3, Sec. 3): returns in the hundreds are learned as fast as
        returns near one. Gradients reach the critic only."""
        predicted = rows(self.critic, features.detach()).squeeze(-1)
        return 0.5 * (weights * (predicted - symlog(returns.detach())).pow(2)).mean()

    def _update_target_critic(self) -> None:
        soft_update(self.target_critic, self.critic, self.config.critic_tau)

    @override
    def policy(self, device: torch.device) -> DreamerPolicy:
        if torch.device(device) != self.device:
            return DreamerPolicy(copy.deepcopy(self).to(device))
        return DreamerPolicy(self)



#: Gymnasium's flattening wrapper, by import path.
FLATTEN = "gymnasium.wrappers.FlattenObservation"


def vector_advice(space: gym.Space[Any]) -> str:
    """Why Dreamer refuses ``space`` (it encodes vectors: an MLP world model, no CNN) and
    what to do (with the command-line form of the wrapper), suggesting ``FlattenObservation``
    only where every part can be flattened; DQN, PPO and SAC take images and indices."""
    flatten = f"gymnasium.wrappers.FlattenObservation), {cli(FLATTEN)}"
    if isinstance(space, gym.spaces.Box):
        images = (" Images (3-D) go to DQN, PPO or SAC, whose CNN encoders take them."
                  if len(space.shape) == 3 else "")
        return (f"Dreamer needs a flat Box observation space (a vector); got Box of shape "
                f"{space.shape}. Flatten it ({flatten}.{images}")
    parts = space.spaces if isinstance(space, gym.spaces.Dict) else {}
    stuck = [key for key, part in parts.items() if not flattenable(part)]
    if stuck:
        keep = [key for key in parts if key not in stuck]
        return (f"Dreamer needs a flat Box observation space (a vector); got {space}, whose "
                f"key {stuck[0]!r} cannot be flattened. Drop it "
                f"(gymnasium.wrappers.FilterObservation(env, {sorted(keep)!r}); for MiniGrid, "
                "minigrid.wrappers.ImgObsWrapper), then flatten the rest "
                "(gymnasium.wrappers.FlattenObservation).")
    indices = (" DQN, PPO and SAC take Discrete observations as they are."
               if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) else "")
    fix = (f"Flatten it (a Discrete becomes a one-hot vector; {flatten}" if flattenable(space)
           else "Turn it into a Box vector with a gymnasium.ObservationWrapper")
    return f"Dreamer needs a flat Box observation space (a vector); got {space}. {fix}.{indices}"

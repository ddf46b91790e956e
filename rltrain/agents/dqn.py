"""Deep Q-Network (Mnih et al. 2015, Nature 518:529) with double Q-learning and a dueling option.

The plumbing (collection, replay, optimizer steps, logging) lives in the framework; this file is
the algorithm: a Q-network, its target network, the epsilon-greedy policy and the TD loss.
Defaults are Stable-Baselines3's (64x64, lr 1e-4, the Nature-DQN target copied every 10,000 env
steps, epsilon 1 -> 0.05 over the first tenth of the run; batches of 32, one gradient step every 4
env steps after 100), for an env no preset is tuned for; the presets hold tuned values
(``configs/dqn_cartpole.yaml``: RL-Zoo's CartPole-v1 settings, solved within 50,000 env steps).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import override

from rltrain.agents.base import Policy, SpaceError
from rltrain.agents.kinds import ReplayAgent
from rltrain.agents.nn.encoders import check_observation_space, make_encoder
from rltrain.agents.nn.masking import (
    action_mask,
    check_mask_space,
    epsilon_greedy,
    masked_values,
)
from rltrain.agents.nn.networks import QNetwork, soft_update
from rltrain.agents.nn.noisy import NoisyLinear, means_only, noisy_layers, reset_noise
from rltrain.agents.nn.observation_spaces import encoder_setting
from rltrain.agents.protocols import RolloutLearner
from rltrain.agents.replay_terms import discount, send_td_errors, weighted
from rltrain.buffers.observations import layout, leading_tensor
from rltrain.buffers.replay import ReplayBatch
from rltrain.optim import Optimization, adam
from rltrain.runtime.cadence import is_multiple
from rltrain.settings.base import Settings, discount_factor, learning_rate, polyak, setting, widths
from rltrain.settings.loops import OffPolicyConfig, OnPolicyConfig
from rltrain.settings.registry import register_agent
from rltrain.types import MetricValue, ObsTensors, PolicyState, PolicyStep

#: The TD losses of :attr:`DQNConfig.loss`.
TD_LOSSES = ("huber", "mse")


@dataclass
class DQNConfig(Settings):
    """DQN hyperparameters (defaults: Stable-Baselines3's DQN; tuned values are in the presets,
    ``configs/dqn_cartpole.yaml`` for CartPole-v1).

    Attributes:
        hidden_sizes: Q-network hidden layer widths. Default [64, 64].
        lr: Adam learning rate. Default 1e-4.
        adam_eps: Adam's epsilon. Default 1e-8 (PyTorch's; the distributional DQN papers
            use 0.01 / batch size).
        gamma: Discount factor. Default 0.99.
        double_q: Double DQN target (van Hasselt et al. 2016, arXiv:1509.06461). Default False
            (the Nature DQN's target, SB3's).
        dueling: Dueling head (Wang et al. 2016, arXiv:1511.06581). Default False.
        target_update_interval: Gradient steps between target-network updates. Default 2,500:
            SB3's 10,000 env steps at DQN's own schedule of one gradient step per 4 env steps
            (SB3 counts env steps; with another ``train_interval`` or ``train_steps`` the
            same count of gradient steps spans other env steps).
        tau: Target update rate: 1.0 copies the online network (hard update, Nature DQN);
            below 1 is a soft (Polyak) update ``θ' ← τθ + (1-τ)θ'``. Default 1.0.
        epsilon_start: Exploration rate at env step 0. Default 1.0.
        epsilon_end: Exploration rate after ``exploration_steps``. Default 0.05.
        exploration_steps: Env steps over which epsilon decays linearly; None: the agent's
            :attr:`~DQN.exploration_fraction` of the run's ``num_steps`` (SB3's
            ``exploration_fraction × total_timesteps``, a tenth for DQN). Default None.
        huber_delta: Huber (smooth L1) loss threshold. Default 1.0.
        loss: The TD loss: ``"huber"``, Huber of threshold ``huber_delta`` on the TD error (the
            Nature DQN's and SB3's), or ``"mse"``, its square (CleanRL's ``dqn.py``), whose
            gradient grows with the error. Default ``"huber"``. C51 and QR-DQN keep their own
            losses.
        normalize_images: Scale image pixels to [0, 1] in the CNN encoder (``uint8`` by 255;
            SB3's ``normalize_images``); False feeds them as they are (MiniGrid's object,
            colour and state indices). Default True.
        encoder: How 3-D ``Box`` observations are encoded: ``"auto"`` (a CNN for images,
            decided as Stable-Baselines3 does; other grids flattened), ``"mlp"`` (flattened)
            or ``"cnn"`` (a CNN). Default ``"auto"`` (docs/encoders.md).
        noisy: Noisy linear layers after the encoder (Fortunato et al. 2018,
            arXiv:1706.10295; Rainbow's exploration): new noise for each acting step and
            each gradient step (online and target networks apart), none when acting greedily.
            Set ``epsilon_start`` and ``epsilon_end`` to 0 to explore by the noise alone.
            Default False.
        noisy_sigma0: The noisy layers' initial noise scale ``σ0`` (each ``σ`` starts at
            ``σ0 / √inputs``). Default 0.5 (the paper's).
    """

    hidden_sizes: list[int] = widths(64, 64)
    lr: float = learning_rate(1e-4)
    adam_eps: float = setting(1e-8, gt=0)
    gamma: float = discount_factor()
    double_q: bool = False
    dueling: bool = False
    target_update_interval: int = setting(2_500, ge=1, unit="gradient steps")
    tau: float = polyak(1.0)
    epsilon_start: float = setting(1.0, ge=0, le=1)
    epsilon_end: float = setting(0.05, ge=0, le=1)
    exploration_steps: int | None = setting(None, ge=0, unit="env steps",
                                            none="for a share of the run (SB3's)")
    huber_delta: float = setting(1.0, gt=0, why="the Huber loss's threshold")
    loss: str = setting("huber", choices=TD_LOSSES)
    normalize_images: bool = True
    encoder: str = encoder_setting()
    noisy: bool = False
    noisy_sigma0: float = setting(0.5, gt=0, why="the noisy layers' initial noise scale")



def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    """``start`` moved linearly to ``end`` over ``duration`` steps, then held at ``end``."""
    if duration <= 0 or t >= duration:
        return end
    return start + (end - start) * t / duration


class DQNPolicy(Policy):
    """Epsilon-greedy over the Q-network while collecting; greedy when ``deterministic``."""

    def __init__(self, q_network: nn.Module, num_actions: int,
                 epsilon: Callable[[], float]) -> None:
        super().__init__()
        self.q_network = q_network
        self.num_actions = num_actions
        self.epsilon = epsilon
        self.noisy_layers = noisy_layers(q_network)

    @override
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        mask = action_mask(obs)
        if deterministic:  # greedy on the noisy layers' means
            with means_only(self.noisy_layers):
                q_values = self.q_network(obs)
            return PolicyStep(masked_values(q_values, mask).argmax(dim=1), None, {})
        reset_noise(self.noisy_layers)  # new noise for each acting step
        if mask is not None:
            greedy = masked_values(self.q_network(obs), mask).argmax(dim=1)
            actions = epsilon_greedy(greedy, mask, self.epsilon(), self.num_actions)
            return PolicyStep(actions, None, {})
        # Each env explores on its own coin, drawn from Python's generator (seeded by the
        # strategy): per-step torch or NumPy calls on one-element arrays cost as much as the
        # env step itself (docs/benchmarks.md, "Figures behind implementation choices").
        epsilon = self.epsilon()
        batch = leading_tensor(obs)
        explore = [random.random() < epsilon for _ in range(batch.shape[0])]
        if all(explore):  # every env explores: skip the forward pass
            return PolicyStep(self._random_actions(len(explore), batch.device), None, {})
        actions = self.q_network(obs).argmax(dim=1)
        if any(explore):
            rows = [i for i, e in enumerate(explore) if e]
            actions[rows] = self._random_actions(len(rows), batch.device)
        return PolicyStep(actions, None, {})

    def _random_actions(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.tensor([random.randrange(self.num_actions) for _ in range(n)],
                            device=device)


@register_agent("dqn", DQNConfig,
                "Deep Q-Network (double Q, dueling option); discrete actions")
class DQN(ReplayAgent):
    """Deep Q-learning for discrete actions; vector, image, ``Discrete``, ``MultiDiscrete`` or
    ``Dict`` observations through the encoder chosen from the observation space
    (:func:`~rltrain.agents.nn.encoders.make_encoder`: a CNN for images, stored as ``uint8``; a
    one-hot of ``Discrete`` indices, stored as indices).

    Args:
        config: Hyperparameters. Default: :class:`DQNConfig` ().
    """

    replay_sampling = frozenset({"n_step", "prioritized"})
    #: The share of the run epsilon decays over when ``exploration_steps`` is None (SB3's
    #: ``exploration_fraction``).
    exploration_fraction = 0.1

    q_network: QNetwork
    target_network: QNetwork

    @override
    def gamma(self) -> float:
        return self.config.gamma

    def __init__(self, config: DQNConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else DQNConfig()
        self.num_actions = 0
        #: The noisy layers of both networks (none without ``config.noisy``).
        self.noisy_layers: list[NoisyLinear] = []

    @override
    def default_strategy_settings(self) -> OffPolicyConfig | OnPolicyConfig:
        """Stable-Baselines3's DQN schedule: batches of 32, one gradient step every 4 env
        steps after 100 random ones, a buffer of a million transitions (a subclass that learns
        from rollouts: the on-policy loop's defaults)."""
        if isinstance(self, RolloutLearner):
            return super().default_strategy_settings()
        return OffPolicyConfig(batch_size=32, warmup_steps=100, train_interval=4, train_steps=1,
                               buffer_size=1_000_000)

    @override
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise SpaceError(
                f"{type(self).__name__} needs a Discrete action space; got {action_space}. "
                "Use an agent for continuous actions (SAC) or discretize the actions with a "
                "wrapper."
            )
        check_observation_space(type(self).__name__, observation_space, self.config.encoder)
        check_mask_space(type(self).__name__, observation_space, action_space)
        if self.built and (self.num_actions != action_space.n
                           or self.observation_layout != layout(observation_space)):
            raise SpaceError(
                f"This {type(self).__name__} was built for {self.built_for} observations and "
                f"{self.num_actions} actions; the environment has {observation_space} "
                f"observations and {action_space.n} actions."
            )

    @override
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        assert isinstance(action_space, gym.spaces.Discrete)
        self.num_actions = int(action_space.n)
        self.observation_layout = layout(observation_space)
        self.built_for = str(observation_space)
        encoder = make_encoder(observation_space, normalize_images=self.config.normalize_images,
                               encoder=self.config.encoder)
        c = self.config
        self.q_network = QNetwork(encoder, self.num_actions, c.hidden_sizes, dueling=c.dueling,
                                  atoms=self.atoms, noise=c.noisy_sigma0 if c.noisy else None)
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.noisy_layers = noisy_layers(self.q_network) + noisy_layers(self.target_network)

    @property
    def atoms(self) -> int:
        """Outputs of the Q-network per action: 1 (a distributional subclass: its atoms or
        quantiles)."""
        return 1

    def q_values(self, network: nn.Module) -> nn.Module:
        """What the acting policy takes the argmax of: ``network``'s Q-values (a distributional
        subclass: their expectation)."""
        return network

    @property
    def epsilon(self) -> float:
        """The exploration rate at the current env step."""
        c = self.config
        return linear_schedule(c.epsilon_start, c.epsilon_end, self.exploration_steps,
                               self.progress.env_steps)

    @property
    def exploration_steps(self) -> int:
        """Env steps over which epsilon decays: ``config.exploration_steps``, or
        :attr:`exploration_fraction` of the run's ``num_steps`` when it is None."""
        steps = self.config.exploration_steps
        return int(self.exploration_fraction * self.num_steps) if steps is None else steps

    @override
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": adam(self.q_network.parameters(), lr=self.config.lr,
                          eps=self.config.adam_eps)}

    @override
    def training_step(self, batch: ReplayBatch, optim: Optimization) -> dict[str, MetricValue]:
        c = self.config
        reset_noise(self.noisy_layers)  # one draw per network for the step (noisy layers)
        with torch.no_grad():
            next_mask = action_mask(batch.next_observations)  # max over valid actions only
            next_q_target = masked_values(self.target_network(batch.next_observations),
                                          next_mask)
            if c.double_q:
                # Double DQN (arXiv:1509.06461, Eq. 4): the online network picks a', the target
                # network evaluates it.
                next_actions = masked_values(self.q_network(batch.next_observations),
                                             next_mask).argmax(dim=1, keepdim=True)
                next_q = next_q_target.gather(1, next_actions).squeeze(1)
            else:
                next_q = next_q_target.max(dim=1).values
            # Bootstrap unless the MDP terminated; a time-limit truncation still bootstraps from
            # the real final observation the runner kept. An n-step window of k transitions
            # bootstraps with γ^k, its reward the window's discounted sum.
            td_target = batch.rewards + discount(batch, c.gamma) * (1.0 - batch.terminated) * next_q
        q_values = self.q_network(batch.observations)
        q_taken = q_values.gather(1, batch.actions.long().unsqueeze(1)).squeeze(1)
        # L = Huber_δ(Q(s, a) − y), or (Q(s, a) − y)² with loss="mse"
        errors = (F.huber_loss(q_taken, td_target, delta=c.huber_delta, reduction="none")
                  if c.loss == "huber" else F.mse_loss(q_taken, td_target, reduction="none"))
        loss = weighted(errors, batch)
        optim.step("q", loss)
        send_td_errors(batch, q_taken - td_target)

        if is_multiple(optim.gradient_step, c.target_update_interval):
            self._update_target()
        return {"loss": loss.detach(), "q_value": q_taken.detach().mean(),
                "epsilon": self.epsilon}

    def _update_target(self) -> None:
        soft_update(self.target_network, self.q_network, self.config.tau)

    @override
    def policy(self, device: torch.device) -> DQNPolicy:
        q_network = self.q_network
        if torch.device(device) != self.device:
            q_network = copy.deepcopy(q_network).to(device)
        return DQNPolicy(self.q_values(q_network), self.num_actions,
                         epsilon=lambda: self.epsilon)

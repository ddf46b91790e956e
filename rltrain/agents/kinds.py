"""The two kinds of agent the shipped loops train, each with the hooks of its loop (SB3's
``OffPolicyAlgorithm`` and ``OnPolicyAlgorithm``, as bases an agent picks):

- :class:`ReplayAgent` learns from replayed experience (the off-policy loop): the replay it
  learns from (:meth:`~ReplayAgent.make_buffer`), the replay sampling its loss reads
  (:attr:`~ReplayAgent.replay_sampling`) and the discount of its n-step returns
  (:meth:`~ReplayAgent.gamma`). DQN, C51, QR-DQN, SAC, TD3, DDPG, Dreamer.
- :class:`RolloutAgent` learns from rollouts of its current policy (the on-policy loop): its
  rollout storage (:meth:`~RolloutAgent.make_rollout`), what it computes of a full rollout
  (:meth:`~RolloutAgent.prepare_rollout`) and whether it ends an update early
  (:meth:`~RolloutAgent.update_done`). PPO, PQN.

A loop checks an agent structurally (:mod:`rltrain.agents.protocols`), so an agent written on
:class:`~rltrain.agents.base.LearningAgent` alone trains too, on the loop's default storage.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import torch

from rltrain.agents.base import LearningAgent
from rltrain.buffers import Buffer
from rltrain.buffers.frames import transition_replay
from rltrain.buffers.rollout import RolloutBuffer
from rltrain.settings.replay import ReplaySampling
from rltrain.types import MetricValue


class ReplayAgent(LearningAgent):
    """An agent that learns from batches of replayed experience (the off-policy loop)."""

    #: The replay sampling this agent's :meth:`training_step` uses, of ``"n_step"`` (it
    #: bootstraps with ``batch.discounts``, and says its :meth:`gamma`) and ``"prioritized"``
    #: (it weights its loss by ``batch.weights`` and sends its TD errors back:
    #: :mod:`rltrain.agents.replay_terms`). The off-policy loop refuses the others. Default:
    #: none.
    replay_sampling: ClassVar[frozenset[str]] = frozenset()

    def gamma(self) -> float | None:
        """The discount γ of the n-step returns the replay computes for this agent (``"n_step"`` in
        :attr:`replay_sampling`); None: it learns from none. Default None."""
        return None

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device,
                    frame_stack: int = 1, sampling: ReplaySampling | None = None) -> Buffer:
        """The replay this agent learns from, made by the off-policy loop (``capacity``: its
        ``buffer_size``; ``frame_stack``: frames per observation when the env stacks them and
        the loop's ``frame_stack_replay`` is on; ``sampling``: n-step windows and prioritized
        draws, given only when :attr:`replay_sampling` says the agent learns from them).
        Default: a replay of transitions storing each frame once
        (:func:`~rltrain.buffers.frames.transition_replay`), its n-step returns discounted by
        :meth:`gamma`. A world-model agent returns a replay of sequences instead."""
        return transition_replay(capacity, num_envs=num_envs, observation_space=observation_space,
                                 action_space=action_space, seed=seed, device=device,
                                 frame_stack=frame_stack, sampling=sampling,
                                 gamma=self.gamma())


class RolloutAgent(LearningAgent):
    """An agent that learns from rollouts of its current policy (the on-policy loop): epochs of
    minibatches of each rollout, once :meth:`prepare_rollout` filled its advantages and
    returns."""

    def make_rollout(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any], seed: int, device: torch.device
                     ) -> RolloutBuffer:
        """The rollout storage the on-policy loop collects into (``n_steps`` vector steps).
        Default: a :class:`~rltrain.buffers.RolloutBuffer`."""
        return RolloutBuffer(n_steps, num_envs=num_envs, observation_space=observation_space,
                             action_space=action_space, seed=seed, device=device)

    @abstractmethod
    def prepare_rollout(self, rollout: RolloutBuffer) -> None:
        """Fill a full ``rollout``'s ``advantages`` and ``returns`` (and update what the agent
        learns from rollouts: normalisation statistics, schedules) before the update epochs."""

    def update_done(self, metrics: Mapping[str, MetricValue]) -> bool:
        """After a gradient step of an update (its ``metrics``): True ends the update early
        (PPO's target KL). Default False."""
        return False

    def ends_updates_early(self) -> bool:
        """Whether :meth:`update_done` can ever be True: with several processes each of its
        answers is agreed by every rank (one collective per gradient step), which an agent
        that never ends an update early spares. Default: True when a subclass overrides
        :meth:`update_done`."""
        return type(self).update_done is not RolloutAgent.update_done

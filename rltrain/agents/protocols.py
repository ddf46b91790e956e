"""What each loop needs of an agent, checked structurally: a strategy names the protocol its
agents must fit (``RLStrategy.learner``), and an agent fits by having the hooks, whatever its
base class (as ``typing.Protocol`` checks them). The kinds of agent
(:mod:`rltrain.agents.kinds`) have every hook of their loop.

- :class:`ReplayLearner`: learns from batches of stored experience (the off-policy loop):
  ``training_step``; its replay is its own when it has a ``make_buffer``
  (:class:`MakesReplay`), else the loop's default (a uniform replay of transitions).
- :class:`RolloutLearner`: learns from rollouts of its current policy (the on-policy loop):
  ``prepare_rollout`` (bootstrap values, advantages) besides ``training_step``; its rollout
  storage is its own when it has a ``make_rollout`` (:class:`MakesRollout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

    from rltrain.buffers import Buffer, RolloutBuffer


@runtime_checkable
class ReplayLearner(Protocol):
    """An agent the off-policy loop trains: batches sampled from its replay."""

    def training_step(self, batch: Any, optim: Any) -> Any: ...


@runtime_checkable
class MakesReplay(Protocol):
    """An agent that makes its own replay (``ReplayAgent.make_buffer``'s signature; the loop
    passes ``frame_stack`` and ``sampling`` only where they apply)."""

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device,
                    **extra: Any) -> Buffer: ...


@runtime_checkable
class RolloutLearner(Protocol):
    """An agent the on-policy loop trains: epochs of minibatches of each rollout it prepared."""

    def prepare_rollout(self, rollout: RolloutBuffer) -> None: ...

    def training_step(self, batch: Any, optim: Any) -> Any: ...


@runtime_checkable
class MakesRollout(Protocol):
    """An agent that makes its own rollout storage (``RolloutAgent.make_rollout``)."""

    def make_rollout(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any], seed: int, device: torch.device
                     ) -> RolloutBuffer: ...

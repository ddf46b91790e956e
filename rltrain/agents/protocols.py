"""What each loop needs of an agent, checked structurally: a strategy names the protocol its
agents must fit (``RLStrategy.learner``), and an agent fits by having the hooks, whatever its
base class (as ``typing.Protocol`` checks them).

- :class:`ReplayLearner`: learns from batches of stored experience (the off-policy loop):
  ``make_buffer`` and ``training_step``. Every :class:`~rltrain.agents.base.LearningAgent`
  has a default ``make_buffer`` (a uniform replay of transitions).
- :class:`RolloutLearner`: learns from rollouts of its current policy (the on-policy loop):
  ``make_rollout`` and ``prepare_rollout`` (bootstrap values, advantages) besides
  ``training_step``. An agent with a ``prepare_rollout`` of its own is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

    from rltrain.buffers import Buffer, RolloutBuffer
    from rltrain.settings.replay import ReplaySampling


@runtime_checkable
class ReplayLearner(Protocol):
    """An agent the off-policy loop trains: batches sampled from the buffer it makes."""

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device,
                    frame_stack: int = 1, sampling: ReplaySampling | None = None
                    ) -> Buffer: ...

    def training_step(self, batch: Any, optim: Any) -> Any: ...


@runtime_checkable
class RolloutLearner(Protocol):
    """An agent the on-policy loop trains: epochs of minibatches of each rollout it prepared."""

    def make_rollout(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any], seed: int, device: torch.device
                     ) -> RolloutBuffer: ...

    def prepare_rollout(self, rollout: RolloutBuffer) -> None: ...

    def training_step(self, batch: Any, optim: Any) -> Any: ...

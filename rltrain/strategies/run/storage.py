"""Where a run keeps its experience: the storage factories a strategy gives
:class:`~rltrain.strategies.run.engine.Run` (:func:`replay`, :func:`rollout`), and the check
that a resumed run's environments fit the checkpoint's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gymnasium as gym
from typing_extensions import TypeVar

from rltrain.agents.base import LearningAgent
from rltrain.agents.protocols import MakesReplay, MakesRollout
from rltrain.buffers import Buffer, RolloutBuffer
from rltrain.buffers.frames import transition_replay
from rltrain.envs.persistence import check_saved_runner
from rltrain.settings.replay import ReplaySampling
from rltrain.strategies.components import RLComponents

if TYPE_CHECKING:
    from rltrain.types import Transitions


class Storage(Protocol):
    """What a :class:`~rltrain.strategies.run.engine.Run` needs of its experience storage:
    each vector step added, and its state for checkpoints (the ``buffer`` part). A
    :class:`Sampled` storage's draws are also put back after a failed gradient step."""

    def add(self, transitions: Transitions) -> None:
        """Store one vector step."""

    def state_dict(self) -> dict[str, Any]:
        """Its state, for checkpoints (tensors and plain data only)."""

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        """Restore :meth:`state_dict`'s output."""


@runtime_checkable
class Sampled(Protocol):
    """A storage whose sampling state a failed gradient step puts back (``ReplayBuffer``,
    ``RolloutBuffer``; :class:`~rltrain.buffers.observations.GeneratorSampler` gives it from an
    ``rng``)."""

    @property
    def sampler_state(self) -> Any:
        """What its sampling has drawn so far."""

    @sampler_state.setter
    def sampler_state(self, state: Any) -> None: ...


#: The type of a run's storage (None: the run keeps none).
StorageT = TypeVar("StorageT", bound="Storage | None", default=None)

#: Makes a run's experience storage: ``(agent, observation_space, action_space, num_envs, seed,
#: device, frame_stack=1) -> storage`` (the spaces are a sub-env's; ``frame_stack``: frames per
#: observation when the env stacks them).
StorageFactory = Callable[..., StorageT]


def check_resumed_envs(components: RLComponents, observation_space: gym.Space[Any],
                       action_space: gym.Space[Any], num_envs: int) -> None:
    """Refuse to resume when ``components.checkpoint``'s environments do not fit these spaces
    and ``num_envs`` (a strategy's ``check``; nothing to do for a fresh run)."""
    if components.checkpoint is None:
        return
    try:
        check_saved_runner(components.saved_state().get("runner"), observation_space,
                           action_space, num_envs)
    except ValueError as error:
        raise ValueError(f"{components.checkpoint}: {error}") from None


def replay(capacity: int, frame_stack_replay: bool = True,
           sampling: ReplaySampling | None = None) -> StorageFactory[Buffer]:
    """The agent's own replay (``make_buffer``: :class:`~rltrain.agents.protocols.MakesReplay`),
    else a uniform replay of transitions, of ``capacity`` transitions, as a :class:`Run`'s
    ``storage``; with ``frame_stack_replay``, told the env's frame stack (so the default replay
    stores each frame once); ``sampling``: n-step windows and prioritized draws (given to
    ``make_buffer`` only when not plain, so an agent's own ``make_buffer`` need not take it).
    The run's agent is passed in by the run."""

    def make(agent: LearningAgent, observation_space: gym.Space[Any],
             action_space: gym.Space[Any], num_envs: int, seed: int, device: Any,
             frame_stack: int = 1) -> Buffer:
        extra: dict[str, Any] = {}
        if frame_stack_replay and frame_stack > 1:
            extra["frame_stack"] = frame_stack
        if sampling is not None and not sampling.plain:
            extra["sampling"] = sampling
        if isinstance(agent, MakesReplay):
            return agent.make_buffer(capacity, num_envs=num_envs,
                                     observation_space=observation_space,
                                     action_space=action_space, seed=seed, device=device,
                                     **extra)
        return transition_replay(capacity, num_envs=num_envs, observation_space=observation_space,
                                 action_space=action_space, seed=seed, device=device, **extra)

    return make


def rollout(n_steps: int) -> StorageFactory[RolloutBuffer]:
    """The agent's rollout storage (``make_rollout``:
    :class:`~rltrain.agents.protocols.MakesRollout`), else a
    :class:`~rltrain.buffers.RolloutBuffer`, of ``n_steps`` vector steps, as a :class:`Run`'s
    ``storage``."""

    def make(agent: LearningAgent, observation_space: gym.Space[Any],
             action_space: gym.Space[Any], num_envs: int, seed: int, device: Any,
             frame_stack: int = 1) -> RolloutBuffer:
        return make_rollout(agent, n_steps, num_envs=num_envs,
                            observation_space=observation_space, action_space=action_space,
                            seed=seed, device=device)

    return make


def make_rollout(agent: LearningAgent, n_steps: int, *, num_envs: int,
                 observation_space: gym.Space[Any], action_space: gym.Space[Any], seed: int,
                 device: Any) -> RolloutBuffer:
    """``agent``'s rollout storage of ``n_steps`` vector steps: its own, else the default."""
    make = agent.make_rollout if isinstance(agent, MakesRollout) else RolloutBuffer
    return make(n_steps, num_envs=num_envs, observation_space=observation_space,
                action_space=action_space, seed=seed, device=device)

"""Where a run keeps its experience: the storage factories a strategy gives
:class:`~rltrain.strategies.run.engine.Run` (:func:`replay`, :func:`rollout`), and the check
that a resumed run's environments fit the checkpoint's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rltrain.agents.base import LearningAgent
from rltrain.agents.protocols import MakesReplay, MakesRollout
from rltrain.buffers import Buffer, RolloutBuffer
from rltrain.buffers.frames import transition_replay
from rltrain.envs.persistence import check_saved_runner
from rltrain.settings.replay import ReplaySampling
from rltrain.strategies.components import RLComponents

#: Makes a run's experience storage: ``(agent, observation_space, action_space, num_envs, seed,
#: device, frame_stack=1) -> storage`` (the spaces are a sub-env's; ``frame_stack``: frames per
#: observation when the env stacks them).
StorageFactory = Callable[..., "Buffer | RolloutBuffer"]


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
           sampling: ReplaySampling | None = None) -> StorageFactory:
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


def rollout(n_steps: int) -> StorageFactory:
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

"""The contracts every agent fulfils: :class:`Policy` (acts) and :class:`LearningAgent` (learns)."""

from __future__ import annotations

import dataclasses
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrain.agents.protocols import RolloutLearner
from rltrain.buffers.frames import FrameStackReplay, frame_space_ok
from rltrain.buffers.replay import ReplayBuffer
from rltrain.buffers.rollout import RolloutBuffer
from rltrain.observe.events import flatten_hparams
from rltrain.runtime.distributed import SINGLE, DistributedContext
from rltrain.runtime.statistics import Statistics
from rltrain.settings.loops import OffPolicyConfig, OnPolicyConfig
from rltrain.settings.replay import ReplaySampling
from rltrain.types import ObsTensors, PolicyState, PolicyStep, Progress

if TYPE_CHECKING:
    from rltrain.buffers import Buffer
    from rltrain.optim import Optimization
    from rltrain.types import MetricValue

class TrainerInfo(Protocol):
    """What an agent may read of the :class:`~rltrain.Trainer` running it (``agent.trainer``):
    the run's settings. Typed apart from the Trainer, which sits layers above the agents."""

    num_steps: int
    device: str
    inference_device: str | None
    dtype: str
    last_run_dir: Path | None

    def settings(self) -> dict[str, Any]: ...


class Policy(nn.Module, ABC):
    """Maps a batch of observations to a batch of actions, on the inference device.

    A policy may keep a recurrent state per environment; the runner stores it between steps and
    asks the policy to reset it where an episode ended. It holds modules that are either the
    learner's own (same device) or copies refreshed by ``load_state_dict`` (another device).
    """

    @abstractmethod
    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep:
        """Actions for ``obs`` (shape ``[num_envs, *obs_shape]``; a dict of such tensors for a
        ``Dict`` observation space), in their storage dtype: float32 for float spaces,
        ``uint8`` images unscaled (the agent's encoder scales them).

        ``deterministic=True`` is for evaluation (greedy, or the distribution's mode);
        ``False`` explores as the agent does while collecting.
        """

    def initial_state(self, num_envs: int) -> PolicyState:
        """The recurrent state at the start of every episode. Default: None (no memory)."""
        return None

    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState:
        """``state`` with the rows of environments where ``done`` is True set to the initial state.

        Default: None (no memory). Recurrent policies override it.
        """
        return None


class LearningAgent(nn.Module, ABC):
    """Owns the networks and the learning rule; never the loop, never ``backward()``.

    The life of an agent in a run:

    1. :meth:`setup` once the environment's spaces are known: checks them
       (:meth:`check_spaces`), builds the networks (:meth:`build`) and moves them to the device.
    2. :meth:`configure_optimizers` names each optimizer.
    3. :meth:`training_step` computes losses on a batch and calls ``optim.step(name, loss)``
       once per optimizer it updates; it returns metrics for the renderers.
    4. :meth:`policy` hands out the acting part.

    ``state_dict()`` (from ``nn.Module``) holds every network, target networks included.
    Schedules are functions of ``self.progress``, so the run's counters restore them.

    What the run gives the agent (as Lightning gives a ``LightningModule``): ``device``,
    ``dtype`` (the training precision; autocast is applied for you), ``progress`` (the live
    counters: env steps, gradient steps, episodes), ``trainer`` (the :class:`~rltrain.Trainer`
    running ``fit``, or None) and ``logger`` (while ``fit`` runs: the run's TensorBoard
    ``SummaryWriter``, for histograms or images, or the logger object given to the Trainer;
    None without a logger). Scalars go through
    :meth:`log`.
    """

    #: The replay sampling this agent's :meth:`training_step` uses, of ``"n_step"`` (it
    #: bootstraps with ``batch.discounts``) and ``"prioritized"`` (it weights its loss by
    #: ``batch.weights`` and sends its TD errors back: :mod:`rltrain.agents.replay_terms`).
    #: The off-policy strategy refuses the others. Default: none.
    replay_sampling: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self.progress = Progress()
        self.num_steps = 0
        self.device = torch.device("cpu")
        self.dtype = torch.float32
        #: The run's processes (:mod:`rltrain.runtime.distributed`), set by the run: what a
        #: statistic over a batch spread across ranks uses (PPO's advantage normalisation). Default:
        #: one process.
        self.distributed: DistributedContext = SINGLE
        self._statistics = Statistics()
        self.built = False
        #: The (observation, action) spaces of the last :meth:`setup`; checkpoints store them.
        self.spaces: tuple[gym.Space[Any], gym.Space[Any]] | None = None
        self.logger: Any = None
        self._trainer: weakref.ref[TrainerInfo] | None = None
        self._logged: dict[str, MetricValue] = {}

    @property
    def statistics(self) -> Statistics:
        """The statistics service of the run's processes (:mod:`rltrain.runtime.statistics`):
        moments over every rank's data together, the plain computation with one process."""
        if self._statistics.context is not self.distributed:
            self._statistics = Statistics(self.distributed)
        return self._statistics

    @property
    def trainer(self) -> TrainerInfo | None:
        """The :class:`~rltrain.Trainer` that last ran ``fit`` with this agent (None before)."""
        return self._trainer() if self._trainer is not None else None

    @trainer.setter
    def trainer(self, trainer: TrainerInfo | None) -> None:
        # A weak reference: the agent can be copied or kept without keeping the trainer alive.
        self._trainer = weakref.ref(trainer) if trainer is not None else None

    def log(self, name: str, value: float | torch.Tensor) -> None:
        """Record a scalar (a float or a one-element tensor), as Lightning's ``self.log``.

        Call it anywhere in the agent; the value joins the metrics of the current (or next)
        gradient step, so every renderer shows it as ``train/<name>`` (averaged like the
        losses over the last 100 gradient steps): TensorBoard, console, progress bar and
        ``metrics.jsonl``. Tensors are read only when a renderer writes them.
        """
        self._logged[name] = value.detach() if isinstance(value, torch.Tensor) else float(value)

    def pop_logged(self) -> dict[str, MetricValue]:
        """The values :meth:`log` received since the last call (for the framework)."""
        logged, self._logged = self._logged, {}
        return logged

    def setup(self, *, observation_space: gym.Space[Any], action_space: gym.Space[Any],
              device: torch.device, progress: Progress,
              dtype: torch.dtype = torch.float32, num_steps: int = 0) -> None:
        """Check the spaces, build the networks on first use and move them to ``device``;
        ``num_steps`` is the run's total env steps (0 outside a run), for schedules over the
        run (PPO's learning-rate annealing)."""
        self.check_spaces(observation_space, action_space)
        if not self.built:
            self.build(observation_space, action_space)
            self.built = True
        self.progress, self.num_steps = progress, num_steps
        self.spaces = observation_space, action_space
        self.device = torch.device(device)
        self.dtype = dtype
        self.to(self.device)

    def is_set_up_for(self, progress: Progress) -> bool:
        """True when :meth:`setup` already ran for the run that counts with ``progress``: the
        Trainer sets the agent up before anything is written, and the run does not again."""
        return self.built and self.progress is progress

    @abstractmethod
    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Raise :class:`SpaceError` when the agent cannot handle these spaces."""

    @abstractmethod
    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Create the networks for these spaces (called once, after :meth:`check_spaces`)."""

    @abstractmethod
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers, by the name ``training_step`` passes to ``optim.step``."""

    @abstractmethod
    def training_step(self, batch: Any, optim: Optimization) -> dict[str, MetricValue]:
        """One gradient step on ``batch`` (what the buffer of :meth:`make_buffer` samples: a
        :class:`~rltrain.buffers.ReplayBatch` by default); returns metrics (floats or
        detached scalar tensors)."""

    @abstractmethod
    def policy(self, device: torch.device) -> Policy:
        """The acting policy on ``device``: sharing this agent's modules when ``device`` is its
        own, otherwise a copy that the strategy refreshes with :meth:`sync_policy`."""

    def default_strategy_settings(self) -> OffPolicyConfig | OnPolicyConfig:
        """The settings of the strategy this agent trains best with, when the Trainer is
        given none: a checked config whose type names the strategy (the registered one that
        takes it). Default: :class:`~rltrain.settings.loops.OnPolicyConfig` ()'s defaults
        for an agent that learns from rollouts (a
        :class:`~rltrain.agents.protocols.RolloutLearner`), else
        :class:`~rltrain.settings.loops.OffPolicyConfig` ()'s (which are DQN's)."""
        return OnPolicyConfig() if isinstance(self, RolloutLearner) else OffPolicyConfig()

    def make_buffer(self, capacity: int, *, num_envs: int, observation_space: gym.Space[Any],
                    action_space: gym.Space[Any], seed: int, device: torch.device,
                    frame_stack: int = 1, sampling: ReplaySampling | None = None) -> Buffer:
        """The replay this agent learns from, made by the off-policy strategy (``capacity`` is
        its ``buffer_size``; ``frame_stack``: frames per observation when the env stacks them
        and the strategy's ``frame_stack_replay`` is on; ``sampling``: n-step windows and
        prioritized draws, given only to an agent whose :attr:`replay_sampling` says it
        learns from them). Default: a :class:`~rltrain.buffers.ReplayBuffer` of transitions,
        or a :class:`~rltrain.buffers.FrameStackReplay` storing each frame once, with n-step
        returns discounted by ``self.config.gamma``. A world-model agent returns a
        :class:`~rltrain.buffers.SequenceReplayBuffer` of sequences instead."""
        sampling = sampling or ReplaySampling()
        kwargs: dict[str, Any] = {"seed": seed, "device": device, "priority": sampling.priority,
                                  "n_step": sampling.n_step}
        if sampling.n_step > 1:
            gamma = getattr(getattr(self, "config", None), "gamma", None)
            if not isinstance(gamma, float | int):
                raise ValueError(f"{type(self).__name__}: n-step returns need the agent's "
                                 "discount as config.gamma; it has none.")
            kwargs["gamma"] = float(gamma)
        if frame_stack > 1 and frame_space_ok(observation_space, frame_stack):
            return FrameStackReplay(capacity, num_envs=num_envs,
                                    observation_space=observation_space,
                                    action_space=action_space, frame_stack=frame_stack, **kwargs)
        return ReplayBuffer(capacity, observation_space=observation_space,
                            action_space=action_space, num_envs=num_envs, **kwargs)

    def make_rollout(self, n_steps: int, *, num_envs: int, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any], seed: int, device: torch.device
                     ) -> RolloutBuffer:
        """The rollout storage the on-policy strategy collects into (``n_steps`` vector steps),
        for an agent that learns from rollouts: one with a ``prepare_rollout(rollout)`` that
        fills a full rollout's ``advantages`` and ``returns`` (and updates what it learns from
        rollouts: normalisation statistics, schedules) before the update epochs
        (:class:`~rltrain.agents.protocols.RolloutLearner`). Default: a
        :class:`~rltrain.buffers.RolloutBuffer`."""
        return RolloutBuffer(n_steps, num_envs=num_envs, observation_space=observation_space,
                             action_space=action_space, seed=seed, device=device)

    def update_done(self, metrics: Mapping[str, MetricValue]) -> bool:
        """After a gradient step of an on-policy update (its ``metrics``): True ends the
        update early (PPO's target KL). Default False."""
        return False

    def ends_updates_early(self) -> bool:
        """Whether :meth:`update_done` can ever be True: with several processes each of its
        answers is agreed by every rank (one collective per gradient step), which an agent
        that never ends an update early spares. Default: True when a subclass overrides
        :meth:`update_done`."""
        return type(self).update_done is not LearningAgent.update_done

    def hparams(self) -> dict[str, float | int | str | bool]:
        """The agent's hyperparameters, as ``{"agent/<name>": value}``: shown in TensorBoard,
        saved in checkpoints and compared when a run is resumed (a setting that differs is
        refused). Default: the fields of ``self.config`` when it is a dataclass, else none; an
        agent without a config dataclass overrides it, or its settings go unchecked."""
        config = getattr(self, "config", None)
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return flatten_hparams("agent", config)
        return {}

    def sync_policy(self, policy: Policy) -> None:
        """Copy the learner's current weights into a ``policy`` living on another device."""
        policy.load_state_dict(self.policy(self.device).state_dict())


class SpaceError(ValueError):
    """An agent was given an observation or action space it cannot handle."""


def require_bounded(agent: str, action_space: gym.spaces.Box, why: str) -> None:
    """Refuse a ``Box`` action space with an infinite bound (the agents that squash actions
    into the bounds: SAC, Dreamer), naming the wrapper that declares the real range."""
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise SpaceError(
            f"{agent} {why}, and {action_space} has infinite ones. Declare the range the env "
            "really accepts: gymnasium.wrappers.TransformAction(env, lambda a: a, "
            "gymnasium.spaces.Box(low, high)).")

"""The settings of the shipped strategies' loops (:class:`OffPolicyConfig`,
:class:`OnPolicyConfig`), declared apart from the loops so that an agent can name its default
schedule as a typed, checked config (``LearningAgent.default_strategy_settings``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from typing_extensions import override

from rltrain.settings.base import Settings, setting
from rltrain.settings.replay import PriorityConfig, ReplaySampling


def vectorization_setting() -> Any:
    """How the sub-envs run: ``"sync"`` (in this process, the default) or ``"async"`` (one
    process each)."""
    return setting("sync", choices=("sync", "async"), says="'sync' or 'async'")


@dataclass
class OffPolicyConfig(Settings):
    """Settings of :class:`OffPolicyStrategy`. Env steps are transitions summed over sub-envs.

    Attributes:
        num_envs: Sub-environments stepped together. Default 1.
        vectorization: ``"sync"`` (one process) or ``"async"`` (a process per sub-env).
            Default ``"sync"``.
        buffer_size: Replay capacity in transitions (all sub-envs together). Default 100,000.
        batch_size: Transitions per gradient step. Default 64.
        warmup_steps: Env steps of uniform random actions before learning starts (SB3's
            ``learning_starts``); learning also waits until the buffer holds this many
            transitions. Default 1,000.
        train_interval: Env steps between training rounds (SB3's ``train_freq``); a vector step
            that crosses several boundaries runs as many rounds. Default 256.
        train_steps: Gradient steps per training round (SB3's ``gradient_steps``). Default 128.
        seed: Seeds Python, NumPy, torch, the environments and the replay sampler. Default 0.
        frame_stack_replay: When the env stacks frames (the Atari pipeline), store each frame
            once (:class:`~rltrain.buffers.FrameStackReplay`: 1M Atari transitions in 7.5 GB
            instead of 56 GB); False stores whole observations. Default True.
        n_step: Transitions per n-step return: targets bootstrap ``n_step`` env steps ahead
            (fewer where the episode ended or the replay's newest transition is reached),
            ``docs/replay.md``. Default 1.
        prioritized: Proportional prioritized replay (Schaul et al. 2016): transitions drawn in
            proportion to ``|TD error|**priority_alpha``, losses weighted by importance
            weights. Default False.
        priority_alpha: Priority exponent (0: uniform). Default 0.6.
        priority_beta: Importance-sampling exponent at the start, annealed linearly to 1 over
            ``trainer.num_steps``. Default 0.4.
        priority_epsilon: Added to ``|TD error|`` so that no priority is 0. Default 1e-6.
    """

    num_envs: int = setting(1, ge=1)
    vectorization: str = vectorization_setting()  # str, not a Literal: omegaconf cannot check them
    buffer_size: int = setting(100_000, ge=1)
    batch_size: int = setting(64, ge=1)
    warmup_steps: int = setting(1_000, ge=0)
    train_interval: int = setting(256, ge=1, unit="env steps")
    train_steps: int = setting(128, ge=0)
    seed: int = 0
    frame_stack_replay: bool = True
    n_step: int = setting(1, ge=1, unit="transitions")
    prioritized: bool = False
    priority_alpha: float = setting(0.6, ge=0, le=1)
    priority_beta: float = setting(0.4, ge=0, le=1)
    priority_epsilon: float = setting(1e-6, gt=0)

    @override
    def rules(self) -> list[tuple[bool, str]]:
        window = self.n_step * self.num_envs  # the rows an n-step window spans in the ring
        return [(self.batch_size <= self.buffer_size,
                 f"batch_size ({self.batch_size}) is larger than buffer_size "
                 f"({self.buffer_size}); raise buffer_size or lower batch_size."),
                (window <= self.buffer_size,
                 f"n_step ({self.n_step}) is longer than the replay holds: a window spans "
                 f"n_step x num_envs = {window:,} transitions, buffer_size is "
                 f"{self.buffer_size:,}; lower n_step or raise buffer_size.")]

    @property
    def sampling(self) -> ReplaySampling:
        """How the replay samples: n-step windows, uniform or prioritized draws."""
        priority = (PriorityConfig(alpha=self.priority_alpha, beta_start=self.priority_beta,
                                   epsilon=self.priority_epsilon) if self.prioritized else None)
        return ReplaySampling(n_step=self.n_step, priority=priority)


@dataclass
class OnPolicyConfig(Settings):
    """Settings of :class:`OnPolicyStrategy` (defaults: Stable-Baselines3's PPO).

    Attributes:
        num_envs: Sub-environments stepped together. Default 1.
        vectorization: ``"sync"`` (one process) or ``"async"`` (a process per sub-env).
            Default ``"sync"``.
        n_steps: Vector steps per rollout (per sub-env); a rollout holds
            ``n_steps * num_envs`` transitions. Default 2,048.
        batch_size: Transitions per minibatch; must divide ``n_steps * num_envs``, so each
            epoch covers every transition exactly once. Default 64.
        update_epochs: Passes over each rollout (SB3's ``n_epochs``). Default 10.
        seed: Seeds Python, NumPy, torch, the environments and the minibatch shuffling.
            Default 0.
    """

    num_envs: int = setting(1, ge=1)
    vectorization: str = vectorization_setting()
    n_steps: int = setting(2_048, ge=1, unit="vector steps")
    batch_size: int = setting(64, ge=1)
    update_epochs: int = setting(10, ge=1)
    seed: int = 0

    @override
    def rules(self) -> list[tuple[bool, str]]:
        rollout_size = self.n_steps * self.num_envs
        return [(rollout_size % self.batch_size == 0,
                 f"batch_size ({self.batch_size}) must divide the rollout, n_steps x num_envs = "
                 f"{self.n_steps} x {self.num_envs} = {rollout_size}, so every epoch uses each "
                 "transition once; use a divisor, e.g. batch_size="
                 f"{_divisor_near(rollout_size, self.batch_size)}.")]

    @property
    def minibatches(self) -> int:
        """Minibatches per epoch."""
        return self.n_steps * self.num_envs // self.batch_size


#: Divisor pairs ``(d, n // d)`` :func:`_divisor_near` tries at most: a rollout of up to
#: 2**40 transitions is searched whole, in well under a second.
DIVISOR_TRIALS = 2**20


def _divisor_near(n: int, target: int) -> int:
    """The divisor of ``n`` closest to ``target`` (the smaller on a tie): ``n`` itself for a
    ``target`` above it, else the closest among the divisor pairs ``(d, n // d)`` with ``d`` up
    to ``sqrt(n)`` (at most :data:`DIVISOR_TRIALS` of them), so a huge ``target`` or rollout
    answers at once."""
    if target >= n:
        return n
    divisors = {1, n}
    for d in range(1, min(math.isqrt(n), DIVISOR_TRIALS) + 1):
        if n % d == 0:
            divisors |= {d, n // d}
    return min(divisors, key=lambda d: (abs(d - target), d))

"""The off-policy loop: collect into a replay buffer, train every few env steps, evaluate."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
from typing_extensions import override

from rltrain.agents.base import LearningAgent, Policy
from rltrain.agents.config_checks import check_typed_fields
from rltrain.components import RLComponents
from rltrain.config.registry import register_strategy
from rltrain.envs.make import EnvInit, Vectorization
from rltrain.errors import require
from rltrain.observe.events import EpisodeEnd
from rltrain.runtime.seeding import EVAL_SEED_OFFSET, derive_seeds
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.run.engine import Run
from rltrain.strategies.run.storage import check_resumed_envs, replay

__all__ = ["EVAL_SEED_OFFSET", "OffPolicyConfig", "OffPolicyStrategy"]


@dataclass
class OffPolicyConfig:
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
    """

    num_envs: int = 1
    vectorization: str = "sync"  # str, not a Literal: omegaconf cannot type-check Literals
    buffer_size: int = 100_000
    batch_size: int = 64
    warmup_steps: int = 1_000
    train_interval: int = 256
    train_steps: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.num_envs >= 1, f"num_envs must be >= 1; got {self.num_envs}."),
            (self.vectorization in ("sync", "async"),
             f"vectorization must be 'sync' or 'async'; got {self.vectorization!r}."),
            (self.buffer_size >= 1, f"buffer_size must be >= 1; got {self.buffer_size}."),
            (self.batch_size >= 1, f"batch_size must be >= 1; got {self.batch_size}."),
            (self.batch_size <= self.buffer_size,
             f"batch_size ({self.batch_size}) is larger than buffer_size ({self.buffer_size}); "
             "raise buffer_size or lower batch_size."),
            (self.warmup_steps >= 0, f"warmup_steps must be >= 0; got {self.warmup_steps}."),
            (self.train_interval >= 1,
             f"train_interval must be >= 1 env step; got {self.train_interval}."),
            (self.train_steps >= 0, f"train_steps must be >= 0; got {self.train_steps}."),
        ]
        require("OffPolicyConfig", checks)
        check_typed_fields("OffPolicyConfig", self)


@register_strategy("off_policy", OffPolicyConfig,
                   "collect into a replay buffer, train every few env steps")
class OffPolicyStrategy(RLStrategy):
    """Collect with the current policy, learn from replayed transitions (DQN, SAC, Dreamer).

    Per vector step: act (uniform random during warm-up), step the envs, store the transitions,
    emit EnvStep and EpisodeEnd. Each time ``train_interval`` env steps have passed after warm-up:
    ``train_steps`` gradient steps on batches of ``batch_size``. Each ``components.evaluation``
    interval: greedy episodes on a separate environment, and once more at the end. The
    ``components.checkpointer`` saves the agent at its interval and at the end (also when
    stopped). The interrupter is checked before every vector step, gradient step and evaluation
    step. With ``components.checkpoint`` set, the networks, optimizers and counters are loaded
    from that checkpoint first.

    Args:
        config: The loop's settings. Default: :class:`OffPolicyConfig` ().
    """

    kind = "off_policy"

    def __init__(self, config: OffPolicyConfig | None = None) -> None:
        self.config = config if config is not None else OffPolicyConfig()

    @override
    def check(self, agent: LearningAgent, components: RLComponents,
              observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        cfg = self.config
        if cfg.warmup_steps >= components.num_steps and cfg.train_steps:
            warnings.warn(
                f"warmup_steps ({cfg.warmup_steps:,}) >= num_steps ({components.num_steps:,}): "
                "the run ends before its first gradient step, so the agent will not learn. "
                "Lower strategy.warmup_steps or raise trainer.num_steps.", stacklevel=3)
        # The agent's replay, made once and dropped (its pages are never touched): its own
        # checks (memory, sequence length) then fail before the run directory is written.
        agent.make_buffer(cfg.buffer_size, num_envs=cfg.num_envs,
                          observation_space=observation_space, action_space=action_space,
                          seed=derive_seeds(cfg.seed).storage, device=components.device)
        check_resumed_envs(components, observation_space, action_space, cfg.num_envs)

    @override
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        with Run(self, agent, components, env_init, seed=cfg.seed, storage=replay(cfg.buffer_size),
                 num_envs=cfg.num_envs,
                 vectorization=cast(Vectorization, cfg.vectorization)) as run:
            buffer, progress = run.storage, run.progress

            def batch() -> Any:
                return buffer.sample(cfg.batch_size)

            run.train_owed(batch)  # a round a stop cut short, when resuming
            while not run.done():
                before = progress.env_steps
                run.step(random=before < cfg.warmup_steps,
                         owe=functools.partial(self.owed, run, before))
                run.train_owed(batch)
                run.after_step(before)
            return run.finish()

    def owed(self, run: Run, before: int, episodes: list[EpisodeEnd]) -> int:
        """The gradient steps a vector step from ``before`` env steps earned: one round of
        ``train_steps`` per ``train_interval`` boundary crossed (several when ``num_envs >
        train_interval``), once the replay holds ``warmup_steps`` transitions (after a resume,
        too). With several processes the replay is every rank's buffer together, and a round
        starts on every rank or on none. The round's batches are drawn at once
        (``Buffer.prefetch``)."""
        cfg, buffer, progress = self.config, run.storage, run.progress
        rounds = progress.env_steps // cfg.train_interval - before // cfg.train_interval
        if not rounds or run.distributed.any(
                run.statistics.total(len(buffer)) < min(cfg.warmup_steps,
                                                        run.statistics.total(cfg.buffer_size))
                or not buffer.can_sample()):
            return 0
        buffer.prefetch(progress.pending_gradient_steps + rounds * cfg.train_steps,
                        cfg.batch_size)
        return rounds * cfg.train_steps

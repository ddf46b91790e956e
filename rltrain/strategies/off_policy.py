"""The off-policy loop: collect into a replay buffer, train every few env steps, evaluate."""

from __future__ import annotations

import functools
import warnings
from typing import Any, cast

import gymnasium as gym
from typing_extensions import override

from rltrain.agents.base import LearningAgent, Policy
from rltrain.agents.kinds import ReplayAgent
from rltrain.agents.protocols import ReplayLearner, RolloutLearner
from rltrain.buffers import Buffer
from rltrain.buffers.sampling import beta_at
from rltrain.envs.make import EnvInit, Vectorization
from rltrain.observe.events import EpisodeEnd
from rltrain.runtime.cadence import crossed
from rltrain.runtime.seeding import derive_seeds
from rltrain.settings.loops import OffPolicyConfig
from rltrain.settings.registry import register_strategy
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.components import RLComponents
from rltrain.strategies.run.engine import Run
from rltrain.strategies.run.storage import check_resumed_envs, replay

__all__ = ["OffPolicyConfig", "OffPolicyStrategy"]


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
    learner = ReplayLearner

    @classmethod
    def fits(cls, agent_type: type) -> bool:
        """A replay learner that does not learn from rollouts (those take the on-policy
        loop)."""
        return super().fits(agent_type) and not issubclass(agent_type, RolloutLearner)

    def __init__(self, config: OffPolicyConfig | None = None) -> None:
        self.config = config if config is not None else OffPolicyConfig()

    @property
    @override
    def seed(self) -> int:
        return self.config.seed

    @override
    def check(self, agent: LearningAgent, components: RLComponents,
              observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        cfg = self.config
        if cfg.warmup_steps >= components.num_steps and cfg.train_steps:
            warnings.warn(
                f"warmup_steps ({cfg.warmup_steps:,}) >= num_steps ({components.num_steps:,}): "
                "the run ends before its first gradient step, so the agent will not learn. "
                "Lower strategy.warmup_steps or raise trainer.num_steps.", stacklevel=3)
        check_sampling(agent, cfg)
        # The agent's replay, made once and dropped (its pages are never touched): its own
        # checks (memory, sequence length) then fail before the run directory is written.
        replay(cfg.buffer_size, cfg.frame_stack_replay, cfg.sampling)(
            agent, observation_space, action_space, cfg.num_envs,
            derive_seeds(cfg.seed).storage, components.device, components.frame_stack)
        check_resumed_envs(components, observation_space, action_space, cfg.num_envs)

    @override
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        sampling = cfg.sampling
        storage = replay(cfg.buffer_size, cfg.frame_stack_replay, sampling)
        with Run(self, agent, components, env_init, seed=cfg.seed, storage=storage,
                 num_envs=cfg.num_envs,
                 vectorization=cast(Vectorization, cfg.vectorization)) as run:
            buffer, progress = run.storage, run.progress
            priority = sampling.priority
            prioritized = getattr(buffer, "prioritized", None) if priority else None

            def batch() -> Any:
                if prioritized is not None and priority is not None:  # β annealed to 1
                    prioritized.beta = beta_at(priority, progress.env_steps,
                                               components.num_steps)
                return buffer.sample(cfg.batch_size)

            owed = functools.partial(self.owed, run)
            run.train_owed(batch)  # a round a stop cut short, when resuming
            while not run.done():
                before = progress.env_steps
                run.step(random=before < cfg.warmup_steps, owe=owed)
                run.train_owed(batch)
                run.after_step(before)
            return run.finish()

    def owed(self, run: Run[Buffer], before: int, episodes: list[EpisodeEnd]) -> int:
        """The gradient steps a vector step from ``before`` env steps earned: one round of
        ``train_steps`` per ``train_interval`` boundary crossed (several when ``num_envs >
        train_interval``), once the replay holds ``warmup_steps`` transitions (after a resume,
        too). With several processes the replay is every rank's buffer together, and a round
        starts on every rank or on none. The round's batches are drawn at once
        (``Buffer.prefetch``)."""
        cfg, buffer, progress = self.config, run.storage, run.progress
        rounds = crossed(before, progress.env_steps, cfg.train_interval)
        if not rounds or run.distributed.any(
                run.statistics.total(len(buffer)) < min(cfg.warmup_steps,
                                                        run.statistics.total(cfg.buffer_size))
                or not buffer.can_sample()):
            return 0
        buffer.prefetch(progress.pending_gradient_steps + rounds * cfg.train_steps,
                        cfg.batch_size)
        return rounds * cfg.train_steps


def check_sampling(agent: LearningAgent, config: OffPolicyConfig) -> None:
    """Refuse n-step or prioritized sampling for an agent whose ``training_step`` does not
    use them (``ReplayAgent.replay_sampling``): its targets would be silently wrong."""
    asked = {"n_step": config.n_step > 1, "prioritized": config.prioritized}
    supported = agent.replay_sampling if isinstance(agent, ReplayAgent) else frozenset()
    for name, on in asked.items():
        if on and name not in supported:
            value = config.n_step if name == "n_step" else "true"
            raise ValueError(
                f"strategy.{name}={value}: {type(agent).__name__} does not learn from "
                f"{'n-step returns' if name == 'n_step' else 'prioritized replay'} (its "
                f"replay_sampling is {sorted(supported) or 'empty'}). Remove the setting or "
                "use an agent that does (dqn, c51, qrdqn, sac, td3).")

"""The on-policy loop: collect a rollout with the current policy, then epochs of minibatches."""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
from typing_extensions import override

from rltrain.agents.base import LearningAgent, Policy
from rltrain.agents.kinds import RolloutAgent
from rltrain.agents.protocols import RolloutLearner
from rltrain.buffers.rollout import RolloutBatch, RolloutBuffer
from rltrain.envs.make import EnvInit, Vectorization
from rltrain.settings.loops import OnPolicyConfig
from rltrain.settings.registry import register_strategy
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.components import RLComponents
from rltrain.strategies.run.engine import Run
from rltrain.strategies.run.storage import check_resumed_envs, make_rollout, rollout

__all__ = ["OnPolicyConfig", "OnPolicyStrategy"]


@register_strategy("on_policy", OnPolicyConfig,
                   "collect a rollout with the current policy, then epochs over it")
class OnPolicyStrategy(RLStrategy):
    """Collect ``n_steps`` vector steps with the current policy, then learn from them (PPO).

    Per iteration: ``n_steps`` vector steps into the agent's rollout (EnvStep and EpisodeEnd
    events, evaluations and checkpoints when due); then the agent prepares the rollout
    (``prepare_rollout``: bootstrap values, advantages) and ``update_epochs`` epochs of shuffled
    minibatches of ``batch_size`` follow, each one gradient step through
    :class:`~rltrain.optim.Optimization` with its TrainStep event and a check of the stop
    request; the agent may end an update early (``update_done``, PPO's target KL). A stop in
    the middle of a rollout or an update is saved where it is, and resumes exactly there. The
    run ends at ``num_steps`` env steps; a last rollout cut short there is not learned from.

    Args:
        config: The loop's settings. Default: :class:`OnPolicyConfig` ().
    """

    kind = "on_policy"
    learner = RolloutLearner

    def __init__(self, config: OnPolicyConfig | None = None) -> None:
        self.config = config if config is not None else OnPolicyConfig()

    @property
    @override
    def seed(self) -> int:
        return self.config.seed

    @override
    def check(self, agent: LearningAgent, components: RLComponents,
              observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        cfg = self.config
        # The agent's rollout, made once and dropped: its memory check fails before the run
        # directory is written.
        make_rollout(agent, cfg.n_steps, num_envs=cfg.num_envs,
                     observation_space=observation_space, action_space=action_space, seed=0,
                     device=components.device).check_batch_size(cfg.batch_size)
        world = components.distributed.world_size
        if components.num_steps < cfg.n_steps * cfg.num_envs * world:
            ranks = f" x {world} processes" if world > 1 else ""
            raise ValueError(
                f"num_steps ({components.num_steps:,}) is shorter than one rollout (n_steps x "
                f"num_envs{ranks} = {cfg.n_steps * cfg.num_envs * world:,} env steps): the run "
                "would end before its first update. Raise trainer.num_steps or lower "
                "strategy.n_steps.")
        check_resumed_envs(components, observation_space, action_space, cfg.num_envs)

    @override
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        with Run(self, agent, components, env_init, seed=cfg.seed, storage=rollout(cfg.n_steps),
                 num_envs=cfg.num_envs,
                 vectorization=cast(Vectorization, cfg.vectorization)) as run:
            storage, progress = run.storage, run.progress
            while not run.stop_requested():
                if storage.full:  # resumed in the middle of an update
                    self.update(run, agent, storage)
                    continue
                if run.done():
                    break
                before = progress.env_steps
                run.step()
                if storage.full:  # before what is due: they see the updated policy
                    self.update(run, agent, storage)  # may stop part-way: then it is owed
                run.after_step(before)
            return run.finish()

    def update(self, run: Run[RolloutBuffer], agent: LearningAgent, storage: RolloutBuffer) -> None:
        """Learn from the full rollout: prepare it and owe its minibatches on first entry,
        train what is owed, and empty it once nothing is."""
        cfg, progress = self.config, run.progress
        if not storage.prepared:
            cast(RolloutLearner, agent).prepare_rollout(storage)
            storage.shuffle(cfg.update_epochs)
            storage.share_advantage_moments(cfg.batch_size, agent.statistics)
            run.owe(cfg.update_epochs * cfg.minibatches)
        total = cfg.update_epochs * cfg.minibatches

        def batch() -> RolloutBatch:  # the next minibatch of the update, by its index
            return storage.minibatch(total - progress.pending_gradient_steps, cfg.batch_size)

        run.train_owed(batch, until=agent.update_done if isinstance(agent, RolloutAgent)
                       and agent.ends_updates_early() else None)
        if not progress.pending_gradient_steps:
            storage.reset()

"""Each kind of agent carries its loop's hooks (rltrain/agents/kinds.py): the replay ones on
ReplayAgent, the rollout ones on RolloutAgent, none on every LearningAgent; γ reaches the n-step
replay from the agent's own declaration."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.agents import (
    DQN,
    PPO,
    PQN,
    SAC,
    TD3,
    DQNConfig,
    Dreamer,
    LearningAgent,
    ReplayAgent,
    RolloutAgent,
    SACConfig,
)
from rltrain.settings.replay import ReplaySampling

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Discrete(2)


def test_the_loop_hooks_sit_on_their_kind_only() -> None:
    for hook in ("make_buffer", "replay_sampling", "gamma", "make_rollout", "update_done",
                 "ends_updates_early", "prepare_rollout"):
        assert not hasattr(LearningAgent, hook), hook
    assert all(issubclass(a, ReplayAgent) for a in (DQN, SAC, TD3, Dreamer))
    assert all(issubclass(a, RolloutAgent) for a in (PPO, PQN))


@pytest.mark.parametrize("agent", [DQN(DQNConfig(gamma=0.9)), SAC(SACConfig(gamma=0.95))])
def test_n_step_returns_are_discounted_by_the_agent_s_own_gamma(agent: ReplayAgent) -> None:
    space = ACTIONS if isinstance(agent, DQN) else gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    buffer = agent.make_buffer(64, num_envs=1, observation_space=OBS, action_space=space,
                               seed=0, device=torch.device("cpu"),
                               sampling=ReplaySampling(n_step=3))
    assert agent.gamma() == agent.config.gamma  # type: ignore[attr-defined]
    assert buffer.gamma == pytest.approx(agent.gamma())  # type: ignore[attr-defined]


def test_a_replay_agent_that_declares_no_gamma_is_refused_n_step_returns() -> None:
    class NoDiscount(DQN):
        def gamma(self) -> None:
            return None

    with pytest.raises(ValueError, match=r"n-step returns need the agent's discount"):
        NoDiscount().make_buffer(64, num_envs=1, observation_space=OBS, action_space=ACTIONS,
                                 seed=0, device=torch.device("cpu"),
                                 sampling=ReplaySampling(n_step=2))


def test_ending_an_update_early_is_declared_by_overriding_update_done() -> None:
    class Ends(PQN):
        def update_done(self, metrics: object) -> bool:
            return True

    assert not PQN().ends_updates_early() and Ends().ends_updates_early()

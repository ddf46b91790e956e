"""The agent contract: each loop's hooks as protocols, checked structurally; a typed default
strategy; the index of the gradient step an agent computes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from rltrain import DQN, PPO, SAC, Dreamer, LearningAgent, OffPolicyStrategy, OnPolicyStrategy
from rltrain.agents.base import Policy
from rltrain.agents.protocols import ReplayLearner, RolloutLearner
from rltrain.optim import Optimization
from rltrain.settings.loops import OffPolicyConfig, OnPolicyConfig
from rltrain.settings.registry import default_strategy, strategy_taking
from rltrain.types import Progress


@pytest.mark.parametrize(("agent", "loop"), [(DQN, OffPolicyStrategy), (SAC, OffPolicyStrategy),
                                             (Dreamer, OffPolicyStrategy),
                                             (PPO, OnPolicyStrategy)])
def test_each_agent_fits_its_loop_by_its_hooks_and_not_the_other(agent: type, loop: type) -> None:
    other = OnPolicyStrategy if loop is OffPolicyStrategy else OffPolicyStrategy
    assert loop.fits(agent) and not other.fits(agent)
    assert default_strategy(agent).cls is loop
    assert issubclass(agent, ReplayLearner)  # every LearningAgent has a default replay
    assert issubclass(agent, RolloutLearner) == (loop is OnPolicyStrategy)


def test_an_agent_with_a_prepare_rollout_of_its_own_is_a_rollout_learner() -> None:
    class Mine(DQN):
        def prepare_rollout(self, rollout: Any) -> None: ...

    assert issubclass(Mine, RolloutLearner) and OnPolicyStrategy.fits(Mine)
    assert not OffPolicyStrategy.fits(Mine)
    assert type(Mine().default_strategy_settings()) is OnPolicyConfig


@pytest.mark.parametrize("agent", [DQN(), SAC(), Dreamer(), PPO()])
def test_the_default_strategy_settings_are_a_typed_config_that_names_the_strategy(
        agent: LearningAgent) -> None:
    settings = agent.default_strategy_settings()
    assert isinstance(settings, (OffPolicyConfig, OnPolicyConfig))
    assert strategy_taking(settings).cls is default_strategy(type(agent)).cls
    with pytest.raises(ValueError, match="batch_size"):  # checked like any config
        type(settings)(batch_size=0)


class Counting(LearningAgent):
    """Records the gradient step index each training_step receives."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.seen: list[int] = []

    def check_spaces(self, observation_space: Any, action_space: Any) -> None: ...

    def build(self, observation_space: Any, action_space: Any) -> None: ...

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"w": torch.optim.SGD([self.w], lr=0.1)}

    def training_step(self, batch: Any, optim: Optimization) -> dict[str, Any]:
        self.seen.append(optim.gradient_step)
        optim.step("w", (self.w - 1).square().sum())
        return {}

    def policy(self, device: torch.device) -> Policy:
        raise NotImplementedError


def test_the_agent_receives_the_index_of_the_gradient_step_it_computes() -> None:
    agent, progress = Counting(), Progress(gradient_steps=7)  # a resumed run: 7 done
    optim = Optimization(agent.configure_optimizers(), progress=progress)
    for _ in range(3):
        optim.training_step(agent, None)
    assert agent.seen == [8, 9, 10] and progress.gradient_steps == 10

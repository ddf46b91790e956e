"""Agents: the algorithms. Each owns its networks and loss; the framework owns the loop."""

from rltrain.agents.base import LearningAgent, Policy, PolicyState, PolicyStep, SpaceError
from rltrain.agents.dqn import DQN, DQNConfig, DQNPolicy

__all__ = [
    "DQN",
    "DQNConfig",
    "DQNPolicy",
    "LearningAgent",
    "Policy",
    "PolicyState",
    "PolicyStep",
    "SpaceError",
]

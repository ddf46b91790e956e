"""Agents: the algorithms. Each owns its networks and loss; the framework owns the loop."""

from rltrain.agents.base import LearningAgent, Policy, SpaceError
from rltrain.agents.dqn import DQN, DQNConfig, DQNPolicy
from rltrain.types import PolicyState, PolicyStep

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

"""Agents: the algorithms. Each owns its networks and loss; the framework owns the loop."""

from rltrain.agents.base import LearningAgent, Policy, SpaceError
from rltrain.agents.c51 import C51, C51Config
from rltrain.agents.dqn import DQN, DQNConfig, DQNPolicy
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.agents.kinds import ReplayAgent, RolloutAgent
from rltrain.agents.ppo import PPO, PPOConfig, PPOPolicy
from rltrain.agents.pqn import PQN, PQNConfig
from rltrain.agents.qrdqn import QRDQN, QRDQNConfig
from rltrain.agents.sac import SAC, SACConfig, SACPolicy
from rltrain.agents.td3 import DDPG, TD3, DDPGConfig, TD3Config, TD3Policy
from rltrain.settings.registry import register_agent
from rltrain.types import PolicyState, PolicyStep

__all__ = [
    "C51",
    "DDPG",
    "DQN",
    "PPO",
    "PQN",
    "QRDQN",
    "SAC",
    "TD3",
    "C51Config",
    "DDPGConfig",
    "DQNConfig",
    "DQNPolicy",
    "Dreamer",
    "DreamerConfig",
    "LearningAgent",
    "PPOConfig",
    "PPOPolicy",
    "PQNConfig",
    "Policy",
    "PolicyState",
    "PolicyStep",
    "QRDQNConfig",
    "ReplayAgent",
    "RolloutAgent",
    "SACConfig",
    "SACPolicy",
    "SpaceError",
    "TD3Config",
    "TD3Policy",
    "register_agent",
]

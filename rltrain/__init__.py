"""rltrain: reinforcement-learning training on PyTorch and Gymnasium.

The names here are what a user writes every day: the :class:`Trainer` (and :func:`build` and
:func:`compose` for configs), the agents and their configs, the strategies and their configs,
the parts of a loop or agent of your own (:class:`RLStrategy`, :class:`Run`,
:class:`LearningAgent`), a callback's base (:class:`Subscriber`, :class:`EarlyStopping`) and
:func:`load_policy`. Everything else is imported from its folder (``rltrain.checkpoint``,
``rltrain.envs``, ``rltrain.observe``, ...; docs/architecture.md maps them).
"""

from rltrain._version import __version__
from rltrain.agents import (
    DQN,
    PPO,
    SAC,
    DQNConfig,
    Dreamer,
    DreamerConfig,
    LearningAgent,
    PPOConfig,
    SACConfig,
)
from rltrain.config.schema import compose
from rltrain.inference import load_policy
from rltrain.observe import Subscriber
from rltrain.observe.callbacks import EarlyStopping
from rltrain.strategies import (
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    RLStrategy,
    Run,
)
from rltrain.trainer import Trainer, build

__all__ = [
    "DQN",
    "PPO",
    "SAC",
    "DQNConfig",
    "Dreamer",
    "DreamerConfig",
    "EarlyStopping",
    "LearningAgent",
    "OffPolicyConfig",
    "OffPolicyStrategy",
    "OnPolicyConfig",
    "OnPolicyStrategy",
    "PPOConfig",
    "RLStrategy",
    "Run",
    "SACConfig",
    "Subscriber",
    "Trainer",
    "__version__",
    "build",
    "compose",
    "load_policy",
]

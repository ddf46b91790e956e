"""rltrain: reinforcement-learning training on PyTorch and Gymnasium.

The names here are what a user writes every day: the :class:`Trainer` (and :func:`build` and
:func:`compose` for configs), the agents and their configs, the strategies and their configs,
the parts of a loop or agent of your own (:class:`RLStrategy`, :class:`Run`,
:class:`RLComponents`, :class:`LearningAgent`), a callback's base (:class:`Subscriber`,
:class:`EarlyStopping`) and :func:`load_policy`. Everything else is imported from the public
package of its extension point: ``rltrain.agents`` (an agent: ``Policy``),
``rltrain.strategies`` (a loop: ``replay``, ``rollout``), ``rltrain.envs`` (``EnvInit``,
``EnvSpec``), ``rltrain.observe`` (events and renderers), ``rltrain.checkpoint`` (stores);
docs/architecture.md maps them.
"""

from rltrain._version import __version__
from rltrain.agents import (
    DQN,
    PPO,
    SAC,
    TD3,
    DQNConfig,
    Dreamer,
    DreamerConfig,
    LearningAgent,
    PPOConfig,
    SACConfig,
    TD3Config,
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
from rltrain.strategies.components import RLComponents
from rltrain.trainer import Trainer, build

__all__ = [
    "DQN",
    "PPO",
    "SAC",
    "TD3",
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
    "RLComponents",
    "RLStrategy",
    "Run",
    "SACConfig",
    "Subscriber",
    "TD3Config",
    "Trainer",
    "__version__",
    "build",
    "compose",
    "load_policy",
]

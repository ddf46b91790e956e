"""rltrain: reinforcement-learning training on PyTorch and Gymnasium."""

from rltrain._version import __version__
from rltrain.agents import (
    DQN,
    PPO,
    SAC,
    DQNConfig,
    LearningAgent,
    Policy,
    PPOConfig,
    SACConfig,
    SpaceError,
)
from rltrain.buffers import ReplayBatch, ReplayBuffer, RolloutBatch, RolloutBuffer
from rltrain.checkpoint import Checkpointer
from rltrain.components import EvaluationSettings, RLComponents, SummarySettings
from rltrain.config.schema import ConfigError, EnvConfig, compose, validate
from rltrain.config.trainer_config import TrainerConfig
from rltrain.envs.evaluator import Evaluator
from rltrain.envs.make import EnvInit, EnvSpec, make_vector_env
from rltrain.envs.runner import Runner
from rltrain.inference import InferencePolicy, export_policy, load_policy
from rltrain.observe import EventProcessor, Metrics, Subscriber
from rltrain.observe.callbacks import EarlyStopping
from rltrain.optim import Optimization
from rltrain.runtime.interrupt import Interrupter
from rltrain.strategies import (
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    RLResult,
    RLStrategy,
    Run,
    replay,
    rollout,
)
from rltrain.trainer import BuiltRun, Trainer, build
from rltrain.types import Progress, Summary, Transitions

__all__ = [
    "DQN",
    "PPO",
    "SAC",
    "BuiltRun",
    "Checkpointer",
    "ConfigError",
    "DQNConfig",
    "EarlyStopping",
    "EnvConfig",
    "EnvInit",
    "EnvSpec",
    "EvaluationSettings",
    "Evaluator",
    "EventProcessor",
    "InferencePolicy",
    "Interrupter",
    "LearningAgent",
    "Metrics",
    "OffPolicyConfig",
    "OffPolicyStrategy",
    "OnPolicyConfig",
    "OnPolicyStrategy",
    "Optimization",
    "PPOConfig",
    "Policy",
    "Progress",
    "RLComponents",
    "RLResult",
    "RLStrategy",
    "ReplayBatch",
    "ReplayBuffer",
    "RolloutBatch",
    "RolloutBuffer",
    "Run",
    "Runner",
    "SACConfig",
    "SpaceError",
    "Subscriber",
    "Summary",
    "SummarySettings",
    "Trainer",
    "TrainerConfig",
    "Transitions",
    "__version__",
    "build",
    "compose",
    "export_policy",
    "load_policy",
    "make_vector_env",
    "replay",
    "rollout",
    "validate",
]

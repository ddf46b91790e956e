"""Training strategies: the loops."""

from rltrain.runtime.seeding import EVAL_SEED_OFFSET, seed_everything
from rltrain.settings.loops import OffPolicyConfig, OnPolicyConfig
from rltrain.settings.registry import register_strategy
from rltrain.strategies.base import RLResult, RLStrategy
from rltrain.strategies.off_policy import OffPolicyStrategy
from rltrain.strategies.on_policy import OnPolicyStrategy
from rltrain.strategies.run.engine import Run
from rltrain.strategies.run.storage import Sampled, Storage, StorageFactory, replay, rollout
from rltrain.types import Summary

__all__ = [
    "EVAL_SEED_OFFSET",
    "OffPolicyConfig",
    "OffPolicyStrategy",
    "OnPolicyConfig",
    "OnPolicyStrategy",
    "RLResult",
    "RLStrategy",
    "Run",
    "Sampled",
    "Storage",
    "StorageFactory",
    "Summary",
    "register_strategy",
    "replay",
    "rollout",
    "seed_everything",
]

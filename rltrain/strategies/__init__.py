"""Training strategies: the loops."""

from rltrain.seeding import seed_everything
from rltrain.strategies.base import RLResult, RLStrategy, Summary
from rltrain.strategies.off_policy import OffPolicyConfig, OffPolicyStrategy

__all__ = [
    "OffPolicyConfig",
    "OffPolicyStrategy",
    "RLResult",
    "RLStrategy",
    "Summary",
    "seed_everything",
]

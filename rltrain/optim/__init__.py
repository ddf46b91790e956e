"""Framework-owned optimization: backward, gradient accumulation, clipping and optimizer steps
(:mod:`.optimization`), its settings (:mod:`.settings`), and the arithmetic of a step without
PyTorch's per-call wrappers (:mod:`.fused`)."""

from rltrain.optim.fused import adam, clip_grad_norm, fused_adam_step
from rltrain.optim.optimization import (
    REFUSED_LOSS,
    STANDALONE,
    Optimization,
    OptimizerRecord,
    TrainableAgent,
    check_autocast,
    ended_on_refused_loss,
)
from rltrain.optim.settings import DTYPES, OptimizationSettings, resolve_dtype

__all__ = ["DTYPES", "REFUSED_LOSS", "STANDALONE", "Optimization", "OptimizationSettings",
           "OptimizerRecord", "TrainableAgent", "adam", "check_autocast", "clip_grad_norm",
           "ended_on_refused_loss", "fused_adam_step", "resolve_dtype"]

"""Framework-owned optimization: backward, gradient accumulation, clipping and optimizer steps
(:mod:`.optimization`), and the arithmetic of a step without PyTorch's per-call wrappers
(:mod:`.fused`)."""

from rltrain.optim.fused import adam, clip_grad_norm, fused_adam_step
from rltrain.optim.optimization import (
    REFUSED_LOSS,
    Optimization,
    TrainableAgent,
    check_autocast,
    ended_on_refused_loss,
)

__all__ = ["REFUSED_LOSS", "Optimization", "TrainableAgent", "adam", "check_autocast",
           "clip_grad_norm", "ended_on_refused_loss", "fused_adam_step"]

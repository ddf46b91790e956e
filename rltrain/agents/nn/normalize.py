"""Running statistics that travel with a model: observation normalisation and reward scaling.

Both are ``nn.Module`` buffers, so they are in the agent's ``state_dict``: every checkpoint,
``best.pt`` included, holds them, and evaluation uses them as they were saved (frozen). They
change only when the agent updates them from a rollout.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rltrain.runtime.distributed import SINGLE, DistributedContext


class RunningMeanStd(nn.Module):
    """Mean and variance of everything seen so far (float64), merged batch by batch (Chan et
    al.'s parallel algorithm, as Stable-Baselines3's ``RunningMeanStd``).

    Args:
        shape: Shape of one sample (``()`` for scalars).
        epsilon: Initial count, so the first batch does not divide by zero. Default 1e-4.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor, distributed: DistributedContext = SINGLE) -> None:
        """Merge a batch ``[B, *shape]`` into the statistics; with several processes
        (``distributed``), every rank's batch together, so every rank keeps the same
        statistics."""
        batch = batch.to(self.mean.device, torch.float64).reshape(-1, *self.mean.shape)
        count = batch.shape[0]
        if count == 0:
            return
        mean, var = batch.mean(dim=0), batch.var(dim=0, unbiased=False)
        if distributed.distributed:  # each rank's moments (of as many samples), in rank order
            moments = distributed.all_gather(torch.stack([mean, var]))
            mean, var = moments[0]
            for other in moments[1:]:
                mean, var, count = _merged(mean, var, count, other[0], other[1], batch.shape[0])
        merged = _merged(self.mean, self.var, self.count, mean, var, count)
        for mine, value in zip((self.mean, self.var, self.count), merged, strict=True):
            mine.copy_(value)

    def normalize(self, x: torch.Tensor, clip: float, epsilon: float = 1e-8) -> torch.Tensor:
        """``clip((x - mean) / sqrt(var + epsilon), -clip, clip)``, in ``x``'s dtype."""
        mean, std = self.mean.to(x.dtype), (self.var + epsilon).sqrt().to(x.dtype)
        return ((x - mean) / std).clamp(-clip, clip)

    def scale(self, x: torch.Tensor, clip: float, epsilon: float = 1e-8) -> torch.Tensor:
        """``clip(x / sqrt(var + epsilon), -clip, clip)``: a reward divided by the spread of
        the discounted return, not centred (Engstrom et al. 2020, arXiv:2005.12729)."""
        return (x / (self.var + epsilon).sqrt().to(x.dtype)).clamp(-clip, clip)


def _merged(mean: torch.Tensor, var: torch.Tensor, count: int | torch.Tensor,
            other_mean: torch.Tensor, other_var: torch.Tensor, other_count: int | torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The mean, (population) variance and count of two sets of samples together (Chan et
    al.'s formula)."""
    total = count + other_count
    delta = other_mean - mean
    m2 = var * count + other_var * other_count + delta.square() * count * other_count / total
    return mean + delta * other_count / total, m2 / total, total

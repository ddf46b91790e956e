"""Running statistics that travel with a model: observation normalisation and reward scaling.

Both are ``nn.Module`` buffers, so they are in the agent's ``state_dict``: every checkpoint,
``best.pt`` included, holds them, and evaluation uses them as they were saved (frozen). They
change only when the agent updates them from a rollout.
"""

from __future__ import annotations

import torch
from torch import nn

from rltrain.runtime.statistics import Statistics, merge_moments

#: The statistics of one process: the plain computation.
ONE_PROCESS = Statistics()


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
    def update(self, batch: torch.Tensor, statistics: Statistics = ONE_PROCESS) -> None:
        """Merge a batch ``[B, *shape]`` into the statistics: every rank's batch together
        (``statistics``, the run's), so every rank keeps the same statistics."""
        batch = batch.to(self.mean.device, torch.float64).reshape(-1, *self.mean.shape)
        if batch.shape[0] == 0:
            return
        mean, var, count = statistics.merge_batch_moments(
            batch.mean(dim=0), batch.var(dim=0, unbiased=False), batch.shape[0])
        merged = merge_moments(self.mean, self.var, self.count, mean, var, count)
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

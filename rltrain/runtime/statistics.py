"""The statistics service: moments of data spread over the run's processes, computed as if it
were in one place. With one process each method is the plain computation, so code that uses it
(PPO's advantage normalisation, running observation and reward statistics, the rollout's
minibatch moments) reads the same at one process and at N, with no branch on the world size.
"""

from __future__ import annotations

from typing import Any

import torch

from rltrain.runtime.distributed import SINGLE, DistributedContext, moments_mean_std


class Statistics:
    """Statistics over every rank's data together (:class:`DistributedContext`'s collectives).

    Args:
        context: The run's processes. Default: one process.
    """

    def __init__(self, context: DistributedContext = SINGLE) -> None:
        self.context = context

    def total(self, count: int) -> int:
        """``count`` items on each rank, counted over every rank."""
        return count * self.context.world_size

    def mean_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and Bessel-corrected standard deviation of every rank's ``x`` together
        (one process: ``x.mean()``, ``x.std()``)."""
        return self.context.mean_std(x)

    def together(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` (``[..., n]``, the same shape on every rank) side by side in rank
        order along the last dimension: ``[..., ranks x n]`` (one process: ``x``)."""
        return self.context.all_gather(x).movedim(0, -2).flatten(-2)

    def own(self, together: torch.Tensor, n: int) -> torch.Tensor:
        """This rank's ``n`` columns of what :meth:`together` made."""
        rank = self.context.rank
        return together[..., rank * n:(rank + 1) * n]

    def merge_batch_moments(self, mean: torch.Tensor, var: torch.Tensor, count: int
                            ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """The mean, (population) variance and count of every rank's batch together, each
        rank's batch having ``count`` samples with moments ``mean`` and ``var`` (merged in
        rank order, so every rank gets the same result; one process: its own)."""
        moments = self.context.all_gather(torch.stack([mean, var]))
        mean, var = moments[0]
        total: Any = count
        for other in moments[1:]:
            mean, var, total = merge_moments(mean, var, total, other[0], other[1], count)
        return mean, var, total

    def minibatch_moments(self, values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
        """The count, sum and sum of squares (float64 ``[minibatches, 3]``) of every rank's
        part of each minibatch of ``values``, whose rows (``[minibatches, batch_size]``)
        index the flattened ``values``: one all-reduce for a whole update, so a minibatch
        spread over the ranks is normalised as one without a collective per gradient step.
        None with one process, where each minibatch holds all of its values."""
        if not self.context.distributed:
            return None
        taken = values.reshape(-1).double()[rows]
        moments = torch.stack([torch.full((len(taken),), float(rows.shape[1]),
                                          dtype=torch.float64),
                               taken.sum(1), taken.square().sum(1)], dim=1)
        return self.context.all_reduce_(moments)

    def minibatch_mean_std(self, x: torch.Tensor, moments: torch.Tensor | None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and standard deviation of a minibatch whose part on this rank is ``x``:
        from its ``moments`` over every rank, shared once per update
        (:meth:`minibatch_moments`), else with a collective now (:meth:`mean_std`; one
        process: of ``x`` itself)."""
        if moments is None:
            return self.mean_std(x)
        mean, std = moments_mean_std(moments)
        return mean.to(x), std.to(x)


def merge_moments(mean: torch.Tensor, var: torch.Tensor, count: int | torch.Tensor,
                  other_mean: torch.Tensor, other_var: torch.Tensor,
                  other_count: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The mean, (population) variance and count of two sets of samples together (Chan et
    al.'s formula)."""
    total = count + other_count
    delta = other_mean - mean
    m2 = var * count + other_var * other_count + delta.square() * count * other_count / total
    return mean + delta * other_count / total, m2 / total, total

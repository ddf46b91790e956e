"""What a replay learner's loss takes from a batch besides its transitions: the bootstrap
discount of n-step windows, the importance weights of prioritized replay, and the TD errors
it sends back as new priorities. One place, so that every agent reads them alike."""

from __future__ import annotations

import torch

from rltrain.buffers.replay import ReplayBatch


def discount(batch: ReplayBatch, gamma: float) -> torch.Tensor | float:
    """The factor of the bootstrapped value: ``gamma**k`` per transition for n-step windows of
    ``k`` transitions (``batch.discounts``), else ``gamma``."""
    return gamma if batch.discounts is None else batch.discounts


def weighted(losses: torch.Tensor, batch: ReplayBatch) -> torch.Tensor:
    """The mean of per-transition ``losses`` (``[batch]``), each weighted by its importance
    weight when the batch is prioritized (Schaul et al. 2016, Alg. 1 line 12)."""
    if batch.weights is None:
        return losses.mean()
    return (losses * batch.weights).mean()


def send_td_errors(batch: ReplayBatch, td_errors: torch.Tensor) -> None:
    """Give a prioritized batch's transitions their new priorities from ``td_errors``
    (``[batch]``; their absolute values are used); nothing for a uniform batch."""
    if batch.priorities is not None:
        batch.priorities.update(td_errors.detach())

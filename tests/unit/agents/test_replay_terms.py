"""What a replay learner's loss reads besides the transitions (rltrain/agents/replay_terms.py):
the n-step bootstrap discount, the importance weights and the TD errors sent back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rltrain.agents.replay_terms import discount, send_td_errors, weighted
from rltrain.buffers.replay import ReplayBatch
from rltrain.buffers.sampling import Prioritized, PriorityFeedback
from rltrain.settings.replay import PriorityConfig


def batch(**extra: object) -> ReplayBatch:
    rows = torch.zeros(3, 1)
    return ReplayBatch(rows, torch.zeros(3), torch.zeros(3), rows, torch.zeros(3),
                       torch.zeros(3), **extra)  # type: ignore[arg-type]


def test_a_uniform_one_step_batch_uses_gamma_and_the_plain_mean() -> None:
    plain = batch()
    assert discount(plain, 0.9) == 0.9
    assert weighted(torch.tensor([1.0, 2.0, 6.0]), plain).item() == pytest.approx(3.0)
    send_td_errors(plain, torch.ones(3))  # nothing to send: no error either


def test_n_step_windows_bootstrap_with_their_own_discounts() -> None:
    discounts = torch.tensor([0.9, 0.81, 0.729])
    assert torch.equal(discount(batch(discounts=discounts), 0.9), discounts)  # type: ignore[arg-type]


def test_a_prioritized_batch_is_weighted_and_sends_its_td_errors_back() -> None:
    sampler = Prioritized(3, PriorityConfig(alpha=1.0, epsilon=1e-6))
    sampler.added(np.arange(3))
    prioritized = batch(weights=torch.tensor([1.0, 0.5, 0.0]),
                        priorities=PriorityFeedback(sampler, np.arange(3)))
    assert weighted(torch.tensor([2.0, 2.0, 2.0]), prioritized).item() == pytest.approx(1.0)
    send_td_errors(prioritized, torch.tensor([-2.0, 0.5, 4.0]))
    np.testing.assert_allclose(sampler.tree.values(), [2.0, 0.5, 4.0], rtol=1e-5)

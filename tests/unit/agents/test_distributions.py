"""One action distribution per Gymnasium action space (rltrain/agents/nn/distributions.py):
samples inside the space, a mode that does not draw, log-probabilities and entropies per batch
row that agree with torch's own distributions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain.agents.nn.distributions import ActionHead

SPACES: list[gym.Space[Any]] = [
    gym.spaces.Discrete(4),
    gym.spaces.MultiDiscrete([2, 3]),
    gym.spaces.MultiBinary(3),
    gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_each_space_gets_a_distribution_over_its_actions(space: gym.Space[Any]) -> None:
    torch.manual_seed(0)
    head = ActionHead(space, log_std_init=-0.5)
    out = torch.randn(5, head.out_features)
    dist = head(out)
    actions = dist.sample()
    assert actions.shape[0] == 5
    assert dist.log_prob(actions).shape == (5,) and dist.entropy().shape == (5,)
    assert torch.isfinite(dist.log_prob(actions)).all()
    state = torch.get_rng_state()
    mode = dist.mode()
    assert torch.equal(torch.get_rng_state(), state)  # the mode draws nothing
    assert torch.equal(mode, head(out).mode())
    if not isinstance(space, gym.spaces.Box):
        assert all(space.contains(np.asarray(a, dtype=space.dtype)) for a in actions.numpy())


def test_a_multi_discrete_log_prob_is_the_sum_of_its_components() -> None:
    head = ActionHead(gym.spaces.MultiDiscrete([2, 3]))
    out = torch.randn(4, 5)
    actions = torch.tensor([[0, 2], [1, 0], [1, 1], [0, 0]])
    first = torch.distributions.Categorical(logits=out[:, :2]).log_prob(actions[:, 0])
    second = torch.distributions.Categorical(logits=out[:, 2:]).log_prob(actions[:, 1])
    torch.testing.assert_close(head(out).log_prob(actions), first + second)


def test_a_box_gaussian_uses_the_learned_log_std() -> None:
    head = ActionHead(gym.spaces.Box(-1.0, 1.0, (2,), np.float32), log_std_init=-1.0)
    out = torch.zeros(3, 2)
    expected = torch.distributions.Normal(out, torch.exp(torch.tensor(-1.0))).entropy().sum(-1)
    torch.testing.assert_close(head(out).entropy(), expected)


def test_a_space_without_a_distribution_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="No action distribution for Text spaces"):
        ActionHead(gym.spaces.Text(5))

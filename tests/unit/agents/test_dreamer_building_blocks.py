"""Dreamer's rewritten building blocks compute what the plain forms compute: imagination with
its noise drawn before the loop, the λ-returns from ``v(s_{t+1})``, the KL without distribution
objects and the return scale's quantiles by selection."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from torch.distributions import Independent, Normal, kl_divergence

from rltrain.agents import returns
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.agents.dreamer.behavior import imagine, quantiles
from rltrain.agents.dreamer.world_model import State, gaussian_kl
from rltrain.types import Progress


def built() -> Dreamer:
    agent = Dreamer(DreamerConfig(deter_size=32, stoch_size=8, hidden_size=32,
                                  sequence_length=10, horizon=5))
    probe = gym.make("Pendulum-v1")
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=torch.device("cpu"), progress=Progress())
    probe.close()
    return agent


def test_imagine_computes_what_stepping_rsample_and_img_step_computes() -> None:
    # 16 starts: each step's actor noise (16 x 1) and prior noise (16 x 8) are multiples of
    # 16 values, so one draw before the loop gives the numbers stepping draws.
    agent = built()
    rssm, actor = agent.world_model.rssm, agent.actor
    n, horizon = 16, 5
    start = State(torch.randn(n, 32), torch.randn(n, 8), torch.zeros(n, 8), torch.ones(n, 8))
    torch.manual_seed(3)
    rollout = imagine(rssm, actor, start, horizon)
    torch.manual_seed(3)
    state, actions, log_probs, features = start, [], [], [start.features()]
    for _ in range(horizon):
        action, log_prob = actor.rsample(features[-1].detach())
        state = rssm.img_step(state, action)
        features.append(state.features())
        actions.append(action)
        log_probs.append(log_prob)
    torch.testing.assert_close(rollout.features, torch.stack(features[:-1]))
    torch.testing.assert_close(rollout.next_features, torch.stack(features[1:]))
    torch.testing.assert_close(rollout.actions, torch.stack(actions))
    torch.testing.assert_close(rollout.log_probs, torch.stack(log_probs))
    torch.testing.assert_close(rollout.entropies, -torch.stack(log_probs))


@pytest.mark.parametrize("lambda_", [0.0, 0.95, 1.0])
def test_lambda_returns_match_the_plain_recursion(lambda_: float) -> None:
    torch.manual_seed(0)
    rewards, discounts = torch.randn(15, 64), torch.rand(15, 64)
    values = torch.randn(16, 64)  # v(s_0) ... v(s_H)
    expected, last = [], values[-1]  # Eq. 6 step by step, R_H = v(s_H)
    for t in reversed(range(15)):
        last = rewards[t] + discounts[t] * ((1 - lambda_) * values[t + 1] + lambda_ * last)
        expected.append(last)
    torch.testing.assert_close(returns.lambda_returns(rewards, values[1:], discounts, lambda_),
                               torch.stack(expected[::-1]))


def test_gaussian_kl_is_kl_divergence_of_independent_normals() -> None:
    torch.manual_seed(0)
    mean_q, mean_p = torch.randn(2, 7, 8).unbind(0)
    std_q, std_p = (torch.rand(2, 7, 8) + 0.1).unbind(0)
    expected = kl_divergence(Independent(Normal(mean_q, std_q), 1),
                             Independent(Normal(mean_p, std_p), 1))
    assert torch.equal(gaussian_kl(mean_q, std_q, mean_p, std_p), expected)


@pytest.mark.parametrize("size", [1, 2, 7, 100, 7680])
def test_quantiles_are_torch_quantile(size: int) -> None:
    torch.manual_seed(size)
    for values in (torch.randn(size) * 100, torch.randint(0, 3, (size,)).float()):
        q = values.new_tensor([0.05, 0.95])
        assert torch.equal(quantiles(values, [0.05, 0.95]), torch.quantile(values, q))
    with_nan = torch.randn(size)
    with_nan[0] = float("nan")
    assert quantiles(with_nan, [0.05, 0.95]).isnan().all()

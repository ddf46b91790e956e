"""Noisy nets (``agent.noisy``): the layer's factorised noise against its equations, drawn from
torch's generator, new noise for each acting step, greedy acting on the means. Exact resume and
learning of noisy C51 and QR-DQN: tests/unit/agents/test_distributional.py."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
import torch.nn.functional as F

from rltrain import DQN
from rltrain.agents import DQNConfig
from rltrain.agents.nn.noisy import NoisyLinear, means_only, noisy_layers
from rltrain.types import Progress


def test_a_noisy_layer_is_its_means_plus_factorised_noise_of_learned_scale() -> None:
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3, sigma0=0.5)
    bound = 1 / math.sqrt(5)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    assert torch.allclose(layer.weight_sigma, torch.full((3, 5), 0.5 * bound))
    assert torch.allclose(layer.bias_sigma, torch.full((3,), 0.5 * bound))
    x = torch.randn(4, 5)
    layer.reset_noise()
    f_in, f_out = layer.epsilon_in.clone(), layer.epsilon_out.clone()
    # f(ε) = sgn(ε) √|ε| of standard normal draws: its square's magnitude is a normal's
    assert f_in.abs().max() > 0 and f_out.abs().max() > 0
    weight = layer.weight_mu + layer.weight_sigma * torch.outer(f_out, f_in)  # Eq. 10-11
    expected = F.linear(x, weight, layer.bias_mu + layer.bias_sigma * f_out)
    assert torch.allclose(layer(x), expected, atol=1e-6)
    assert torch.equal(layer(x), layer(x))  # the noise stays until it is drawn again
    with means_only([layer]):
        assert torch.allclose(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))
    assert layer.noisy
    layer.reset_noise()
    assert not torch.allclose(layer(x), expected)
    layer(x).sum().backward()  # the scales learn
    assert layer.weight_sigma.grad is not None and layer.weight_sigma.grad.abs().sum() > 0
    assert "epsilon_in" not in layer.state_dict()  # drawn again before each use, not saved


def test_the_noise_is_drawn_from_torchs_generator() -> None:
    layer = NoisyLinear(4, 2)
    torch.manual_seed(7)
    layer.reset_noise()
    first = layer.epsilon_in.clone()
    torch.manual_seed(7)
    layer.reset_noise()
    assert torch.equal(layer.epsilon_in, first)


@pytest.mark.parametrize("dueling", [False, True])
def test_noisy_dqn_has_noisy_layers_after_the_encoder_in_both_networks(dueling: bool) -> None:
    agent = DQN(DQNConfig(hidden_sizes=[16, 8], noisy=True, dueling=dueling))
    env = gym.make("CartPole-v1")
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    expected = 4 if dueling else 3  # torso 2 + value + advantage, or 3 layers
    assert len(noisy_layers(agent.q_network)) == expected
    assert len(agent.noisy_layers) == 2 * expected  # online and target
    plain = DQN(DQNConfig(hidden_sizes=[16]))
    plain.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    assert not plain.noisy_layers and not noisy_layers(plain.q_network)


def test_noisy_acting_draws_new_noise_each_step_and_greedy_acting_uses_the_means() -> None:
    env = gym.make("CartPole-v1")
    agent = DQN(DQNConfig(hidden_sizes=[32], noisy=True, noisy_sigma0=4.0,
                          epsilon_start=0.0, epsilon_end=0.0))
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    policy = agent.policy(torch.device("cpu"))
    obs = torch.randn(64, 4)
    with torch.inference_mode():
        greedy = [policy.act(obs, None, True).action for _ in range(3)]
        noisy = [policy.act(obs, None, False).action for _ in range(3)]
    assert all(torch.equal(greedy[0], g) for g in greedy[1:])
    assert not all(torch.equal(noisy[0], n) for n in noisy[1:])  # noise of scale 4: varies
    with torch.inference_mode(), means_only(agent.noisy_layers):
        assert torch.equal(agent.q_network(obs).argmax(dim=1), greedy[0])


def test_noisy_sigma0_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"noisy_sigma0 must be > 0 .*got 0.0"):
        DQNConfig(noisy=True, noisy_sigma0=0.0)

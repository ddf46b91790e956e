"""DQN: the TD loss by hand, the epsilon schedule, target updates, dueling head, policies,
space checks and config validation."""

from __future__ import annotations

import random
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain import Trainer
from rltrain.agents import DQN, DQNConfig, SpaceError
from rltrain.buffers import ReplayBatch
from rltrain.buffers.sampling import Prioritized, PriorityFeedback
from rltrain.optim import Optimization
from rltrain.settings.replay import PriorityConfig
from rltrain.types import Progress

CPU = torch.device("cpu")


def build(config: DQNConfig, obs_dim: int = 2, num_actions: int = 2,
          progress: Progress | None = None) -> DQN:
    agent = DQN(config)
    agent.setup(observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                action_space=gym.spaces.Discrete(num_actions), device=CPU,
                progress=progress if progress is not None else Progress())
    return agent


def sgd(agent: DQN, lr: float = 0.1) -> Optimization:
    return Optimization({"q": torch.optim.SGD(agent.q_network.parameters(), lr=lr)},
                        progress=agent.progress)


def huber(d: float, delta: float = 1.0) -> float:
    return 0.5 * d * d if abs(d) <= delta else delta * (abs(d) - 0.5 * delta)


# ---------------------------------------------------------------- the loss, by hand
#
# hidden_sizes=[] makes the Q-network one Linear layer: Q(s) = W s + b.
#   online: W = [[1, 2], [0.5, -1]], b = [0, 0.5]  ->  Q(s) = [s1 + 2 s2, 0.5 s1 - s2 + 0.5]
#   target: W = [[2, 0], [0, 1]],    b = [0, 0]    ->  Q'(s) = [2 s1, s2]
# gamma = 0.5, Huber delta = 1.
#
# row 0, ordinary:   s=[1,0] a=0 r=0.6 s'=[1,1]
#   Q(s)[0] = 1; Q(s') = [3, 0] -> a*=0; Q'(s') = [2, 1]: double and max both give 2
#   target = 0.6 + 0.5*2 = 1.6; d = 1 - 1.6 = -0.6 -> 0.5*0.36 = 0.18
# row 1, truncated:  s=[0,1] a=1 r=2 s'=[2,-1]
#   Q(s)[1] = -0.5; Q(s') = [0, 2.5] -> a*=1; Q'(s') = [4, -1]
#   double: target = 2 + 0.5*(-1) = 1.5; d = -2   -> 1.5
#   max:    target = 2 + 0.5*4    = 4;   d = -4.5 -> 4.0
#   (if it did not bootstrap: target = 2; d = -2.5 -> 2.0)
# row 2, terminated: s=[1,1] a=0 r=0.5 s'=[3,0]
#   Q(s)[0] = 3; target = 0.5 (no bootstrap); d = 2.5 -> 2.0
#   (if it bootstrapped: Q'(s') = [6, 0]; target = 0.5 + 0.5*6 = 3.5; d = -0.5 -> 0.125)
# loss = mean over rows.

ONLINE_W, ONLINE_B = [[1.0, 2.0], [0.5, -1.0]], [0.0, 0.5]
TARGET_W, TARGET_B = [[2.0, 0.0], [0.0, 1.0]], [0.0, 0.0]
HAND_BATCH = ReplayBatch(
    observations=torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
    actions=torch.tensor([0, 1, 0]),
    rewards=torch.tensor([0.6, 2.0, 0.5]),
    next_observations=torch.tensor([[1.0, 1.0], [2.0, -1.0], [3.0, 0.0]]),
    terminated=torch.tensor([0.0, 0.0, 1.0]),
    truncated=torch.tensor([0.0, 1.0, 0.0]),
)
ROW_LOSSES = {True: [0.18, 1.5, 2.0], False: [0.18, 4.0, 2.0]}  # keyed by double_q


def hand_agent(double_q: bool, loss: str = "huber") -> DQN:
    agent = build(DQNConfig(hidden_sizes=[], gamma=0.5, double_q=double_q, huber_delta=1.0,
                            loss=loss))
    (online,) = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)]
    (target,) = [m for m in agent.target_network.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        online.weight.copy_(torch.tensor(ONLINE_W))
        online.bias.copy_(torch.tensor(ONLINE_B))
        target.weight.copy_(torch.tensor(TARGET_W))
        target.bias.copy_(torch.tensor(TARGET_B))
    return agent


def test_hand_rows_check_out() -> None:
    # The hand arithmetic above, redone from the Huber formula.
    assert [huber(d) for d in (-0.6, -2.0, 2.5)] == pytest.approx(ROW_LOSSES[True])
    assert [huber(d) for d in (-0.6, -4.5, 2.5)] == pytest.approx(ROW_LOSSES[False])


@pytest.mark.parametrize("double_q", [True, False])
def test_loss_on_hand_checked_batch(double_q: bool) -> None:
    agent = hand_agent(double_q)
    optim = sgd(agent, lr=0.1)
    metrics = optim.training_step(agent, HAND_BATCH)
    expected = sum(ROW_LOSSES[double_q]) / 3  # 3.68/3 (double) or 6.18/3 (max)
    assert float(metrics["loss"]) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["q_value"]) == pytest.approx((1.0 - 0.5 + 3.0) / 3, rel=1e-6)
    assert agent.progress.gradient_steps == 1


def test_sgd_step_on_hand_batch_moves_online_weights_by_the_huber_gradient() -> None:
    # dL/dQ(s,a) per row = clip(d, -1, 1) / 3 = [-0.2, -1/3, 1/3]
    # action 0 rows 0 and 2: dW0 = -0.2*[1,0] + 1/3*[1,1] = [2/15, 1/3], db0 = 2/15
    # action 1 row 1:        dW1 = -1/3*[0,1] = [0, -1/3],         db1 = -1/3
    agent = hand_agent(double_q=True)
    sgd_lr = 0.1
    sgd(agent, lr=sgd_lr).training_step(agent, HAND_BATCH)
    grad_w = torch.tensor([[2 / 15, 1 / 3], [0.0, -1 / 3]])
    grad_b = torch.tensor([2 / 15, -1 / 3])
    (online,) = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)]
    (target,) = [m for m in agent.target_network.modules() if isinstance(m, torch.nn.Linear)]
    assert torch.allclose(online.weight, torch.tensor(ONLINE_W) - sgd_lr * grad_w, atol=1e-6)
    assert torch.allclose(online.bias, torch.tensor(ONLINE_B) - sgd_lr * grad_b, atol=1e-6)
    # the target network is left alone (target_update_interval 128)
    assert torch.equal(target.weight, torch.tensor(TARGET_W))
    assert torch.equal(target.bias, torch.tensor(TARGET_B))


def test_the_mse_loss_is_the_mean_squared_td_error_and_its_gradient_unclipped() -> None:
    # CleanRL's dqn.py: the TD errors d = [-0.6, -2, 2.5] (double Q) squared, averaged;
    # dL/dQ(s,a) per row = 2 d / 3 = [-0.4, -4/3, 5/3] (Huber clips the last two to ±1/3).
    agent = hand_agent(double_q=True, loss="mse")
    metrics = sgd(agent, lr=0.1).training_step(agent, HAND_BATCH)
    assert float(metrics["loss"]) == pytest.approx((0.36 + 4.0 + 6.25) / 3, rel=1e-6)
    (online,) = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)]
    grad_b = torch.tensor([-0.4 + 5 / 3, -4 / 3])
    assert torch.allclose(online.bias, torch.tensor(ONLINE_B) - 0.1 * grad_b, atol=1e-6)


def single_row(i: int) -> ReplayBatch:
    return ReplayBatch(*(t[i:i + 1] for t in HAND_BATCH[:6]))


def test_truncated_row_bootstraps_from_next_observation() -> None:
    agent = hand_agent(double_q=True)
    loss = float(sgd(agent).training_step(agent, single_row(1))["loss"])
    assert loss == pytest.approx(1.5, rel=1e-6)  # bootstrapped
    assert loss != pytest.approx(2.0, rel=1e-3)  # what a non-bootstrapped target gives


def test_an_n_step_window_bootstraps_with_its_own_discount() -> None:
    # row 1 as a window whose bootstrap factor is 0.25 (not gamma = 0.5): Q'(s')[a*] = -1, so
    # target = 2.0 + 0.25 * -1 = 1.75; Q(s)[1] = -0.5; d = -2.25 -> 1.75
    agent = hand_agent(double_q=True)
    row = single_row(1)._replace(discounts=torch.tensor([0.25]))
    assert float(sgd(agent).training_step(agent, row)["loss"]) == pytest.approx(1.75, rel=1e-6)


def test_a_prioritized_batch_weights_each_row_and_sends_back_its_td_errors() -> None:
    sampler = Prioritized(3, PriorityConfig(alpha=1.0, epsilon=1e-6))
    batch = HAND_BATCH._replace(weights=torch.tensor([1.0, 0.5, 0.25]),
                                priorities=PriorityFeedback(sampler, np.arange(3)))
    agent = hand_agent(double_q=True)
    loss = float(sgd(agent).training_step(agent, batch)["loss"])
    assert loss == pytest.approx((0.18 * 1 + 1.5 * 0.5 + 2.0 * 0.25) / 3, rel=1e-6)
    # |d| per row (-0.6, -2.0, 2.5) + epsilon, to the power alpha = 1
    np.testing.assert_allclose(sampler.tree.values(), [0.6, 2.0, 2.5], rtol=1e-5)


def test_terminated_row_does_not_bootstrap() -> None:
    agent = hand_agent(double_q=True)
    loss = float(sgd(agent).training_step(agent, single_row(2))["loss"])
    assert loss == pytest.approx(2.0, rel=1e-6)  # target = reward
    assert loss != pytest.approx(0.125, rel=1e-3)  # what bootstrapping would give


# ---------------------------------------------------------------- epsilon schedule

@pytest.mark.parametrize(("env_steps", "epsilon"), [
    (0, 1.0), (25, 0.775), (50, 0.55), (99, 0.109), (100, 0.1), (101, 0.1), (10_000, 0.1),
])
def test_epsilon_is_linear_over_exploration_steps_then_flat(env_steps: int,
                                                             epsilon: float) -> None:
    progress = Progress()
    agent = build(DQNConfig(hidden_sizes=[4], epsilon_start=1.0, epsilon_end=0.1,
                            exploration_steps=100), progress=progress)
    progress.env_steps = env_steps
    assert agent.epsilon == pytest.approx(epsilon, abs=1e-12)
    metrics = sgd(agent).training_step(agent, HAND_BATCH)
    assert metrics["epsilon"] == pytest.approx(epsilon, abs=1e-12)


def test_epsilon_follows_the_live_progress_counter() -> None:
    progress = Progress()
    agent = build(DQNConfig(hidden_sizes=[4], epsilon_start=0.5, epsilon_end=0.0,
                            exploration_steps=10), progress=progress)
    seen = []
    for steps in (0, 4, 10, 20):
        progress.env_steps = steps
        seen.append(agent.epsilon)
    assert seen == pytest.approx([0.5, 0.3, 0.0, 0.0])


def test_zero_exploration_steps_gives_epsilon_end_from_the_start() -> None:
    agent = build(DQNConfig(hidden_sizes=[4], epsilon_start=1.0, epsilon_end=0.2,
                            exploration_steps=0))
    assert agent.epsilon == 0.2


# ---------------------------------------------------------------- target updates

def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def random_batch(generator: torch.Generator, n: int = 8) -> ReplayBatch:
    return ReplayBatch(
        observations=torch.randn(n, 2, generator=generator),
        actions=torch.randint(2, (n,), generator=generator),
        rewards=torch.randn(n, generator=generator),
        next_observations=torch.randn(n, 2, generator=generator),
        terminated=torch.zeros(n),
        truncated=torch.zeros(n),
    )


def test_hard_target_update_exactly_every_interval_gradient_steps() -> None:
    torch.manual_seed(0)
    agent = build(DQNConfig(hidden_sizes=[8], target_update_interval=3, tau=1.0))
    optim = sgd(agent, lr=0.05)
    generator = torch.Generator().manual_seed(1)
    last_target = params(agent.target_network)
    updated_at = []
    for step in range(1, 10):
        optim.training_step(agent, random_batch(generator))
        target, online = params(agent.target_network), params(agent.q_network)
        if same(target, online):
            updated_at.append(step)
        else:
            assert same(target, last_target), f"target moved without an update at step {step}"
        assert not same(online, last_target)  # the online network keeps learning
        last_target = target
    assert updated_at == [3, 6, 9]


def test_soft_target_update_moves_target_by_tau() -> None:
    torch.manual_seed(0)
    tau = 0.25
    agent = build(DQNConfig(hidden_sizes=[8], target_update_interval=1, tau=tau))
    generator = torch.Generator().manual_seed(1)
    # start the target away from the online network
    with torch.no_grad():
        for p in agent.target_network.parameters():
            p.add_(1.0)
    before = params(agent.target_network)
    sgd(agent, lr=0.05).training_step(agent, random_batch(generator))
    online = params(agent.q_network)
    after = params(agent.target_network)
    for b, o, a in zip(before, online, after, strict=True):
        assert torch.allclose(a, b + tau * (o - b), atol=1e-6)
        assert not torch.allclose(a, o)


def test_target_network_has_no_gradients() -> None:
    agent = build(DQNConfig(hidden_sizes=[8]))
    assert all(not p.requires_grad for p in agent.target_network.parameters())
    assert all(p.requires_grad for p in agent.q_network.parameters())


# ---------------------------------------------------------------- dueling head

def test_dueling_head_equals_value_plus_centred_advantage() -> None:
    torch.manual_seed(0)
    agent = build(DQNConfig(hidden_sizes=[16, 8], dueling=True), obs_dim=3, num_actions=4)
    net = agent.q_network
    obs = torch.randn(5, 3)
    q = net(obs)
    features = net.torso(obs)
    value = net.value(features)
    advantage = net.advantage(features)
    assert q.shape == (5, 4)
    assert torch.allclose(q, value + advantage - advantage.mean(dim=1, keepdim=True), atol=1e-6)
    assert torch.allclose(q.mean(dim=1, keepdim=True), value, atol=1e-6)
    assert value.shape == (5, 1) and advantage.shape == (5, 4)


@pytest.mark.parametrize("dueling", [False, True])
def test_q_network_equals_its_parts_called_as_modules_and_runs_its_own_hooks(
        dueling: bool) -> None:
    """The Q-network calls its parts' forward directly; the result is the modules' own, and a
    hook registered on the Q-network runs (one on a part does not: documented)."""
    torch.manual_seed(0)
    net = build(DQNConfig(hidden_sizes=[16, 8], dueling=dueling), obs_dim=3,
                num_actions=4).q_network
    obs = torch.randn(5, 3)
    seen: list[torch.Tensor] = []
    net.register_forward_hook(lambda module, args, out: seen.append(out))
    q = net(obs)
    if dueling:
        features = net.torso(net.encoder(obs))
        advantage = net.advantage(features)
        expected = net.value(features) + advantage - advantage.mean(dim=1, keepdim=True)
    else:
        expected = net.q(net.encoder(obs))
    assert torch.equal(q, expected)
    assert len(seen) == 1 and seen[0] is q


def test_dueling_without_hidden_layers_is_rejected() -> None:
    with pytest.raises(ValueError, match="hidden layer"):
        build(DQNConfig(hidden_sizes=[], dueling=True))


# ---------------------------------------------------------------- policies

def test_greedy_policy_is_deterministic_argmax_q() -> None:
    torch.manual_seed(0)
    agent = build(DQNConfig(hidden_sizes=[16]), obs_dim=3, num_actions=5)
    policy = agent.policy(CPU)
    obs = torch.randn(64, 3)
    a1 = policy.act(obs, None, True).action
    a2 = policy.act(obs, None, True).action
    assert torch.equal(a1, a2)
    assert torch.equal(a1, agent.q_network(obs).argmax(dim=1))
    assert len(set(a1.tolist())) > 1  # a real argmax, not a constant


def test_exploring_policy_with_epsilon_zero_equals_greedy() -> None:
    torch.manual_seed(0)
    agent = build(DQNConfig(hidden_sizes=[16], epsilon_start=0.0, epsilon_end=0.0),
                  obs_dim=3, num_actions=5)
    policy = agent.policy(CPU)
    obs = torch.randn(64, 3)
    for _ in range(5):
        assert torch.equal(policy.act(obs, None, False).action,
                           policy.act(obs, None, True).action)


def test_exploring_policy_with_epsilon_one_is_uniform() -> None:
    torch.manual_seed(0)
    random.seed(0)  # the exploration coins and random actions come from Python's random
    num_actions, n = 4, 4_000
    agent = build(DQNConfig(hidden_sizes=[16], epsilon_start=1.0, epsilon_end=1.0),
                  obs_dim=3, num_actions=num_actions)
    policy = agent.policy(CPU)
    obs = torch.randn(1, 3).expand(n, 3)  # one state: greedy would pick one action
    greedy = policy.act(obs, None, True).action
    assert len(set(greedy.tolist())) == 1
    actions = policy.act(obs, None, False).action
    counts = torch.bincount(actions, minlength=num_actions)
    assert counts.shape == (num_actions,)
    # each count ~ Binomial(4000, 1/4): mean 1000, sd ~27
    assert ((counts > 850) & (counts < 1150)).all(), counts.tolist()


def test_exploring_policy_mixes_greedy_and_random_at_intermediate_epsilon() -> None:
    torch.manual_seed(0)
    random.seed(0)  # the exploration coins and random actions come from Python's random
    num_actions, n = 4, 4_000
    agent = build(DQNConfig(hidden_sizes=[16], epsilon_start=0.4, epsilon_end=0.4),
                  obs_dim=3, num_actions=num_actions)
    policy = agent.policy(CPU)
    obs = torch.randn(1, 3).expand(n, 3)
    greedy = int(policy.act(obs[:1], None, True).action)
    actions = policy.act(obs, None, False).action
    # greedy with prob 0.6 + 0.4/4 = 0.7
    frac = float((actions == greedy).float().mean())
    assert 0.65 < frac < 0.75


# ---------------------------------------------------------------- spaces

def test_continuous_actions_raise_space_error_naming_discrete_and_sac() -> None:
    env = gym.make("Pendulum-v1")
    try:
        with pytest.raises(SpaceError, match="Discrete") as info:
            DQN().check_spaces(env.observation_space, env.action_space)
    finally:
        env.close()
    assert "SAC" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_observations_no_encoder_takes_raise_space_error_naming_the_wrapper() -> None:
    DQN().check_spaces(gym.spaces.Discrete(16), gym.spaces.Discrete(4))  # taken: one-hot
    with pytest.raises(SpaceError, match=r"Box, Discrete, .* observations.*FlattenObservation"):
        DQN().check_spaces(gym.spaces.Text(5), gym.spaces.Discrete(4))


def test_built_agent_rejects_other_sized_spaces() -> None:
    agent = build(DQNConfig(hidden_sizes=[4]), obs_dim=2, num_actions=2)
    with pytest.raises(SpaceError, match=r"built for Box\(-inf, inf, \(2,\), float32\) "
                                         r"observations and 2 actions"):
        agent.check_spaces(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(SpaceError):
        agent.check_spaces(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3))
    agent.check_spaces(gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))


def test_fit_on_continuous_actions_fails_before_writing_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a default run dir would appear here as runs/
    run_dir = tmp_path / "run"
    agent = DQN()
    with pytest.raises(SpaceError, match="Discrete"):
        Trainer(num_steps=100, run_dir=run_dir).fit("Pendulum-v1", agent)
    assert not run_dir.exists()
    assert list(tmp_path.iterdir()) == []
    assert not agent.built


# ---------------------------------------------------------------- config

@pytest.mark.parametrize(("kwargs", "field"), [
    ({"lr": 0.0}, "lr"),
    ({"lr": -1e-3}, "lr"),
    ({"gamma": 1.01}, "gamma"),
    ({"gamma": -0.1}, "gamma"),
    ({"tau": 0.0}, "tau"),
    ({"tau": 1.5}, "tau"),
    ({"target_update_interval": 0}, "target_update_interval"),
    ({"epsilon_end": 1.5}, "epsilon_end"),
    ({"exploration_steps": -1}, "exploration_steps"),
    ({"hidden_sizes": [8, 0]}, "hidden_sizes"),
    ({"loss": "l1"}, "loss"),
])
def test_config_rejects_bad_values_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        DQNConfig(**kwargs)


def test_config_accepts_boundary_values() -> None:
    config = DQNConfig(gamma=1.0, tau=1.0, epsilon_start=0.0, epsilon_end=1.0,
                       exploration_steps=0, hidden_sizes=[])
    assert config.gamma == 1.0


def test_default_optimizer_is_adam_with_configured_lr() -> None:
    agent = build(DQNConfig(hidden_sizes=[4], lr=1e-3))
    optimizers = agent.configure_optimizers()
    assert list(optimizers) == ["q"]
    assert isinstance(optimizers["q"], torch.optim.Adam)
    assert optimizers["q"].param_groups[0]["lr"] == 1e-3
    # the target network is not optimized
    optimized = {id(p) for g in optimizers["q"].param_groups for p in g["params"]}
    assert optimized == {id(p) for p in agent.q_network.parameters()}


def test_policy_on_the_agents_device_shares_the_online_network() -> None:
    agent = build(DQNConfig(hidden_sizes=[4]))
    policy = agent.policy(CPU)
    assert policy.q_network is agent.q_network


def test_exploration_is_reproducible_from_pythons_random_seed() -> None:
    torch.manual_seed(0)
    agent = build(DQNConfig(hidden_sizes=[16], epsilon_start=0.5, epsilon_end=0.5),
                  obs_dim=3, num_actions=4)
    policy = agent.policy(CPU)
    obs = torch.randn(256, 3)
    runs = []
    for seed in (3, 3, 4):
        random.seed(seed)
        runs.append(torch.cat([policy.act(obs, None, False).action for _ in range(3)]))
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])

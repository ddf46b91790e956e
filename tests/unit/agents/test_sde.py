"""gSDE (generalized state-dependent exploration) in PPO and SAC: the distribution's variance
from the features, noise that is a fixed linear function of the features between draws, draws
every ``sde_sample_freq`` env steps and at each rollout's start, refusals, and exact resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from rltrain import (
    PPO,
    SAC,
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    Trainer,
)
from rltrain.agents.base import SpaceError
from rltrain.agents.nn.sde import VARIANCE_FLOOR, StateDependentNoise, StateDependentSquashedActor
from rltrain.buffers import ReplayBatch
from rltrain.checkpoint import read_checkpoint
from rltrain.optim import Optimization
from rltrain.types import Progress

PENDULUM = "Pendulum-v1"


def test_the_log_probability_is_the_gaussian_of_gsdes_variance() -> None:
    torch.manual_seed(0)
    sde = StateDependentNoise(latent_dim=4, action_dim=2, log_std_init=-1.0)
    with torch.no_grad():
        sde.log_std.copy_(torch.randn(4, 2) * 0.3 - 1.0)
    mean, latent = torch.randn(8, 2), torch.randn(8, 4)
    dist = sde.distribution(mean, latent)
    sigma = sde.log_std.exp()
    # Var[a_k | s] = Σ_j z_j² σ_jk², the variance of z θ with θ_jk ~ N(0, σ_jk²)
    std = (latent.square() @ sigma.square() + VARIANCE_FLOOR).sqrt()
    actions = torch.randn(8, 2)
    torch.testing.assert_close(dist.log_prob(actions),
                               Normal(mean, std).log_prob(actions).sum(-1))
    torch.testing.assert_close(dist.entropy(), Normal(mean, std).entropy().sum(-1))
    dist.log_prob(actions).sum().backward()
    assert sde.log_std.grad is not None and sde.log_std.grad.abs().sum() > 0


def test_the_noise_is_the_features_times_one_matrix_per_env_until_the_next_draw() -> None:
    torch.manual_seed(1)
    sde = StateDependentNoise(3, 2, log_std_init=0.0, sample_freq=4)
    latent = torch.randn(5, 3)  # 5 sub-envs
    first = sde.noise(latent)
    matrices = sde.matrices.clone()
    assert matrices.shape == (5, 3, 2)
    torch.testing.assert_close(first, torch.einsum("el,ela->ea", latent, matrices))
    for _ in range(3):  # env steps 2-4 keep the matrices: the same features, the same noise
        torch.testing.assert_close(sde.noise(latent), first)
    assert not torch.equal(sde.noise(latent), first)  # step 5: drawn again (every 4)
    before = sde.matrices.clone()
    sde.new_rollout()  # a rollout's start draws at the next step whatever the count
    sde.noise(latent)
    assert sde.matrices.shape == before.shape and not torch.equal(sde.matrices, before)


def test_without_a_sample_freq_only_a_new_rollout_draws() -> None:
    torch.manual_seed(2)
    sde = StateDependentNoise(3, 1, log_std_init=0.0, sample_freq=-1)
    latent = torch.randn(2, 3)
    first = sde.noise(latent)
    for _ in range(50):
        torch.testing.assert_close(sde.noise(latent), first)
    sde.new_rollout()
    assert not torch.equal(sde.noise(latent), first)


def test_the_spread_of_the_noise_matches_the_distributions_std() -> None:
    torch.manual_seed(3)
    sde = StateDependentNoise(4, 1, log_std_init=-0.5, sample_freq=1)
    latent = torch.randn(1, 4).expand(20_000, 4).contiguous()
    with torch.no_grad():
        samples = sde.noise(latent)  # 20,000 envs with the same features: 20,000 draws of θ
    std = sde.distribution(torch.zeros(1, 1), latent[:1]).dist.stddev.detach()
    assert float(samples.std()) == pytest.approx(float(std), rel=0.03)


def built(**config: Any) -> PPO:
    agent = PPO(PPOConfig(**config))
    env = gym.make(PENDULUM)
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    return agent


def test_ppo_with_gsde_has_no_state_independent_log_std_and_learns_sdes() -> None:
    agent = built(use_sde=True, hidden_sizes=[16, 8], log_std_init=-2.0)
    assert agent.net.sde is not None and agent.net.sde.log_std.shape == (8, 1)
    assert not hasattr(agent.net.head, "log_std")
    assert float(agent.net.sde.log_std.detach().mean()) == -2.0
    names = {name for name, _ in agent.named_parameters()}
    assert "net.sde.log_std" in names


def test_gsde_is_refused_for_discrete_actions_and_a_zero_sample_freq() -> None:
    with pytest.raises(SpaceError, match=r"gSDE.*1-D Box.*use_sde=false"):
        PPO(PPOConfig(use_sde=True)).check_spaces(gym.spaces.Box(-1, 1, (4,)),
                                                  gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="sde_sample_freq must be >= 1 env step, or -1"):
        PPOConfig(use_sde=True, sde_sample_freq=0)


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=2, n_steps=32, batch_size=32,
                                               update_epochs=2, seed=7))
    agent = PPO(PPOConfig(use_sde=True, sde_sample_freq=4, hidden_sizes=[16],
                          log_std_init=-1.0, normalize_observations=True))
    Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir, eval_interval=None,
            **QUIET).fit(PENDULUM, agent, ckpt_path=ckpt_path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return straight_and_resumed(fit, tmp_path_factory, 420)  # 210: mid-rollout


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "progress"])
def test_a_gsde_run_stopped_mid_rollout_resumes_bit_for_bit(runs: tuple[Path, Path],
                                                            part: str) -> None:
    straight, split = runs
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    half = read_checkpoint(split / "checkpoints" / "checkpoint-210.pt")
    assert half["agent"]["net.sde.matrices"].shape == (2, 16, 1)  # saved mid-rollout
    if part == "runner":
        assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    assert_same_tensors(a[part], b[part], part)


# ------------------------------------------------------------------ SAC


def sac(**config: Any) -> SAC:
    agent = SAC(SACConfig(use_sde=True, **config))
    env = gym.make(PENDULUM)
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    return agent


def test_sacs_gsde_actor_is_the_squashed_gaussian_of_gsdes_std_at_the_matrixs_draw() -> None:
    torch.manual_seed(5)
    agent = sac(hidden_sizes=[16, 8], log_std_init=-1.0)
    actor = agent.actor
    assert isinstance(actor, StateDependentSquashedActor)
    obs = torch.randn(64, 3) * 3
    theta = actor.sde.weights()
    action, log_prob = actor(obs, matrix=theta)
    mean, latent = actor.features(obs)
    assert (mean.abs() <= 2).all()  # SB3's clip_mean
    u = mean + latent @ theta
    torch.testing.assert_close(action, torch.tanh(u) * actor.scale + actor.bias)
    reference = TransformedDistribution(
        Independent(Normal(mean, actor.sde.std(latent)), 1),
        [TanhTransform(), AffineTransform(actor.bias, actor.scale)])
    inside = ((action - actor.bias).abs() < actor.scale * (1 - 1e-5)).all(dim=1)
    torch.testing.assert_close(log_prob[inside], reference.log_prob(action)[inside],
                               atol=2e-4, rtol=1e-4)
    (-log_prob.mean()).backward()  # θ is reparameterised: log σ learns through the draw too
    assert actor.sde.log_std.grad is not None and actor.sde.log_std.grad.abs().sum() > 0


def test_expln_and_a_shared_std_give_sb3s_sigma() -> None:
    sde = StateDependentNoise(latent_dim=3, action_dim=2, log_std_init=0.0, expln=True)
    with torch.no_grad():
        sde.log_std.copy_(torch.tensor([[-1.0, 0.0], [0.5, 2.0], [-3.0, 1.0]]))
    # SB3's expln: exp(x) for x <= 0, log1p(x + 1e-6) + 1 above: linear growth, not exp
    expected = torch.tensor([[math.exp(-1.0), 1.0], [math.log1p(0.5 + 1e-6) + 1,
                                                     math.log1p(2.0 + 1e-6) + 1],
                             [math.exp(-3.0), math.log1p(1.0 + 1e-6) + 1]])
    torch.testing.assert_close(sde.sigma(), expected)
    shared = StateDependentNoise(latent_dim=3, action_dim=2, log_std_init=-1.0, full_std=False)
    assert shared.log_std.shape == (3, 1)  # one σ per feature, shared by the actions
    assert shared.sigma().shape == (3, 2) and (shared.sigma() == math.exp(-1.0)).all()
    shared.weights().sum().backward()
    assert shared.log_std.grad is not None and shared.log_std.grad.shape == (3, 1)


@pytest.mark.parametrize("learn_features", [True, False])
def test_learn_features_lets_the_gradient_reach_the_trunk_through_the_noise(
        learn_features: bool) -> None:
    torch.manual_seed(3)
    agent = sac(hidden_sizes=[16, 8], log_std_init=-1.0, sde_learn_features=learn_features)
    actor = agent.actor
    assert isinstance(actor, StateDependentSquashedActor)
    obs = torch.randn(32, 3)
    _, latent = actor.features(obs)
    # the part of the loss that reads the features only through gSDE: the noise and the std
    (latent @ actor.sde.weights() + actor.sde.std(latent)).sum().backward()
    grad = actor.trunk[0].weight.grad
    reached = grad is not None and bool(grad.abs().sum() > 0)
    assert reached == learn_features


def test_gsde_matches_sb3s_distribution_for_each_setting() -> None:
    sb3 = pytest.importorskip("stable_baselines3.common.distributions")
    torch.manual_seed(4)
    for full_std in (True, False):
        for expln in (True, False):
            ours = StateDependentNoise(5, 2, log_std_init=-0.5, full_std=full_std, expln=expln,
                                       learn_features=True)
            theirs = sb3.StateDependentNoiseDistribution(2, full_std=full_std, use_expln=expln,
                                                         learn_features=True)
            _, log_std = theirs.proba_distribution_net(latent_dim=5, log_std_init=-0.5)
            with torch.no_grad():
                log_std.copy_(torch.randn(log_std.shape) * 1.5)
                ours.log_std.copy_(log_std)
            torch.testing.assert_close(ours.sigma(), theirs.get_std(log_std))
            mean, latent = torch.randn(7, 2), torch.randn(7, 5)
            theirs.proba_distribution(mean, log_std, latent)
            actions = torch.randn(7, 2)
            torch.testing.assert_close(ours.distribution(mean, latent).log_prob(actions),
                                       theirs.log_prob(actions))


def test_sac_draws_new_acting_matrices_after_each_round_of_gradient_steps() -> None:
    agent = sac(hidden_sizes=[8])
    actor = agent.actor
    assert isinstance(actor, StateDependentSquashedActor)
    policy, obs = agent.policy(torch.device("cpu")), torch.randn(2, 3)
    with torch.inference_mode():
        first = policy.act(obs, None, False).action
        assert torch.equal(policy.act(obs, None, False).action, first)  # same θ, same s
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    batch = ReplayBatch(torch.randn(8, 3), torch.zeros(8, 1), torch.randn(8),
                        torch.randn(8, 3), torch.zeros(8), torch.zeros(8))
    optim.training_step(agent, batch)
    with torch.inference_mode():
        assert not torch.equal(policy.act(obs, None, False).action, first)
        assert torch.equal(policy.act(obs, None, True).action, actor.mode(obs))


def sac_fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
    strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=32, warmup_steps=50,
                                                 train_interval=4, train_steps=4,
                                                 buffer_size=2_000, seed=3))
    Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir, eval_interval=None,
            **QUIET).fit(PENDULUM, SAC(SACConfig(use_sde=True, sde_sample_freq=3,
                                                 hidden_sizes=[16])), ckpt_path=ckpt_path)


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return straight_and_resumed(sac_fit, tmp_path_factory, 302)  # 151: between rounds


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "progress"])
def test_a_sac_gsde_run_stopped_and_resumed_equals_the_straight_run_bit_for_bit(
        sac_runs: tuple[Path, Path], part: str) -> None:
    straight, split = sac_runs
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["agent"]["actor.sde.matrices"].shape == (1, 16, 1)
    if part == "runner":
        assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    assert_same_tensors(a[part], b[part], part)

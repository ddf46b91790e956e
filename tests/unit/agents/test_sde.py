"""gSDE (generalized state-dependent exploration) in PPO: the distribution's variance from the
features, noise that is a fixed linear function of the features between draws, draws every
``sde_sample_freq`` env steps and at each rollout's start, refusals, and exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, straight_and_resumed
from torch.distributions import Normal

from rltrain import PPO, OnPolicyConfig, OnPolicyStrategy, PPOConfig, Trainer
from rltrain.agents.base import SpaceError
from rltrain.agents.nn.sde import VARIANCE_FLOOR, StateDependentNoise
from rltrain.checkpoint import Checkpointer
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
    assert float(agent.net.sde.log_std.mean()) == -2.0
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
    a = Checkpointer.load(straight / "checkpoints" / "last.pt")
    b = Checkpointer.load(split / "checkpoints" / "last.pt")
    half = Checkpointer.load(split / "checkpoints" / "checkpoint-210.pt")
    assert half["agent"]["net.sde.matrices"].shape == (2, 16, 1)  # saved mid-rollout
    if part == "runner":
        assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    assert_same_tensors(a[part], b[part], part)

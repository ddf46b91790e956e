"""Dreamer: λ-returns, imagination, the world-model loss on Pendulum data, the round trip through
checkpoints, exact resume, and discrete actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from conftest import QUIET, assert_same_tensors, straight_and_resumed

from rltrain import OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.agents.dreamer.behavior import imagine
from rltrain.agents.dreamer.world_model import State
from rltrain.agents.returns import lambda_returns
from rltrain.buffers import SequenceReplayBuffer
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.optim import Optimization
from rltrain.types import Progress

PENDULUM = "Pendulum-v1"


def tiny(**overrides: Any) -> DreamerConfig:
    settings: dict[str, Any] = dict(deter_size=32, stoch_size=8, hidden_size=32,
                                    sequence_length=10, horizon=5)
    settings.update(overrides)
    return DreamerConfig(**settings)


def built(config: DreamerConfig | None = None, env: str = PENDULUM) -> Dreamer:
    agent = Dreamer(config or tiny())
    probe = gym.make(env)
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=torch.device("cpu"), progress=Progress())
    probe.close()
    return agent


def test_lambda_returns_match_a_hand_computation() -> None:
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[10.0], [20.0], [30.0]])  # v(s_0), v(s_1), v(s_2)
    discounts = torch.tensor([[0.9], [0.5], [1.0]])
    bootstrap = torch.tensor([40.0])  # v(s_3)
    next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)])  # v(s_1), v(s_2), v(s_3)
    lam = 0.8
    r2 = 3.0 + 1.0 * ((1 - lam) * 40.0 + lam * 40.0)  # R_3 = v(s_3)
    r1 = 2.0 + 0.5 * ((1 - lam) * 30.0 + lam * r2)
    r0 = 1.0 + 0.9 * ((1 - lam) * 20.0 + lam * r1)
    returns = lambda_returns(rewards, next_values, discounts, lam)
    assert returns.squeeze(1).tolist() == pytest.approx([r0, r1, r2])
    # λ = 0: one-step TD targets; λ = 1: discounted Monte Carlo with the bootstrap
    td = lambda_returns(rewards, next_values, discounts, 0.0).squeeze(1)
    assert td.tolist() == pytest.approx([1 + 0.9 * 20, 2 + 0.5 * 30, 3 + 1.0 * 40])
    mc = lambda_returns(rewards, next_values, discounts, 1.0).squeeze(1)
    assert mc[0].item() == pytest.approx(1 + 0.9 * (2 + 0.5 * (3 + 40)))


def test_imagined_rollouts_have_the_right_shapes_and_gradients_only_where_they_should() -> None:
    agent = built()
    n, horizon = 6, 5
    start = State(*(torch.randn(n, size) for size in (32, 8, 8)),
                  torch.ones(n, 8))
    rollout = imagine(agent.world_model.rssm, agent.actor, start, horizon)
    assert rollout.features.shape == rollout.next_features.shape == (horizon, n, 32 + 8)
    torch.testing.assert_close(rollout.features[0], start.features())
    torch.testing.assert_close(rollout.features[1:], rollout.next_features[:-1])
    assert not rollout.features.requires_grad  # what the actor and the critic read
    assert rollout.actions.shape == (horizon, n, 1)
    assert rollout.log_probs.shape == rollout.entropies.shape == (horizon, n)
    assert rollout.actions.abs().max() <= 1.0  # tanh-squashed
    # the actor reads detached features: its log-probabilities (REINFORCE) and entropies do
    # not reach back into the world model
    world = list(agent.world_model.parameters())
    assert all(g is None for g in torch.autograd.grad(
        rollout.log_probs.sum(), world, retain_graph=True, allow_unused=True))
    # the return reaches the actor through the dynamics (continuous actions) ...
    value = agent.world_model.reward_head(rollout.next_features).sum()
    grads = torch.autograd.grad(value, list(agent.actor.parameters()), retain_graph=True,
                                allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    # ... but an actor step leaves the world model's and the critic's gradients alone
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    optim.step("actor", -value)
    assert all(p.grad is None for p in agent.world_model.parameters())
    assert all(p.grad is None for p in agent.critic.parameters())


def test_observe_computes_what_stepping_obs_step_computes() -> None:
    # observe() takes out of its loop what does not depend on the recurrence (the masks, the
    # noise, the action's and the embedding's parts of the first layers, the prior); stepping
    # obs_step() along the sequence from the same seed gives the same states to float
    # round-off (the draws coincide: each step's 4 x 8 are a multiple of 16, as in one draw).
    agent = built()
    rssm = agent.world_model.rssm
    batch, length = 4, 6
    embeds, actions = torch.randn(batch, length, 32), torch.randn(batch, length, 1)
    is_first = torch.zeros(batch, length)
    is_first[:, 0] = is_first[1, 3] = 1.0  # a new episode inside one of the sequences
    torch.manual_seed(1)
    priors, posteriors = rssm.observe(embeds, actions, is_first)
    torch.manual_seed(1)
    state = rssm.initial(batch, torch.device("cpu"))
    for t in range(length):
        prior, state = rssm.obs_step(state, actions[:, t], embeds[:, t], is_first[:, t])
        for name, stepped, observed, expected in [
                *zip(State._fields, ("prior",) * 4, priors, prior, strict=True),
                *zip(State._fields, ("posterior",) * 4, posteriors, state, strict=True)]:
            torch.testing.assert_close(observed[:, t], expected, msg=f"{stepped} {name} at {t}")


def test_actor_rsample_is_its_distributions_rsample_and_log_prob() -> None:
    # Actor.rsample writes out the squashed Gaussian's sample and log π(a) for imagination;
    # from the same seed it gives what the distribution gives, gradients included.
    agent = built()
    features = torch.randn(64, 32 + 8)
    params = list(agent.actor.parameters())
    torch.manual_seed(2)
    action, log_prob = agent.actor.rsample(features)
    grads = torch.autograd.grad((action.sum() + log_prob.sum()), params)
    torch.manual_seed(2)
    policy = agent.actor(features)
    expected = policy.rsample()
    expected_log_prob = policy.log_prob(expected)
    expected_grads = torch.autograd.grad((expected.sum() + expected_log_prob.sum()), params)
    torch.testing.assert_close(action, expected)
    torch.testing.assert_close(log_prob, expected_log_prob)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("target", [-8.0, -800.0])
def test_the_critic_learns_large_returns_as_fast_as_small_ones(target: float) -> None:
    # Pendulum's values are in the hundreds; in symlog space the critic reaches them in as few
    # steps as values near one (a raw squared error at this learning rate would not).
    torch.manual_seed(0)
    agent = built()
    features = torch.randn(64, 32 + 8)
    returns, weights = torch.full((64,), target), torch.ones(64)
    optimizer = torch.optim.Adam(agent.critic.parameters(), lr=3e-4)
    for _ in range(300):
        optimizer.zero_grad()
        agent.critic_loss(features, returns, weights).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    values = Dreamer.value(agent.critic, features)
    assert values.mean().item() == pytest.approx(target, rel=0.1)


def pendulum_buffer(steps: int, length: int) -> SequenceReplayBuffer:
    envs = make_vector_env(PENDULUM, num_envs=2, seed=0)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    runner.reset(seed=0)
    buffer = SequenceReplayBuffer(2 * steps, num_envs=2,
                                  observation_space=envs.single_observation_space,
                                  action_space=envs.single_action_space,
                                  sequence_length=length, seed=0)
    try:
        for _ in range(steps // 2):
            buffer.add(runner.step(runner.random_actions())[0])
    finally:
        envs.close()
    return buffer


@pytest.mark.slow  # a short learning check (4 s): with the full suite
def test_the_world_model_loss_falls_on_pendulum_data_within_a_few_hundred_steps() -> None:
    torch.manual_seed(0)
    agent = built(tiny(sequence_length=16))
    buffer = pendulum_buffer(2_000, 16)
    optimizer = torch.optim.Adam(agent.world_model.parameters(), lr=3e-3)
    losses = []
    for _ in range(200):
        batch = buffer.sample(16)
        parts, _ = agent.world_model.loss(batch.observations,
                                          agent.from_env_action(batch.actions), batch.rewards,
                                          batch.is_first, batch.is_terminal, free_nats=1.0,
                                          kl_balance=0.8)
        optimizer.zero_grad()
        parts.total.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append((float(parts.reconstruction.detach()), float(parts.reward.detach())))
    first, last = losses[:20], losses[-20:]
    for part in (0, 1):  # reconstruction and reward both fall by more than half
        assert sum(x[part] for x in last) < 0.5 * sum(x[part] for x in first)


def strategy(seed: int = 0) -> OffPolicyStrategy:
    return OffPolicyStrategy(OffPolicyConfig(num_envs=2, buffer_size=4_000, batch_size=4,
                                             warmup_steps=200, train_interval=100,
                                             train_steps=3, seed=seed))


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None, *, env: str = PENDULUM,
        **settings: Any) -> tuple[Trainer, Dreamer]:
    trainer = Trainer(num_steps=num_steps, strategy=strategy(), run_dir=run_dir,
                      **{"eval_interval": None, **QUIET, **settings})
    agent = Dreamer(tiny())
    trainer.fit(env, agent, ckpt_path=ckpt_path)
    return trainer, agent


def test_fit_reports_every_loss_part_and_the_imagined_return(tmp_path: Path) -> None:
    fit(tmp_path, 600)
    summary = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert summary["progress"]["gradient_steps"] == 3 * 5  # rounds at 200, 300, ..., 600
    final = (tmp_path / "summary.json").read_text()
    for name in ("world_model/reconstruction", "world_model/reward", "world_model/continue",
                 "world_model/kl", "actor/loss", "actor/entropy", "critic/loss",
                 "imagined_return"):
        assert f'"train/{name}"' in final, name
    optimizers = summary["optimization"]["optimizers"]
    assert list(optimizers) == ["world_model", "actor", "critic"]
    assert summary["buffer"]["observations"].shape == (2, 2_000, 3)


def test_fit_save_load_evaluate_round_trip(tmp_path: Path) -> None:
    trainer, agent = fit(tmp_path, 400, eval_interval=400, eval_episodes=2)
    path = trainer.save_checkpoint(tmp_path / "dreamer.pt")
    loaded = Dreamer(tiny())
    trainer.load_checkpoint(path, agent=loaded, env=PENDULUM)
    for name, value in agent.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    assert trainer.evaluate(PENDULUM, loaded) == trainer.evaluate(PENDULUM, agent)
    best = Checkpointer(tmp_path / "checkpoints").manifest().best
    assert best is not None
    assert trainer.evaluate(PENDULUM, Dreamer(tiny()), ckpt_path="best")[
        "eval/return_mean"] == pytest.approx(best.eval_return)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    straight, split = straight_and_resumed(fit, tmp_path_factory, 600)
    return (read_checkpoint(straight / "checkpoints" / "last.pt"),
            read_checkpoint(split / "checkpoints" / "last.pt"))


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "metrics", "progress"])
def test_dreamer_resumes_bit_for_bit(resumed: tuple[dict[str, Any], dict[str, Any]],
                                     part: str) -> None:
    straight, split = resumed
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == 600
    # the pickled sub-envs are compared attribute by attribute by the DQN resume test
    assert_same_tensors(straight[part], split[part], part, skip={"envs"})


def test_discrete_actions_train_with_reinforce(tmp_path: Path) -> None:
    _, agent = fit(tmp_path, 400, env="CartPole-v1")
    assert agent.discrete and agent.action_size == 2
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert saved["progress"]["gradient_steps"] == 3 * 3
    assert all(torch.isfinite(p).all() for p in agent.parameters())

"""PPO: the clipped objective and its metrics by hand, every action space end to end, the
initialisation and schedules, normalisation statistics that travel with the checkpoints, exact
resume (stopped mid-rollout, mid-update, and fit-then-resume), a learning check on CartPole and
the command line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, env_snapshot, rltrain, straight_and_resumed
from omegaconf import OmegaConf

from rltrain import PPO, OnPolicyConfig, OnPolicyStrategy, PPOConfig, Trainer, build, compose
from rltrain.agents.nn.normalize import RunningMeanStd
from rltrain.agents.ppo import explained_variance
from rltrain.buffers import RolloutBatch, RolloutBuffer
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import EnvSpec, make_vector_env
from rltrain.envs.runner import Runner
from rltrain.observe import EnvStep, EvaluationEnd, EventRecorder, TrainStep
from rltrain.optim import Optimization
from rltrain.types import Progress, Transitions

CARTPOLE = "CartPole-v1"


def ppo(**overrides: Any) -> PPO:
    settings: dict[str, Any] = dict(hidden_sizes=[16])
    settings.update(overrides)
    return PPO(PPOConfig(**settings))


def on_policy(**overrides: Any) -> OnPolicyStrategy:
    """2 envs x 32 steps = 64 transitions a rollout; 2 epochs of 2 minibatches of 32."""
    settings: dict[str, Any] = dict(num_envs=2, n_steps=32, batch_size=32, update_epochs=2)
    settings.update(overrides)
    return OnPolicyStrategy(OnPolicyConfig(**settings))


def fit(run_dir: Path, num_steps: int, agent: PPO | None = None, env: Any = CARTPOLE, *,
        strategy: OnPolicyStrategy | None = None, ckpt_path: str | None = None,
        callbacks: tuple[Any, ...] = (), eval_interval: int | None = None,
        **kwargs: Any) -> tuple[PPO, Trainer, Any]:
    agent = agent if agent is not None else ppo()
    trainer = Trainer(num_steps=num_steps, strategy=strategy or on_policy(), run_dir=run_dir,
                      eval_interval=eval_interval, callbacks=list(callbacks), **QUIET, **kwargs)
    result = trainer.fit(env, agent, ckpt_path=ckpt_path)
    return agent, trainer, result


def built(env: str | gym.Env[Any, Any] = CARTPOLE, **overrides: Any) -> PPO:
    agent = ppo(**overrides)
    probe = gym.make(env) if isinstance(env, str) else env
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=torch.device("cpu"), progress=Progress())
    probe.close()
    return agent


def updates(recorder: EventRecorder) -> list[list[TrainStep]]:
    """The recorded TrainSteps grouped by update (one update per rollout: same env_steps)."""
    groups: dict[int, list[TrainStep]] = {}
    for event in recorder.of(TrainStep):
        groups.setdefault(event.env_steps, []).append(event)
    return list(groups.values())


def metric(event: TrainStep, name: str) -> float:
    return float(event.metrics[name])


# ---------------------------------------------------------------------------------------------
# The objective, by hand
# ---------------------------------------------------------------------------------------------


def hand_batch(agent: PPO, shift: float, advantage: float, *, value_shift: float = 0.0,
               return_shift: float = 0.0) -> RolloutBatch:
    """16 CartPole-like observations whose stored log-probabilities are the current ones minus
    ``shift`` (so the ratio is e^shift everywhere) and stored values the current ones plus
    ``value_shift``; returns are the current values plus ``return_shift``."""
    generator = torch.Generator().manual_seed(0)
    obs = torch.randn(16, 4, generator=generator)
    actions = torch.randint(0, 2, (16,), generator=generator)
    with torch.no_grad():
        dist, values = agent.net(obs)
        log_probs = dist.log_prob(actions)
    return RolloutBatch(obs, actions, log_probs - shift, values + value_shift,
                        torch.full((16,), advantage), values + return_shift)


def policy_parameters(agent: PPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in [*agent.net.actor.parameters(),
                                         *agent.net.policy_out.parameters()]]


def test_a_ratio_clipped_in_the_advantages_direction_gives_no_policy_gradient() -> None:
    # ratio = e^0.5 = 1.6487 > 1 + ε with A = +1: the clipped term -A (1 + ε) = -1.2 is the
    # larger, constant in the parameters: the loss is -1.2 and nothing moves.
    agent = built(normalize_advantage=False, vf_coef=0.0, ent_coef=0.0)
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    before = policy_parameters(agent)
    metrics = agent.training_step(hand_batch(agent, 0.5, 1.0), optim)
    assert float(metrics["policy_loss"]) == pytest.approx(-1.2, abs=1e-6)
    assert float(metrics["ratio"]) == pytest.approx(math.exp(0.5), abs=1e-6)
    assert float(metrics["clip_fraction"]) == 1.0
    # k3: (r - 1) - log r = 0.64872 - 0.5
    assert float(metrics["approx_kl"]) == pytest.approx(math.exp(0.5) - 1 - 0.5, abs=1e-6)
    assert float(metrics["clip_range"]) == pytest.approx(0.2)
    for old, new in zip(before, policy_parameters(agent), strict=True):
        assert torch.equal(old, new)


def test_a_ratio_against_the_advantage_is_not_clipped_and_the_policy_moves() -> None:
    # A = -1, ratio e^0.5: -A r = 1.6487 > -A (1 + ε) = 1.2, the unclipped term counts (the
    # pessimistic bound), and its gradient moves the policy.
    agent = built(normalize_advantage=False, vf_coef=0.0, ent_coef=0.0)
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    before = policy_parameters(agent)
    metrics = agent.training_step(hand_batch(agent, 0.5, -1.0), optim)
    assert float(metrics["policy_loss"]) == pytest.approx(math.exp(0.5), abs=1e-6)
    assert any(not torch.equal(old, new)
               for old, new in zip(before, policy_parameters(agent), strict=True))


def test_inside_the_clip_range_the_loss_is_minus_the_advantage_times_the_ratio() -> None:
    agent = built(normalize_advantage=False, vf_coef=0.0, ent_coef=0.0)
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    metrics = agent.training_step(hand_batch(agent, 0.1, 2.0), optim)
    assert float(metrics["policy_loss"]) == pytest.approx(-2.0 * math.exp(0.1), abs=1e-5)
    assert float(metrics["clip_fraction"]) == 0.0


def test_advantages_are_normalised_per_minibatch() -> None:
    # Constant advantages carry no preference once centred: the loss is 0 (and -A r without
    # normalisation: -2 e^0.1).
    for normalize, expected in ((True, 0.0), (False, -2.0 * math.exp(0.1))):
        agent = built(normalize_advantage=normalize, vf_coef=0.0, ent_coef=0.0)
        optim = Optimization(agent.configure_optimizers(), progress=Progress())
        metrics = agent.training_step(hand_batch(agent, 0.1, 2.0), optim)
        assert float(metrics["policy_loss"]) == pytest.approx(expected, abs=1e-6), normalize


def test_the_entropy_bonus_is_all_that_moves_a_policy_without_advantages() -> None:
    entropies = {}
    for ent_coef in (0.0, 0.5):
        torch.manual_seed(0)
        agent = built(lr=1e-2, ent_coef=ent_coef, vf_coef=0.0, normalize_advantage=False)
        with torch.no_grad():
            agent.net.policy_out.bias.copy_(torch.tensor([0.0, 3.0]))  # a confident policy
        optim = Optimization(agent.configure_optimizers(), progress=Progress())
        before = policy_parameters(agent)
        entropies[ent_coef] = [float(agent.training_step(hand_batch(agent, 0.0, 0.0),
                                                         optim)["entropy"]) for _ in range(5)]
        unchanged = all(torch.equal(a, b)
                        for a, b in zip(before, policy_parameters(agent), strict=True))
        assert unchanged == (ent_coef == 0.0), ent_coef
    assert len(set(entropies[0.0])) == 1
    assert entropies[0.5][-1] > entropies[0.5][0]  # the bonus raises the entropy


@pytest.mark.parametrize("returns, clipped, unclipped", [
    # Stored values V_old = V - 1, so the clipped prediction is V_old + clamp(V - V_old = 1,
    # ±0.1) = V - 0.9. Returns R = V + 1: unclipped (V - R)² = 1; clipped (V - 0.9 - R)² =
    # 1.9² = 3.61, the larger: 3.61.
    (1.0, 3.61, 1.0),
    # R = V + 0.5: unclipped 0.25; clipped 1.4² = 1.96.
    (0.5, 1.96, 0.25),
    # R = V - 1.5: unclipped 2.25; clipped (V - 0.9 - R)² = 0.6² = 0.36, the smaller: 2.25.
    (-1.5, 2.25, 2.25),
])
def test_value_clipping_takes_the_larger_error(returns: float, clipped: float,
                                               unclipped: float) -> None:
    for clip_range_vf, expected in ((0.1, clipped), (None, unclipped)):
        agent = built(clip_range_vf=clip_range_vf, vf_coef=0.0)
        optim = Optimization(agent.configure_optimizers(), progress=Progress())
        batch = hand_batch(agent, 0.0, 1.0, value_shift=-1.0, return_shift=returns)
        metrics = agent.training_step(batch, optim)
        assert float(metrics["value_loss"]) == pytest.approx(expected, abs=1e-5), clip_range_vf


def test_explained_variance_by_hand() -> None:
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(returns, returns) == 1.0
    assert explained_variance(torch.full((4,), 2.5), returns) == pytest.approx(0.0)
    # residuals 0, 0, 0, -1: unbiased variance 0.25; Var[R] = 5/3: 1 - 0.25 * 3/5 = 0.85
    assert explained_variance(torch.tensor([1.0, 2.0, 3.0, 5.0]), returns) == pytest.approx(0.85)
    assert math.isnan(explained_variance(returns, torch.ones(4)))


def test_running_mean_and_variance_merge_batches_exactly() -> None:
    rms = RunningMeanStd((2,), epsilon=0.0)
    rms.update(torch.tensor([[1.0, 10.0], [2.0, 10.0], [3.0, 10.0]]))
    assert rms.mean.tolist() == pytest.approx([2.0, 10.0])
    assert rms.var.tolist() == pytest.approx([2 / 3, 0.0])
    rms.update(torch.tensor([[4.0, 20.0], [5.0, 20.0]]))
    # all five: 1..5 has mean 3 and (population) variance 2; 10,10,10,20,20 mean 14, var 24
    assert rms.mean.tolist() == pytest.approx([3.0, 14.0])
    assert rms.var.tolist() == pytest.approx([2.0, 24.0])
    assert rms.count.item() == 5.0
    assert rms.mean.dtype == torch.float64
    normalized = rms.normalize(torch.tensor([[5.0, 14.0 + 10 * 24 ** 0.5]]), clip=5.0)
    assert normalized.tolist()[0] == pytest.approx([2 / 2 ** 0.5, 5.0])  # the second is clipped
    assert rms.scale(torch.tensor([4.0, -100.0]), clip=10.0).tolist() == pytest.approx(
        [4 / 2 ** 0.5, -10.0])  # scale: divided by the spread, not centred, then clipped


def test_reward_scaling_tracks_the_discounted_return_and_resets_it_at_episode_ends() -> None:
    agent = built(gamma=0.5, normalize_rewards=True)
    rollout = RolloutBuffer(3, num_envs=1, observation_space=gym.spaces.Box(-1, 1, (4,)),
                            action_space=gym.spaces.Discrete(2))
    for t in range(3):
        rollout.add(Transitions(np.zeros((1, 4), np.float32), np.zeros(1, np.int64),
                                np.array([1.0], np.float32), np.zeros((1, 4), np.float32),
                                np.array([t == 1]), np.array([False]),
                                {"log_prob": torch.zeros(1), "value": torch.zeros(1)}))
    agent.prepare_rollout(rollout)
    # running returns: 1, then 0.5 * 1 + 1 = 1.5 (the episode ends: reset), then 1
    assert agent.return_rms is not None
    assert agent.return_rms.count.item() == pytest.approx(3 + 1e-4)
    assert agent.return_rms.mean.item() == pytest.approx((1 + 1.5 + 1) / 3, rel=1e-3)
    assert rollout.running_returns.tolist() == [1.0]  # carried to the next rollout


# ---------------------------------------------------------------------------------------------
# Metrics of real updates
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize, inference_device", [
    (False, None), (True, None),
    # "cpu:0" is not the device "cpu" to the run: the policy acts on a copy of the networks
    # and statistics, synced after each update (the path a GPU learner with a CPU actor takes).
    (True, "cpu:0"),
], ids=["raw", "normalized", "normalized, policy copy"])
def test_every_update_starts_at_ratio_1_and_its_metrics_are_sane(
        tmp_path: Path, normalize: bool, inference_device: str | None) -> None:
    recorder = EventRecorder()
    agent = ppo(normalize_observations=normalize, normalize_rewards=normalize)
    strategy = on_policy(batch_size=16, update_epochs=3)  # 12 gradient steps per rollout
    fit(tmp_path, 640, agent, strategy=strategy, callbacks=(recorder,),
        inference_device=inference_device)
    groups = updates(recorder)
    assert len(groups) == 10 and all(len(group) == 12 for group in groups)
    moved = 0.0
    for group in groups:
        first = group[0]
        # The policy has not changed since it collected the rollout, and the update sees the
        # observations exactly as the policy saw them (normalised with the statistics it used).
        assert abs(metric(first, "ratio") - 1) < 1e-6, first
        assert abs(metric(first, "approx_kl")) < 1e-7, first
        assert metric(first, "clip_fraction") == 0.0
        ev = metric(first, "explained_variance")  # logged once per rollout, with its first step
        assert math.isfinite(ev) and ev <= 1.0
        assert all("explained_variance" not in e.metrics for e in group[1:])
        for event in group:
            assert 0.0 <= metric(event, "clip_fraction") <= 1.0
            assert metric(event, "approx_kl") >= -1e-7  # k3 is never negative
            assert 0.0 <= metric(event, "entropy") <= math.log(2) + 1e-6  # two actions
            moved = max(moved, abs(metric(event, "ratio") - 1))
    assert moved > 1e-4  # later minibatches do see a changed policy: the check above is live
    # A fresh policy head (gain 0.01) is near uniform: entropy ln 2.
    assert metric(groups[0][0], "entropy") == pytest.approx(math.log(2), abs=1e-3)
    if normalize:
        assert agent.obs_rms is not None and agent.obs_rms.count.item() == pytest.approx(
            640 + 1e-4)


def test_anneal_lr_and_clip_range_fall_linearly_per_rollout(tmp_path: Path) -> None:
    recorder = EventRecorder()
    agent = ppo(lr=1e-3, anneal_lr=True, anneal_clip_range=True, clip_range=0.2)
    fit(tmp_path, 640, agent, callbacks=(recorder,))  # 10 rollouts of 64
    groups = updates(recorder)
    assert len(groups) == 10
    for k, group in enumerate(groups):
        remaining = 1 - 64 * k / 640  # the env steps before rollout k, as a fraction
        for event in group:
            assert metric(event, "learning_rate") == pytest.approx(1e-3 * remaining, rel=1e-9)
            assert metric(event, "clip_range") == pytest.approx(0.2 * remaining, rel=1e-6)
    assert metric(groups[-1][-1], "learning_rate") == pytest.approx(1e-4)  # 1e-3 * 64 / 640
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
    # Without annealing the rate stays put.
    recorder = EventRecorder()
    fit(tmp_path / "constant", 256, ppo(lr=1e-3), callbacks=(recorder,))
    assert {metric(e, "learning_rate") for e in recorder.of(TrainStep)} == {1e-3}
    assert all(metric(e, "clip_range") == pytest.approx(0.2) for e in recorder.of(TrainStep))


def test_target_kl_ends_each_update_after_the_first_step_over_it(tmp_path: Path) -> None:
    recorder = EventRecorder()
    strategy = on_policy(batch_size=16, update_epochs=4)  # 16 gradient steps per rollout
    _, _, result = fit(tmp_path, 384, ppo(lr=1e-3, target_kl=1e-7), strategy=strategy,
                       callbacks=(recorder,))
    groups = updates(recorder)
    assert result.summary.env_steps == 384 and len(groups) == 6  # every rollout was learned from
    # The first step of an update has KL 0 (ratio 1), so an update never ends after it.
    assert all(1 < len(group) < 16 for group in groups), [len(g) for g in groups]
    for group in groups:
        kls = [metric(e, "approx_kl") for e in group]
        assert all(kl <= 1.5e-7 for kl in kls[:-1]) and kls[-1] > 1.5e-7, kls
    assert result.summary.gradient_steps == sum(len(group) for group in groups)
    last = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["progress"]["pending_gradient_steps"] == 0
    assert not last["buffer"]["prepared"] and last["buffer"]["pos"] == 0


# ---------------------------------------------------------------------------------------------
# Action spaces
# ---------------------------------------------------------------------------------------------


def test_a_box_policy_sends_clipped_actions_and_the_rollout_keeps_the_sample() -> None:
    torch.manual_seed(0)
    agent = built("Pendulum-v1", log_std_init=1.5)  # std 4.5: most samples outside [-2, 2]
    policy = agent.policy(torch.device("cpu"))
    envs = make_vector_env("Pendulum-v1", num_envs=4, seed=0)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    rollout = RolloutBuffer(8, num_envs=4, observation_space=envs.single_observation_space,
                            action_space=envs.single_action_space)
    sent = []
    try:
        runner.reset(seed=0, policy=policy)
        while not rollout.full:
            obs = torch.as_tensor(runner.observations)
            transitions, _ = runner.step(runner.act(policy), policy)
            sent.append(torch.as_tensor(transitions.actions))
            rollout.add(transitions)
            dist, _ = agent.net(obs)
            raw = transitions.policy_info["raw_action"]
            assert torch.allclose(transitions.policy_info["log_prob"],
                                  dist.log_prob(raw).detach())  # of the sample, not the clip
    finally:
        envs.close()
    sent_actions = torch.stack(sent)
    assert sent_actions.min() >= -2.0 and sent_actions.max() <= 2.0
    assert (rollout.actions.abs() > 2.0).float().mean() > 0.3
    assert torch.equal(sent_actions, rollout.actions.clamp(-2.0, 2.0))


def test_deterministic_actions_are_the_mode() -> None:
    torch.manual_seed(0)
    obs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    agent = built()
    policy = agent.policy(torch.device("cpu"))
    with torch.no_grad():
        logits = agent.net.policy_out(agent.net.actor(obs))
    step = policy.act(obs, None, True)
    assert torch.equal(step.action, logits.argmax(-1)) and step.info == {}
    with torch.no_grad():
        agent.net.policy_out.bias.copy_(torch.tensor([0.0, 3.0]))  # action 1 is the mode
    assert policy.act(obs, None, True).action.tolist() == [1] * 5
    samples = torch.cat([policy.act(obs, None, False).action for _ in range(40)])
    assert 0 in samples.tolist()  # sampling still explores (P(0) = 4.7%: 200 draws)
    # Box: the Gaussian's mean, clipped to the bounds.
    box = built("Pendulum-v1", log_std_init=1.0)
    box_policy = box.policy(torch.device("cpu"))
    pendulum_obs = torch.randn(5, 3)
    with torch.no_grad():
        box.net.policy_out.weight.zero_()
        box.net.policy_out.bias.fill_(-0.5)
    assert box_policy.act(pendulum_obs, None, True).action.tolist() == [[-0.5]] * 5
    with torch.no_grad():
        box.net.policy_out.bias.fill_(5.0)
    assert box_policy.act(pendulum_obs, None, True).action.tolist() == [[2.0]] * 5


class AsCartPole(gym.ActionWrapper[Any, Any, Any]):
    """CartPole driven through another action space: its action picks the push. Refuses an
    action outside its own space (a wrong start offset fails here)."""

    def __init__(self, env: gym.Env[Any, Any], space: gym.Space[Any],
                 to_push: Callable[[Any], int]) -> None:
        super().__init__(env)
        self.action_space = space
        self.to_push = to_push

    def action(self, action: Any) -> int:
        assert self.action_space.contains(action), f"{action!r} is not in {self.action_space}"
        return self.to_push(action)


SPACES: dict[str, tuple[gym.Space[Any], Callable[[Any], int]]] = {
    "MultiBinary(2)": (gym.spaces.MultiBinary(2), lambda a: int(a[0])),
    "MultiDiscrete([2, 3])": (gym.spaces.MultiDiscrete([2, 3]), lambda a: int(a[0])),
    "MultiDiscrete([2, 3], start=[1, -1])": (
        gym.spaces.MultiDiscrete([2, 3], start=[1, -1]), lambda a: int(a[0]) - 1),
    "Discrete(2, start=-1)": (gym.spaces.Discrete(2, start=-1), lambda a: int(a) + 1),
    "Discrete(2, start=3)": (gym.spaces.Discrete(2, start=3), lambda a: int(a) - 3),
}


def wrapped(name: str) -> Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]:
    space, to_push = SPACES[name]
    return lambda env: AsCartPole(env, space, to_push)


@pytest.mark.parametrize("name", list(SPACES))
def test_every_action_space_trains_end_to_end(tmp_path: Path, name: str) -> None:
    space = SPACES[name][0]
    env = EnvSpec(CARTPOLE, wrappers=(wrapped(name),))
    recorder = EventRecorder()
    agent, trainer, result = fit(tmp_path, 256, ppo(), env, callbacks=(recorder,),
                                 eval_interval=1000, eval_episodes=2, checkpoint_interval=120)
    assert result.summary.env_steps == 256
    assert result.summary.gradient_steps == 4 * 4  # 4 rollouts x 2 epochs x 2 minibatches
    assert recorder.of(EvaluationEnd)  # the greedy actions went through the wrapper too
    # 120 env steps: 28 of the second rollout's 32 vector steps stored, which it holds
    buffer = read_checkpoint(tmp_path / "checkpoints" / "checkpoint-120.pt")["buffer"]
    actions = buffer["actions"]
    assert buffer["rows"] == 28 and len(actions) == 28
    # The rollout keeps the distribution's indices (from 0); the env got them shifted by start.
    sizes = {"MultiBinary": [2, 2], "MultiDiscrete": [2, 3], "Discrete": [2]}[
        type(space).__name__]
    assert actions.min() >= 0
    assert (actions.reshape(-1, len(sizes)).max(0).values < torch.tensor(sizes)).all()
    # Evaluation of the trained agent runs in the wrapped space as well.
    assert trainer.evaluate(env, agent, episodes=2)["eval/episodes"] == 2.0


@pytest.mark.parametrize("space", [gym.spaces.MultiBinary([2, 2]),
                                   gym.spaces.MultiDiscrete([[2, 3], [2, 2]])],
                         ids=["MultiBinary([2, 2])", "MultiDiscrete([[2, 3], [2, 2]])"])
def test_a_multi_dimensional_action_space_trains_or_is_refused_up_front(
        tmp_path: Path, space: gym.Space[Any]) -> None:
    from rltrain.agents.base import SpaceError

    env = EnvSpec(CARTPOLE, wrappers=(lambda e: AsCartPole(e, space, lambda a: int(a[0, 0])),))
    try:
        _, _, result = fit(tmp_path / "run", 128, ppo(), env)
    except SpaceError as error:  # refused before training: acceptable, and nothing written
        assert "takes 1-D" in str(error) and "ActionWrapper" in str(error), error
        assert not (tmp_path / "run").exists()
        return
    assert result.summary.gradient_steps == 8


def test_a_box_action_space_trains_end_to_end(tmp_path: Path) -> None:
    agent, _, result = fit(tmp_path, 256, ppo(log_std_init=-0.5), "Pendulum-v1")
    assert result.summary.gradient_steps == 16
    log_std = agent.net.head.log_std
    assert log_std.shape == (1,) and log_std.item() != -0.5  # learned


def test_orthogonal_initialisation_gains() -> None:
    agent = built(hidden_sizes=[64, 64])
    net = agent.net
    first, second = net.actor[0], net.actor[2]
    eye = torch.eye
    assert torch.allclose(first.weight.T @ first.weight, 2 * eye(4), atol=1e-5)   # 64 x 4
    assert torch.allclose(second.weight @ second.weight.T, 2 * eye(64), atol=1e-4)  # √2
    head = net.policy_out.weight  # 2 x 64, gain 0.01: rows orthogonal, of norm 0.01
    assert torch.allclose(head @ head.T, 1e-4 * eye(2), atol=1e-9)
    assert net.value_out.weight.norm().item() == pytest.approx(1.0, abs=1e-5)
    for module in (*net.actor, *net.critic, net.policy_out, net.value_out):
        if isinstance(module, torch.nn.Linear):
            assert module.bias.abs().sum() == 0
    assert net.critic is not net.actor  # two networks by default ...
    assert not any(p is q for p in net.actor.parameters() for q in net.critic.parameters())
    shared = built(hidden_sizes=[64, 64], shared_trunk=True)  # ... or one shared trunk
    assert shared.net.critic is shared.net.actor
    count = sum(p.numel() for p in shared.net.parameters())
    assert count == sum(p.numel() for p in net.parameters()) - (4 * 64 + 64 + 64 * 64 + 64)
    box = built("Pendulum-v1", log_std_init=-0.7)
    assert box.net.head.log_std.tolist() == pytest.approx([-0.7])
    optimizer = agent.configure_optimizers()["ppo"]
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["eps"] == 1e-5


# ---------------------------------------------------------------------------------------------
# Normalisation statistics travel with the model
# ---------------------------------------------------------------------------------------------


def test_observation_statistics_are_in_every_checkpoint_and_evaluation_uses_them_frozen(
        tmp_path: Path) -> None:
    recorder = EventRecorder()
    strategy = on_policy(n_steps=64)  # 128 transitions a rollout
    agent, trainer, result = fit(tmp_path, 1024, ppo(normalize_observations=True),
                                 strategy=strategy, callbacks=(recorder,), eval_interval=384,
                                 eval_episodes=3)
    assert [e.env_steps for e in recorder.of(EvaluationEnd)] == [384, 768, 1024]
    folder = tmp_path / "checkpoints"
    state = read_checkpoint(folder / "last.pt")["agent"]
    mean, var, count = (state[f"obs_rms.{name}"] for name in ("mean", "var", "count"))
    assert count.item() == pytest.approx(1024 + 1e-4)  # every collected observation, once
    assert mean.shape == var.shape == (4,) and mean.dtype == torch.float64
    assert (mean != 0).all() and (var != 1).all() and (var > 0).all()
    trained = {name: t.clone() for name, t in agent.obs_rms.state_dict().items()}
    assert all(torch.equal(trained[name], state[f"obs_rms.{name}"]) for name in trained)

    own = trainer.evaluate(CARTPOLE, agent)
    fresh = ppo(normalize_observations=True)
    loaded = trainer.evaluate(CARTPOLE, fresh, ckpt_path="last")
    assert loaded["eval/return_mean"] == own["eval/return_mean"]
    assert own["eval/return_mean"] == result.summary.final_metrics["eval/return_mean"]
    for name, tensor in trained.items():  # evaluation froze them, in both agents
        assert torch.equal(agent.obs_rms.state_dict()[name], tensor), name
        assert torch.equal(fresh.obs_rms.state_dict()[name], tensor), name
    # best.pt reproduces the evaluation it was saved for, with its own (older) statistics.
    best = read_checkpoint(folder / "best.pt")
    best_eval = [e for e in recorder.of(EvaluationEnd)
                 if e.env_steps == best["progress"]["env_steps"]]
    assert len(best_eval) == 1
    from_best = trainer.evaluate(CARTPOLE, ppo(normalize_observations=True), ckpt_path="best")
    assert from_best["eval/return_mean"] == best_eval[0].return_mean
    # Without its statistics the checkpoint would act on other inputs: refused, not guessed.
    with pytest.raises(ValueError, match=r"(?s)do not fit this PPO.*obs_rms"):
        trainer.evaluate(CARTPOLE, ppo(), ckpt_path="last")


def test_the_final_checkpoint_and_evaluation_include_the_last_update(tmp_path: Path) -> None:
    agent, trainer, result = fit(tmp_path, 256, checkpoint_interval=128, eval_interval=128,
                                 eval_episodes=2)
    state = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert state["progress"]["gradient_steps"] == result.summary.gradient_steps == 16
    for name, tensor in agent.state_dict().items():
        assert torch.equal(tensor, state["agent"][name]), name
    final = trainer.evaluate(CARTPOLE, agent, episodes=2)
    assert final["eval/return_mean"] == result.summary.final_metrics["eval/return_mean"]


# ---------------------------------------------------------------------------------------------
# Exact resume
# ---------------------------------------------------------------------------------------------

N = 800  # 12.5 rollouts of 4 envs x 16 steps: the last one is cut short, never learned from
PARTS = ("agent", "optimization", "buffer", "random", "metrics", "progress", "runner")


def resume_fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None, *,
               anneal: bool = True, callbacks: tuple[Any, ...] = ()) -> Trainer:
    agent = ppo(hidden_sizes=[16, 16], normalize_observations=True, normalize_rewards=True,
                anneal_lr=anneal, anneal_clip_range=anneal, lr=1e-3)
    strategy = on_policy(num_envs=4, n_steps=16, batch_size=32, update_epochs=2, seed=3)
    return fit(run_dir, num_steps, agent, strategy=strategy, ckpt_path=ckpt_path,
               callbacks=callbacks, eval_interval=200, eval_episodes=2)[1]


def assert_same_run(straight: Path, split: Path) -> None:
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == N
    assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
    for part in PARTS:
        assert_same_tensors(a[part], b[part], part)


class StopAt(EventRecorder):
    """Requests a stop at the EnvStep or TrainStep ``when`` picks."""

    def __init__(self, when: Callable[[Any], bool]) -> None:
        super().__init__()
        self.when = when
        self.trainer: Trainer | None = None

    def on_env_step(self, event: EnvStep, metrics: Any) -> None:
        if self.when(event) and self.trainer is not None:
            self.trainer.interrupter.stop("test")

    def on_train_step(self, event: TrainStep, metrics: Any) -> None:
        if self.when(event) and self.trainer is not None:
            self.trainer.interrupter.stop("test")


@pytest.fixture(scope="module")
def straight_annealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("straight-annealed")
    resume_fit(run_dir, N)
    return run_dir


def stopped_fit(run_dir: Path, when: Callable[[Any], bool]) -> None:
    """``resume_fit``'s run to N, stopped where ``when`` says."""
    stopper = StopAt(when)
    agent = ppo(hidden_sizes=[16, 16], normalize_observations=True, normalize_rewards=True,
                anneal_lr=True, anneal_clip_range=True, lr=1e-3)
    strategy = on_policy(num_envs=4, n_steps=16, batch_size=32, update_epochs=2, seed=3)
    trainer = Trainer(num_steps=N, strategy=strategy, run_dir=run_dir, eval_interval=200,
                      eval_episodes=2, callbacks=[stopper], **QUIET)
    stopper.trainer = trainer
    trainer.fit(CARTPOLE, agent)


@pytest.mark.parametrize("where", ["mid-rollout", "mid-update"])
def test_a_stopped_run_resumes_bit_for_bit(straight_annealed: Path, tmp_path: Path,
                                           where: str) -> None:
    # Rollouts of 64 env steps; 4 gradient steps each (2 epochs x 2 minibatches).
    if where == "mid-rollout":  # 296 = 4 rollouts + 10 of 16 vector steps, between evaluations
        stopped_fit(tmp_path, lambda e: isinstance(e, EnvStep) and e.env_steps == 296)
    else:  # the 6th update (after 384 env steps) stopped after its 2nd of 4 gradient steps
        stopped_fit(tmp_path, lambda e: isinstance(e, TrainStep) and e.gradient_steps == 22)
    saved = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    if where == "mid-rollout":
        assert saved["progress"]["env_steps"] == 296
        assert saved["buffer"]["pos"] == 10 and not saved["buffer"]["prepared"]
    else:
        assert saved["progress"]["env_steps"] == 384
        assert saved["progress"]["gradient_steps"] == 22
        assert saved["progress"]["pending_gradient_steps"] == 2
        assert saved["buffer"]["prepared"] and saved["buffer"]["pos"] == 16
    resume_fit(tmp_path, N, ckpt_path="last")
    assert_same_run(straight_annealed, tmp_path)


def test_fit_then_resume_equals_the_straight_run_bit_for_bit(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    def run(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> None:
        resume_fit(run_dir, num_steps, ckpt_path, anneal=False)

    straight, split = straight_and_resumed(run, tmp_path_factory, N)  # N/2: mid-rollout
    half = read_checkpoint(split / "checkpoints" / "checkpoint-400.pt")
    assert half["buffer"]["pos"] == 4  # 400 = 6 rollouts + 4 vector steps, kept for the resume
    assert_same_run(straight, split)
    summaries = [json.loads((d / "summary.json").read_text()) for d in (straight, split)]
    assert (summaries[0]["final_metrics"]["eval/return_mean"]
            == summaries[1]["final_metrics"]["eval/return_mean"])


def test_an_annealed_schedule_follows_the_num_steps_of_each_fit(tmp_path: Path) -> None:
    before, after = EventRecorder(), EventRecorder()
    resume_fit(tmp_path, N // 2, callbacks=(before,))
    resume_fit(tmp_path, N, "last", callbacks=(after,))

    def lrs(recorder: EventRecorder) -> dict[int, float]:  # per update, by its start
        return {e.env_steps - 64: metric(e, "learning_rate") for e in recorder.of(TrainStep)}

    assert set(lrs(before)) == {0, 64, 128, 192, 256, 320}
    for start, lr in lrs(before).items():  # the first fit anneals to 0 at its 400 env steps
        assert lr == pytest.approx(1e-3 * (1 - start / 400))
    assert set(lrs(after)) == {384, 448, 512, 576, 640, 704}
    for start, lr in lrs(after).items():  # the resumed fit to 800, from the resume point on
        assert lr == pytest.approx(1e-3 * (1 - start / 800))


# ---------------------------------------------------------------------------------------------
# Learning, and the command line
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_solves_cartpole_with_the_shipped_settings(tmp_path: Path, seed: int) -> None:
    config = compose(["ppo_cartpole"], [
        "trainer.num_steps=30000", "trainer.eval_interval=10000", "trainer.eval_episodes=20",
        "trainer.return_threshold=200", f"strategy.seed={seed}", f"trainer.run_dir={tmp_path}",
        "trainer.logger=false", "trainer.enable_progress_bar=false",
        "trainer.enable_console=false", "trainer.enable_metrics_file=false"])
    assert config.strategy.name == "on_policy" and config.agent.name == "ppo"
    recorder = EventRecorder()
    run = build(config, callbacks=[recorder])
    result = run.fit()
    returns = [e.return_mean for e in recorder.of(EvaluationEnd)]
    assert max(returns) >= 200, returns
    assert result.summary.env_steps <= 30_000


def test_ppo_without_a_strategy_gets_the_on_policy_one(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=1000, run_dir=tmp_path / "run", **QUIET)
    with pytest.raises(ValueError, match=r"num_steps \(1,000\) is shorter than one rollout "
                                         r"\(n_steps x num_envs = 2,048 env steps\)"):
        trainer.fit(CARTPOLE, ppo())
    assert isinstance(trainer.strategy, OnPolicyStrategy)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_pendulum", "ppo_lunarlander"])
def test_the_shipped_ppo_configs_are_valid_on_policy_runs(name: str) -> None:
    config = compose([name])
    assert config.agent.name == "ppo" and config.strategy.name == "on_policy"
    rollout = config.strategy.n_steps * config.strategy.num_envs
    assert rollout % config.strategy.batch_size == 0
    assert config.trainer.num_steps >= rollout


@pytest.mark.slow
def test_the_command_line_fits_and_evaluates_ppo(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from rltrain.cli import main

    fitted = rltrain("fit", "ppo_cartpole", "trainer.num_steps=512", "trainer.run_dir=run",
                     "trainer.eval_interval=1000", "trainer.eval_episodes=5",
                     "trainer.logger=false", "trainer.enable_progress_bar=false", cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    run_dir = tmp_path / "run"
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.agent.name == "ppo" and saved.strategy.name == "on_policy"
    assert saved.strategy.n_steps == 32 and saved.agent.gae_lambda == 0.8
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 512
    assert summary["gradient_steps"] == 2 * 20  # 2 rollouts x 20 epochs x 1 minibatch
    assert main(["evaluate", str(run_dir), "--episodes", "5"]) == 0  # what the script runs
    metrics = json.loads(capsys.readouterr().out)
    assert Path(metrics["checkpoint"]).name == "checkpoint-512.pt"
    assert metrics["eval/episodes"] == 5.0
    assert metrics["eval/return_mean"] == summary["final_metrics"]["eval/return_mean"]


def one_error_line(status: int, stderr: str) -> str:
    """The one line a bad input prints on the command line (after checking the rest)."""
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert status == 2 and len(lines) == 1 and lines[0].startswith("rltrain: error: "), stderr
    return lines[0]


@pytest.mark.parametrize("agent, strategy, named", [
    ("dqn", "on_policy", "DQN trains with off_policy strategies, not on_policy "
                         "(OnPolicyStrategy). Leave strategy out for the agent's default"),
    ("ppo", "off_policy", "PPO trains with on_policy strategies, not off_policy "
                          "(OffPolicyStrategy). Leave strategy out"),
])
def test_a_config_naming_an_agent_and_a_strategy_it_cannot_train_with_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        agent: str, strategy: str, named: str) -> None:
    from rltrain.cli import main

    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"agent:\n  name: {agent}\nstrategy:\n  name: {strategy}\n")
    status = main(["fit", str(mine), "trainer.num_steps=1000", "trainer.run_dir=run"])
    assert named in one_error_line(status, capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == [mine]  # no run directory


def test_agent_name_ppo_alone_starts_from_the_shipped_ppo_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rltrain.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["fit", "agent.name=ppo", "agent.lr=5e-4", "--print-config"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.agent.name == "ppo" and printed.strategy.name == "on_policy"
    assert printed.strategy.n_steps == 32 and printed.agent.gamma == 0.98  # ppo_cartpole's
    assert printed.agent.lr == 5e-4  # the override wins
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # a process (3 s); in-process: test_trainer_api's kind check
def test_the_command_line_refuses_dqn_with_the_on_policy_strategy(tmp_path: Path) -> None:
    # No shipped config pairs DQN with on_policy: the command line starts from the defaults,
    # and fit refuses the pair naming the fix, before anything is written.
    process = rltrain("fit", "agent.name=dqn", "strategy.name=on_policy",
                      "trainer.num_steps=1000", "trainer.run_dir=run", cwd=tmp_path)
    line = one_error_line(process.returncode, process.stderr)
    assert "DQN trains with off_policy strategies, not on_policy" in line
    assert "pass a strategy of kind off_policy" in line
    assert not list(tmp_path.iterdir())  # no run directory

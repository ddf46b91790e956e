"""Recurrent PPO (``agent.recurrent=lstm|gru``): the sequences re-run in training give the
log-probabilities and values the policy acted with (state carried, reset at episode starts),
``predict`` carries the state, a memory task only a recurrent policy solves, a run stopped
mid-rollout or mid-update resumes bit for bit, and the refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, StopAtEnvStep, StopAtGradientStep, assert_same_tensors, fit_stopped

from rltrain import PPO, OnPolicyConfig, OnPolicyStrategy, PPOConfig, Trainer, load_policy
from rltrain.buffers.recurrent import RecurrentRollout
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import make_vector_env
from rltrain.envs.partial import MaskVelocity
from rltrain.envs.runner import Runner
from rltrain.types import Progress


class Cue(gym.Env[np.ndarray, int]):
    """A memory task: the first observation shows a cue (one of 2), the next ``delay`` are
    blank; at the last step, the action matching the cue earns 1 (else 0). A memoryless policy
    scores 0.5 on average; one that remembers scores 1."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)  # type: ignore[assignment]
    spec = gym.envs.registration.EnvSpec("Cue-v0", max_episode_steps=10)

    def __init__(self, delay: int = 3) -> None:
        self.delay = delay

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        obs = np.zeros(3, np.float32)
        obs[self.cue] = 1.0
        return obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        last = self.t > self.delay
        obs = np.zeros(3, np.float32)
        obs[2] = float(last)  # "answer now"
        reward = float(last and int(action) == self.cue)
        return obs, reward, last, False, {}


def masked_cartpole() -> gym.Env[np.ndarray, int]:
    return MaskVelocity(gym.make("CartPole-v1", max_episode_steps=30))


def test_training_replays_the_sequences_the_policy_acted_on() -> None:
    for kind in ("lstm", "gru"):
        agent = PPO(PPOConfig(recurrent=kind, recurrent_hidden_size=8, hidden_sizes=[8]))
        envs = make_vector_env(masked_cartpole, num_envs=3, seed=1)
        agent.setup(observation_space=envs.single_observation_space,
                    action_space=envs.single_action_space, device=torch.device("cpu"),
                    progress=Progress())
        rollout = agent.make_rollout(40, num_envs=3,
                                     observation_space=envs.single_observation_space,
                                     action_space=envs.single_action_space, seed=0,
                                     device=torch.device("cpu"))
        assert isinstance(rollout, RecurrentRollout)
        runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
        policy = agent.policy(torch.device("cpu"))
        runner.reset(seed=1, policy=policy)
        for _ in range(2):  # the second rollout starts from a state carried over
            rollout.reset()
            while not rollout.full:
                transitions, _ = runner.step(runner.act(policy), policy)
                rollout.add(transitions)
        envs.close()
        assert rollout.episode_starts().any()  # episodes of <= 30 steps end inside
        assert rollout.initial_state.abs().sum() > 0
        rollout.shuffle(1)
        batch = rollout.minibatch(0, 40 * 3)
        with torch.no_grad():
            dist, values = agent.net.sequences(batch.observations, batch.episode_starts,
                                               batch.initial_state)
        torch.testing.assert_close(values, batch.values)
        torch.testing.assert_close(dist.log_prob(batch.actions), batch.log_probs)


@pytest.mark.filterwarnings("ignore:The tensor attributes")  # torch.export on an LSTM
def test_predict_carries_the_state_and_resets_it_at_episode_starts(tmp_path: Path) -> None:
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=2, n_steps=16, batch_size=32,
                                               update_epochs=1))
    Trainer(num_steps=64, strategy=strategy, run_dir=tmp_path, **QUIET).fit(
        Cue, PPO(PPOConfig(recurrent="gru", recurrent_hidden_size=8)))
    policy = load_policy(tmp_path, trust=[__name__])
    cue = np.array([1.0, 0.0, 0.0], np.float32)
    _, state = policy.predict(cue)
    assert state is not None and state[0].abs().sum() > 0
    _, again = policy.predict(cue, state)
    assert not torch.equal(again[0], state[0])  # the state moved on
    _, restarted = policy.predict(cue, again, episode_start=True)
    torch.testing.assert_close(restarted[0], state[0])  # as from the start
    # exported: actions, state = program(obs, state), as predict steps it
    program = torch.export.load(policy.export(tmp_path / "policy.pt2")).module()
    action, exported = program(torch.from_numpy(cue)[None], policy.policy.initial_state(1))
    torch.testing.assert_close(exported[0], state[0])
    assert int(action[0]) == int(policy.predict(cue)[0])


def fit(run_dir: Path, recurrent: str | None, num_steps: int,
        ckpt_path: str | None = None, stop: Any = None) -> float | None:
    """Train on the cue task; the best evaluation return."""
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=8, n_steps=16, batch_size=64,
                                               update_epochs=4, seed=2))
    agent = PPO(PPOConfig(recurrent=recurrent, recurrent_hidden_size=16, hidden_sizes=[16],
                          lr=3e-3, ent_coef=0.01))
    result = fit_stopped(Cue, agent, strategy, run_dir, num_steps, stop=stop,
                         ckpt_path=ckpt_path, eval_interval=num_steps // 4, eval_episodes=20)
    best: float | None = result.summary.best_eval_return
    return best


@pytest.mark.slow
def test_only_the_recurrent_policy_remembers_the_cue(tmp_path: Path) -> None:
    best = {recurrent: fit(tmp_path / str(recurrent), recurrent, 12_000)
            for recurrent in ("lstm", None)}
    assert best["lstm"] is not None and best["lstm"] >= 0.95
    assert best[None] is not None and best[None] <= 0.8  # memoryless: 0.5 on average


@pytest.mark.parametrize("where", ["mid-rollout", "mid-update"])
def test_a_stopped_run_resumes_bit_for_bit(tmp_path: Path, where: str) -> None:
    # rollouts of 128 transitions; 2 minibatches of 4 sequences x 4 epochs = 8 steps each
    fit(tmp_path / "straight", "lstm", 640)
    stop = StopAtEnvStep(200) if where == "mid-rollout" else StopAtGradientStep(19)
    fit(tmp_path / "split", "lstm", 640, stop=stop)
    stopped = read_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["progress"]
    assert (stopped["env_steps"], stopped["gradient_steps"]) == (
        (200, 8) if where == "mid-rollout" else (384, 19))
    fit(tmp_path / "split", "lstm", 640, ckpt_path="last")
    a = read_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = read_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert a["progress"]["env_steps"] == 640
    for part in ("agent", "optimization", "buffer", "progress", "runner"):
        assert_same_tensors(a[part], b[part], part, skip=("envs",))


def test_the_refusals_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="recurrent must be one of"):
        PPOConfig(recurrent="rnn")
    with pytest.raises(ValueError, match="recurrent and use_sde"):
        PPOConfig(recurrent="lstm", use_sde=True)
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=16, batch_size=8))
    with pytest.raises(ValueError, match=r"batch_size \(8\) must be n_steps x a divisor of "
                                         r"num_envs \(4\), one of \[16, 32, 64\]"):
        Trainer(num_steps=640, strategy=strategy, run_dir=tmp_path / "a", **QUIET).fit(
            Cue, PPO(PPOConfig(recurrent="lstm")))
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=16, batch_size=16))
    Trainer(num_steps=64, strategy=strategy, run_dir=tmp_path / "b", **QUIET).fit(
        Cue, PPO(PPOConfig(recurrent="lstm")))  # 16 = one sequence a minibatch: fine
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("start_rate", [0.0, 0.15, 1.0])
def test_one_call_over_segments_equals_the_step_by_step_loop(kind: str,
                                                             start_rate: float) -> None:
    from rltrain.agents.nn.recurrent import RecurrentCore

    generator = torch.Generator().manual_seed(3)
    core = RecurrentCore(kind, 5, 12)
    x = torch.randn(40, 4, 5, generator=generator, requires_grad=True)
    state = torch.randn(4, core.state_size, generator=generator)
    starts = torch.rand(40, 4, generator=generator) < start_rate
    starts[0, 0] = True  # a sub-env whose first step begins an episode: its state is not used
    looped, _ = core.sequence(x, state, starts)
    once = core.outputs(x, state, starts)
    torch.testing.assert_close(once, looped)
    weights = torch.randn(looped.shape, generator=generator)
    grads = [torch.autograd.grad((out * weights).sum(), [x, *core.parameters()])
             for out in (looped, once)]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)

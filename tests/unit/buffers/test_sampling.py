"""n-step windows and prioritized replay: the windows against a per-sub-env brute force on a
real vector env (terminations and truncations inside windows, the newest transition, a
wrapped ring, frame stacks), the sum tree's draws, priorities from TD errors, importance
weights, their exact resume and refusals, and a DQN run with both, stopped and resumed bit for
bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, StopAtGradientStep, assert_same_tensors, fit_stopped
from test_frames import K, StackedCounter, whole_index

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.buffers import FrameStackReplay, PriorityConfig, ReplayBuffer
from rltrain.buffers.sampled import STORED_FIELDS
from rltrain.buffers.sampling import Prioritized, SumTree, beta_at
from rltrain.checkpoint import read_checkpoint
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import Progress

GAMMA = 0.9
SPACE = gym.spaces.Box(0, 255, (K, 36, 36), np.uint8)


def collect(capacity: int, steps: int, *, n_step: int, num_envs: int = 3,
            priority: PriorityConfig | None = None
            ) -> tuple[ReplayBuffer, FrameStackReplay, list[Any]]:
    """Both replays fed the same real vector steps, and every step's transitions."""
    envs = make_vector_env(StackedCounter, num_envs=num_envs, seed=5)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    runner.reset(seed=5)
    kwargs: dict[str, Any] = dict(observation_space=SPACE, action_space=gym.spaces.Discrete(3),
                                  seed=1, num_envs=num_envs, n_step=n_step, gamma=GAMMA,
                                  priority=priority)
    whole = ReplayBuffer(capacity, **kwargs)
    frames = FrameStackReplay(capacity, frame_stack=K, **kwargs)
    steps_seen = []
    for _ in range(steps):
        transitions, _ = runner.step(runner.random_actions())
        whole.add(transitions)
        frames.add(transitions)
        steps_seen.append(transitions)
    envs.close()
    return whole, frames, steps_seen


def brute_force(steps: list[Any], step: int, env: int, n_step: int) -> tuple[float, float, int,
                                                                             np.ndarray]:
    """The n-step window of sub-env ``env``'s transition at vector step ``step``, walked one
    transition at a time: (return, discount, terminated, last next observation)."""
    total, j = 0.0, 0
    while True:
        t = steps[step + j]
        total += GAMMA**j * float(t.rewards[env])
        ended = bool(t.terminated[env]) or bool(t.truncated[env])
        if ended or j + 1 == n_step or step + j + 1 == len(steps):
            return total, GAMMA ** (j + 1), int(t.terminated[env]), t.next_observations[env]
        j += 1


@pytest.mark.parametrize("steps", [50, 400])  # the ring not full, and wrapped
@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_n_step_windows_match_a_walk_through_each_sub_envs_steps(steps: int,
                                                                 n_step: int) -> None:
    whole, _, seen = collect(300, steps, n_step=n_step)
    idx = np.arange(len(whole))
    batch = whole._gather(idx)
    written = steps * 3
    rows = idx + 300 * ((written - 1 - idx) // 300)  # the row each slot holds now
    step, env = np.divmod(rows, 3)
    ended_inside = 0
    for i in idx:
        ret, disc, term, next_obs = brute_force(seen, int(step[i]), int(env[i]), n_step)
        assert batch.rewards[i].item() == pytest.approx(ret, rel=1e-6)
        if n_step > 1:
            assert batch.discounts is not None
            assert batch.discounts[i].item() == pytest.approx(disc, rel=1e-6)
            ended_inside += disc > GAMMA**n_step + 1e-9
        else:
            assert batch.discounts is None
        assert batch.terminated[i].item() == term
        assert np.array_equal(batch.next_observations[i].numpy(), next_obs)
    if n_step > 1:
        assert ended_inside > 30  # windows cut short by ends and by the newest transition


def test_frame_stack_replay_rebuilds_the_same_n_step_windows() -> None:
    whole, frames, _ = collect(300, 400, n_step=4)
    idx = np.arange(len(frames))
    kept = frames._kept(idx)
    rebuilt, stored = frames._gather(idx), whole._gather(whole_index(frames, idx))
    for name in (*STORED_FIELDS, "discounts"):
        assert torch.equal(getattr(rebuilt, name)[kept], getattr(stored, name)[kept]), name


def test_sum_tree_draws_in_proportion_and_never_a_zero_leaf() -> None:
    tree = SumTree(7)
    values = np.array([0.0, 1.0, 2.0, 0.0, 4.0, 0.5, 0.5])
    tree.set(np.arange(7), values)
    assert tree.total == pytest.approx(8.0)
    rng = np.random.default_rng(0)
    found = tree.find(rng.random(80_000) * tree.total)
    counts = np.bincount(found, minlength=7) / 80_000
    assert counts[[0, 3]].sum() == 0
    np.testing.assert_allclose(counts, values / 8.0, atol=0.01)
    tree.set(np.array([4]), np.array([0.0]))  # parents recomputed
    assert tree.total == pytest.approx(4.0)
    assert 4 not in tree.find(np.linspace(0, tree.total, 1000, endpoint=False))


def test_priorities_follow_td_errors_and_weights_correct_for_them() -> None:
    sampler = Prioritized(4, PriorityConfig(alpha=0.5, beta_start=0.4, epsilon=1e-6))
    sampler.added(np.arange(4))
    sampler.update(np.arange(4), torch.tensor([1.0, -4.0, 9.0, float("nan")]))
    # (|td| + ε)^α; the NaN (a failed step) keeps its transition's old priority, the max so far
    expected = np.array([1.0, 2.0, 3.0, 1.0]) + np.array([0.5e-6, 0.125e-6, 1 / 6 * 1e-6, 0])
    np.testing.assert_allclose(sampler.tree.values(), expected, rtol=1e-6)
    assert sampler.max_priority == pytest.approx(3.0, rel=1e-6)
    rng = np.random.default_rng(1)
    drawn = sampler.draw(rng, (20_000, 4)).reshape(-1)
    np.testing.assert_allclose(np.bincount(drawn) / drawn.size, expected / expected.sum(),
                               atol=0.01)
    sampler.beta = 0.7
    weights = sampler.weights(np.arange(4), 4).numpy()
    raw = (4 * expected / expected.sum()) ** -0.7
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-5)
    sampler.added(np.array([0]))  # a new transition gets the highest priority so far
    assert sampler.tree.values()[0] == pytest.approx(3.0, rel=1e-6)
    assert beta_at(sampler.config, 0, 100) == 0.4 and beta_at(sampler.config, 50, 100) == 0.7
    assert beta_at(sampler.config, 500, 100) == 1.0


def test_a_prioritized_replay_draws_what_its_learner_finds_surprising() -> None:
    whole, _, _ = collect(300, 100, n_step=1, priority=PriorityConfig(alpha=1.0))
    hot = np.arange(0, 300, 10)  # 30 transitions with TD errors 100x the others'
    errors = torch.ones(300)
    errors[hot] = 100.0
    whole.prioritized.update(np.arange(300), errors)  # type: ignore[union-attr]
    counts = np.zeros(300)
    for _ in range(200):
        batch = whole.sample(32)
        assert batch.weights is not None and batch.priorities is not None
        np.add.at(counts, batch.priorities.indices, 1)
        batch.priorities.update(torch.from_numpy(errors.numpy()[batch.priorities.indices]))
    assert counts[hot].sum() / counts.sum() > 0.9  # 30 x 100 of 30 x 100 + 270
    assert whole.sample(32).weights.max() == 1.0  # type: ignore[union-attr]


def test_frame_stack_replay_forgets_the_priorities_of_transitions_it_lost() -> None:
    envs_steps = 400
    _, frames, _ = collect(300, envs_steps, n_step=1, priority=PriorityConfig())
    frames_short = FrameStackReplay(300, num_envs=3, observation_space=SPACE,
                                    action_space=gym.spaces.Discrete(3), frame_stack=K,
                                    priority=PriorityConfig())
    envs = make_vector_env(lambda: StackedCounter("zero", 2), num_envs=3, seed=2)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    runner.reset(seed=2)
    for _ in range(envs_steps):
        frames_short.add(runner.step(runner.random_actions())[0])
    envs.close()
    lost = ~frames_short._kept(np.arange(len(frames_short)))
    assert lost.any()
    drawn = frames_short._draw((200, 32))
    assert frames_short._kept(drawn).all()
    assert (frames_short.prioritized.tree.values()[np.flatnonzero(lost)] == 0).any()  # type: ignore[union-attr]
    assert frames.sample(8).weights is not None


def test_priorities_resume_exactly_and_altered_ones_are_refused() -> None:
    priority = PriorityConfig(alpha=0.7)
    whole, _, _ = collect(300, 120, n_step=3, priority=priority)
    for _ in range(5):
        batch = whole.sample(16)
        batch.priorities.update(batch.rewards + 0.5)  # type: ignore[union-attr]
    state = whole.state_dict()
    twin, _, _ = collect(300, 3, n_step=3, priority=priority)
    twin.load_state_dict(state)
    for _ in range(5):
        a, b = whole.sample(16), twin.sample(16)
        for name in (*STORED_FIELDS, "discounts", "weights"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        a.priorities.update(a.rewards)  # type: ignore[union-attr]
        b.priorities.update(b.rewards)  # type: ignore[union-attr]
    uniform, _, _ = collect(300, 3, n_step=3)
    with pytest.raises(ValueError, match="was prioritized and this one is not"):
        uniform.load_state_dict(state)
    for alter in (lambda p: p["values"].__setitem__(0, float("nan")),
                  lambda p: p["values"].__setitem__(1, -1.0),
                  lambda p: p.update(values=p["values"][:10]),
                  lambda p: p.update(max_priority="1")):
        bad = whole.state_dict()
        alter(bad["priorities"])
        with pytest.raises(ValueError, match=r"priorities .* altered"):
            twin.load_state_dict(bad)


# ------------------------------------------------------------------ runs


def test_an_agent_that_ignores_n_step_or_priorities_is_refused_naming_the_setting(
        tmp_path: Path) -> None:
    for setting, value in (("n_step", 3), ("prioritized", True)):
        strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=10, **{setting: value}))
        trainer = Trainer(num_steps=100, strategy=strategy, run_dir=tmp_path / setting,
                          **QUIET)
        with pytest.raises(ValueError, match=rf"strategy\.{setting}=.*Dreamer does not learn"):
            trainer.fit("CartPole-v1", Dreamer(DreamerConfig()))
        assert not (tmp_path / setting / "checkpoints").exists()


def fit(run_dir: Path, ckpt_path: str | None = None, stop_at: int | None = None) -> None:
    """DQN with 3-step windows and priorities on CartPole to 400 env steps (β annealed over
    them), stopped after gradient step ``stop_at``."""
    strategy = OffPolicyStrategy(OffPolicyConfig(
        batch_size=16, warmup_steps=60, num_envs=2, train_interval=8, train_steps=4,
        buffer_size=300, seed=4, n_step=3, prioritized=True))
    fit_stopped("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16], exploration_steps=100)),
                strategy, run_dir, 400, stop=StopAtGradientStep(stop_at) if stop_at else None,
                ckpt_path=ckpt_path, eval_interval=None)


def test_a_dqn_run_with_n_step_and_priorities_resumes_bit_for_bit(tmp_path: Path) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    fit(straight)
    fit(split, stop_at=90)  # a round of 4 stopped after its 2nd gradient step
    stopped = read_checkpoint(split / "checkpoints" / "last.pt")
    assert stopped["progress"]["gradient_steps"] == 90
    fit(split, ckpt_path="last")
    a = read_checkpoint(straight / "checkpoints" / "last.pt")
    b = read_checkpoint(split / "checkpoints" / "last.pt")
    priorities = a["buffer"]["priorities"]["values"]
    assert len(torch.unique(priorities[:300])) > 50  # set from TD errors, not all the max
    for part in ("agent", "optimization", "buffer", "progress"):
        assert_same_tensors(a[part], b[part], part)

"""envpool's vector env (``env.backend: envpool``) under the Runner's contract, checked with the
same assertions as Gymnasium's vector env: terminated and truncated apart, the true last
observation of an ended episode in its transition, the next episode's first observation in the
runner the same step, episode counters restarting; on classic control, Atari and MuJoCo."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import EnvSpec, make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import Progress

pytest.importorskip("envpool")

BACKENDS = ["gymnasium", "envpool"]
LIMIT = 16  # CartPole's time limit here: random episodes end by both causes


def runner_for(spec: EnvSpec, num_envs: int, seed: int = 3) -> Runner:
    envs = make_vector_env(spec, num_envs=num_envs, seed=seed)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    runner.reset(seed=seed)
    return runner


def cartpole(backend: str) -> EnvSpec:
    return EnvSpec("CartPole-v1", kwargs={"max_episode_steps": LIMIT},
                   backend=backend)  # type: ignore[arg-type]


def fallen(obs: np.ndarray) -> bool:
    """CartPole's termination condition, which only a true last observation meets."""
    return bool(abs(obs[0]) > 2.4 or abs(obs[2]) > 12 * 2 * np.pi / 360)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cartpole_episodes_end_and_restart_as_the_runner_promises(backend: str) -> None:
    runner = runner_for(cartpole(backend), num_envs=4)
    ends = {"terminated": 0, "truncated": 0}
    try:
        assert (np.abs(runner.observations) <= 0.05).all()  # reset states
        previous = runner.observations.copy()
        for _ in range(250):
            transitions, episodes = runner.step(runner.random_actions())
            np.testing.assert_array_equal(transitions.observations, previous)
            ended = {e.env_index: e for e in episodes}
            for i in range(4):
                terminated, truncated = transitions.terminated[i], transitions.truncated[i]
                last = transitions.next_observations[i]
                if i not in ended:
                    assert not terminated and not truncated
                    np.testing.assert_array_equal(runner.observations[i], last)
                    continue
                episode = ended[i]
                assert episode.terminated == bool(terminated)  # both at once: a fall at the limit
                # the transition holds the true last observation; the runner the next first one
                # (envpool reports a fall on the limit's step as a truncation only)
                assert fallen(last) == bool(terminated) or (
                    backend == "envpool" and truncated and episode.episode_length == LIMIT)
                assert (np.abs(runner.observations[i]) <= 0.05).all()
                assert not np.array_equal(runner.observations[i], last)
                if truncated or not terminated:
                    assert truncated and episode.episode_length == LIMIT
                else:
                    assert episode.episode_length <= LIMIT
                assert episode.episode_return == episode.episode_length  # +1 a step
                assert runner.episode_lengths[i] == 0 and runner.episode_returns[i] == 0
                ends["terminated" if terminated else "truncated"] += 1
            previous = runner.observations.copy()
        assert ends["terminated"] >= 3 and ends["truncated"] >= 3, ends
    finally:
        runner.envs.close()


@pytest.mark.parametrize("backend, life_noops", [
    ("gymnasium", None), ("envpool", None), ("envpool", False)])
def test_atari_lives_end_learner_episodes_and_stacks_continue(
        backend: str, life_noops: bool | None) -> None:
    spec = EnvSpec("ALE/Breakout-v5", atari=AtariConfig(life_noops=life_noops),
                   backend=backend)  # type: ignore[arg-type]
    runner = runner_for(spec, num_envs=2)
    try:
        assert runner.envs.metadata["frame_stack"] == 4
        assert runner.observations.shape == (2, 4, 84, 84)
        assert runner.observations.dtype == np.uint8
        ended = 0
        for _ in range(200):
            before = runner.observations.copy()
            transitions, episodes = runner.step(runner.random_actions())
            np.testing.assert_array_equal(transitions.observations, before)
            # a next observation is its observation's stack moved on by one frame
            np.testing.assert_array_equal(transitions.next_observations[:, :-1],
                                          transitions.observations[:, 1:])
            assert set(np.unique(transitions.rewards)) <= {0.0, 1.0}  # sign-clipped
            for episode in episodes:
                assert episode.terminated  # a lost life, not a time limit
                first = runner.observations[episode.env_index]
                assert not np.array_equal(first, transitions.next_observations[episode.env_index])
                # a new life's stack repeats its first frame on both backends (envpool's own
                # stack would keep the lost life's last frames)
                assert (first == first[-1]).all()
            ended += len(episodes)
        assert ended >= 2  # random play loses lives within 200 steps
    finally:
        runner.envs.close()


def test_envpool_frames_are_stacked_as_envpool_stacks_them_within_a_life() -> None:
    """rltrain's stack of envpool's single frames equals envpool's own stack of four, frame
    for frame, until the first lost life (where only rltrain's repeats the new first frame)."""
    import envpool

    from rltrain.envs.envpool import EnvpoolVectorEnv, envpool_kwargs

    kwargs = envpool_kwargs(AtariConfig())
    ours = EnvpoolVectorEnv("ALE/Breakout-v5", num_envs=2, seed=5, **kwargs)
    theirs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=2, seed=5, **kwargs)
    try:
        assert ours.single_observation_space.shape == (4, 84, 84)
        np.testing.assert_array_equal(ours.reset()[0], theirs.reset()[0])
        rng = np.random.default_rng(0)
        compared, terminated = 0, np.zeros(2, dtype=bool)
        while not terminated.any() and compared < 400:
            actions = rng.integers(4, size=2)
            mine, _, terminated, _, _ = ours.step(actions)
            envpools = theirs.step(actions)[0]
            if not terminated.any():
                np.testing.assert_array_equal(mine, envpools)
                compared += 1
        assert terminated.any() and compared > 20  # frames compared until a life was lost
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("game", ["ALE/Breakout-v5", "ALE/Pong-v5"])
def test_envpool_started_sb3s_way_plays_the_gymnasium_pipelines_frames_through_lives(
        game: str) -> None:
    """With ``life_noops=false`` rltrain starts games and lives on envpool as the Gymnasium
    pipeline (SB3's ``AtariWrapper``) does: lined up (one no-op frame per new game, rewards
    unclipped), the same stacked frames, rewards and episode ends, step for step, through lost
    lives and whole games, FIRE pressed after each start."""
    from rltrain.envs.envpool import EnvpoolVectorEnv, envpool_kwargs, sb3_starts

    lined_up = AtariConfig(noop_max=1, life_noops=False, clip_rewards=False)
    starts = sb3_starts(game, lined_up)
    assert starts is not None and starts.fire  # both games wait for FIRE
    assert not envpool_kwargs(lined_up)["episodic_life"]  # envpool's own restart is off
    gymnasiums = EnvSpec(game, atari=lined_up)()
    pool = EnvpoolVectorEnv(game, num_envs=1, seed=7, starts=starts, **envpool_kwargs(lined_up))
    try:
        mine, _ = gymnasiums.reset(seed=7)
        np.testing.assert_array_equal(pool.reset()[0][0], mine)
        rng = np.random.default_rng(0)
        lost = games = 0
        for _ in range(1_500 if game == "ALE/Breakout-v5" else 300):
            action = int(rng.integers(gymnasiums.action_space.n))  # type: ignore[attr-defined]
            mine, reward, terminated, truncated, _ = gymnasiums.step(action)
            pools, rewards, terminateds, truncateds, info = pool.step(np.array([action]))
            assert (reward, terminated, truncated) == (
                rewards[0], terminateds[0], truncateds[0])
            if terminated or truncated:
                np.testing.assert_array_equal(info["final_obs"][0], mine)
                over = gymnasiums.unwrapped.ale.lives() == 0  # type: ignore[attr-defined]
                games, lost = games + over, lost + (not over)
                mine, _ = gymnasiums.reset()
            np.testing.assert_array_equal(pools[0], mine)
        if game == "ALE/Breakout-v5":
            assert lost >= 20 and games >= 4  # restarts of both kinds were compared
    finally:
        gymnasiums.close()
        pool.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mujoco_truncation_keeps_the_last_observation(backend: str) -> None:
    pytest.importorskip("mujoco")
    spec = EnvSpec("HalfCheetah-v5", kwargs={"max_episode_steps": 25},
                   backend=backend)  # type: ignore[arg-type]
    runner = runner_for(spec, num_envs=2)
    try:
        for _ in range(25):
            before = runner.observations.copy()
            transitions, episodes = runner.step(runner.random_actions())
            np.testing.assert_array_equal(transitions.observations, before)
        assert [(e.env_index, e.terminated, e.episode_length)
                               for e in episodes] == [(0, False, 25), (1, False, 25)]
        assert transitions.truncated.all() and not transitions.terminated.any()
        # the last observation continues the episode; the runner holds a reset state
        assert not np.allclose(transitions.next_observations, runner.observations)
        assert (np.abs(runner.observations) < 0.5).all()
    finally:
        runner.envs.close()


def test_envpool_reset_with_another_seed_makes_a_new_pool_seeded_with_it() -> None:
    runner = runner_for(cartpole("envpool"), num_envs=2, seed=5)
    again = runner_for(cartpole("envpool"), num_envs=2, seed=9)
    try:
        first = runner.observations.copy()
        assert not np.array_equal(first, again.observations)
        again.reset(seed=5)
        np.testing.assert_array_equal(again.observations, first)
    finally:
        runner.envs.close()
        again.envs.close()


@pytest.mark.parametrize("spec, problem", [
    (dict(id="CartPole-v1", wrappers=(np.abs,)), "cannot apply Python wrappers"),
    (dict(id="Taxi-v4"), "envpool has no environment"),
    (dict(target="gymnasium.envs.classic_control.CartPoleEnv"), "by env.id"),
])
def test_envpool_refuses_what_it_cannot_run(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(Exception, match=problem):
        EnvSpec(backend="envpool", **spec)


@pytest.mark.slow
def test_an_envpool_run_says_in_its_first_lines_and_first_checkpoint_what_a_resume_loses(
        tmp_path: Any) -> None:
    """envpool has no state API: the run's opening lines say that a resume restarts the running
    episodes, and its first checkpoint warns exactly what is lost and which backend keeps it."""
    from conftest import rltrain

    run = rltrain("fit", "dqn_cartpole", "env.backend=envpool", "trainer.num_steps=600",
                  "strategy.warmup_steps=100", "trainer.checkpoint_interval=200",
                  "trainer.eval_interval=null", "trainer.enable_progress_bar=false",
                  f"trainer.run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    head = run.stdout.splitlines()[:12]
    assert any(line.startswith("env backend: envpool (its envs cannot be saved") for line in head)
    warned = [line for line in run.stderr.splitlines() if "have no state API" in line]
    assert len(warned) == 1, run.stderr  # once, at the first checkpoint
    assert "a resume restarts the episode running at the checkpoint (1 sub-env:" in warned[0]
    assert "env.backend=gymnasium (strategy.vectorization=sync or async)" in warned[0]
    plain = rltrain("fit", "dqn_cartpole", "trainer.num_steps=300", "strategy.warmup_steps=100",
                    "trainer.eval_interval=null", "trainer.enable_progress_bar=false",
                    f"trainer.run_dir={tmp_path / 'plain'}", cwd=tmp_path)
    assert "env backend" not in plain.stdout and "no state API" not in plain.stderr

"""The standard Atari pipeline (env.atari): its wrappers in training and in evaluation, the
raw-pixel warning, the presets chosen for every ALE game, and an Atari run evaluated, loaded
and exported from its run directory, and DQN replaying frames stored once across a resume."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain import load_policy
from rltrain.checkpoint import read_checkpoint
from rltrain.config.files import ConfigError
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose
from rltrain.envs.atari import (
    AtariConfig,
    EpisodicLife,
    FireReset,
    FrameStack,
    LifeLossContinue,
    SignReward,
)
from rltrain.envs.make import EnvSpec, evaluation_env
from rltrain.trainer.build import build

pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def layers(env: gym.Env) -> list[type]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(type(env))
        env = env.env
    return found


def test_training_pipeline_stacks_84x84_frames_clips_rewards_and_ends_episodes_on_lost_lives(
) -> None:
    spec = EnvSpec("ALE/Breakout-v5", atari=AtariConfig())
    env = spec()
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        assert env.metadata["frame_stack"] == 4
        assert {EpisodicLife, FireReset, SignReward, FrameStack} <= set(layers(env))
        assert env.unwrapped.spec.kwargs["frameskip"] == 1  # the pipeline skips frames
        obs, _ = env.reset(seed=0)
        assert (obs == obs[-1]).all()  # a reset fills the stack with its frame
        ale = env.unwrapped.ale
        lives, ended_on_life = ale.lives(), False
        for _ in range(2_000):
            obs, reward, terminated, _, _ = env.step(env.action_space.sample())
            assert reward in (-1.0, 0.0, 1.0)
            if terminated:
                ended_on_life = ale.lives() > 0  # the game goes on
                break
        assert ended_on_life and ale.lives() == lives - 1
        env.reset()
        assert ale.lives() == lives - 1  # the reset continued the game
    finally:
        env.close()


def test_evaluation_pipeline_plays_whole_games_with_the_games_score() -> None:
    spec = evaluation_env(EnvSpec("ALE/Breakout-v5", atari=AtariConfig(),
                                  backend="envpool"))
    assert isinstance(spec, EnvSpec) and spec.backend == "gymnasium" and not spec.training
    env = spec()
    try:
        kinds = set(layers(env))
        assert {FireReset, FrameStack, LifeLossContinue} <= kinds and SignReward not in kinds
        env.reset(seed=1)
        lives = [env.unwrapped.ale.lives()]
        for _ in range(5_000):
            _, _, terminated, truncated, _ = env.step(0)  # NOOP: never FIRE
            lives.append(env.unwrapped.ale.lives())
            if terminated or truncated:
                break
        # the whole game, though the agent never pressed FIRE: each lost life went on
        assert terminated and lives[-1] == 0 and lives[0] == 5 and len(lives) < 5_000
    finally:
        env.close()


def restart_frames(config: AtariConfig, restarts: int = 4) -> list[int]:
    """Emulator frames each lost life's restart took (the reset that goes on with the game),
    never pressing FIRE, so the ball is missed at once."""
    env = EnvSpec("ALE/Breakout-v5", atari=config)()
    ale = env.unwrapped.ale
    try:
        env.reset(seed=3)
        frames = []
        while len(frames) < restarts:
            _, _, terminated, truncated, _ = env.step(0)
            assert not truncated
            if terminated:
                lives, before = ale.lives(), ale.getEpisodeFrameNumber()
                env.reset()
                assert ale.lives() == lives > 0  # the same game went on
                frames.append(ale.getEpisodeFrameNumber() - before)
        return frames
    finally:
        env.close()


def test_a_lost_life_goes_on_after_one_no_op_or_after_envpools_random_no_ops() -> None:
    # one no-op step, then FireReset's FIRE and action 2: 3 steps of 4 frames (SB3's way)
    assert restart_frames(AtariConfig()) == [12] * 4
    noops = [frames - 12 for frames in restart_frames(AtariConfig(life_noops=True))]
    assert all(0 <= n < 30 for n in noops) and len(set(noops)) > 1  # envpool's draw


@pytest.mark.parametrize("backend, life_noops, evaluated", [
    ("envpool", None, True), ("envpool", False, False), ("gymnasium", None, False),
    ("gymnasium", True, True)])
def test_evaluations_restart_lives_as_the_training_backend_does(
        backend: str, life_noops: bool | None, evaluated: bool) -> None:
    if backend == "envpool":
        pytest.importorskip("envpool")
    spec = evaluation_env(EnvSpec("ALE/Breakout-v5", atari=AtariConfig(life_noops=life_noops),
                                  backend=backend))
    assert isinstance(spec, EnvSpec) and spec.atari is not None
    assert spec.atari.life_noops is evaluated


def test_sign_reward_keeps_the_sign_only() -> None:
    wrapper = SignReward(gym.make("CartPole-v1"))
    assert [wrapper.reward(r) for r in (7.0, -3.5, 0.0, 0.2)] == [1.0, -1.0, 0.0, 1.0]


def test_sticky_actions_and_action_set_reach_the_emulator() -> None:
    env = EnvSpec("ALE/Pong-v5", atari=AtariConfig(repeat_action_probability=0.25,
                                                   full_action_space=True))()
    try:
        assert env.unwrapped.spec.kwargs["repeat_action_probability"] == 0.25
        assert env.action_space == gym.spaces.Discrete(18)
    finally:
        env.close()


@pytest.mark.parametrize("override, named", [
    ("env.atari.frame_stack=0", "frame_stack must be >= 1"),
    ("env.atari.repeat_action_probability=1.5", "repeat_action_probability must be in"),
    ("env.backend=jax", "backend must be 'gymnasium' or 'envpool'"),
    ("env.id=CartPole-v1", "CartPole-v1 is not one. Drop env.atari"),
])
def test_bad_atari_settings_are_refused_by_name(override: str, named: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=named):
        build(compose(["ppo_atari"], [override]))


def test_raw_atari_pixels_get_a_warning_naming_the_preset() -> None:
    with pytest.warns(UserWarning, match=r"ppo_atari.*env.id=ALE/Pong-v5"):
        build(compose([], ["agent.name=ppo", "strategy.name=on_policy", "env.id=ALE/Pong-v5"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(compose(["ppo_atari"], ["env.id=ALE/Pong-v5"]))


@pytest.mark.parametrize("game", ["ALE/Pong-v5", "ALE/SpaceInvaders-v5", "ALE/Breakout-v5"])
@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_atari_presets_are_chosen_for_every_game(game: str, agent: str) -> None:
    choice = choose_preset([f"agent.name={agent}", f"env.id={game}"])
    assert choice.files == [f"{agent}_atari"] and game in choice.note


@pytest.mark.slow
def test_an_atari_run_is_evaluated_loaded_and_exported(tmp_path: Path) -> None:
    run = tmp_path / "pong"
    command = [sys.executable, "-m", "rltrain.cli", "fit", "ppo_atari", "env.id=ALE/Pong-v5",
               "env.backend=envpool", "trainer.num_steps=1024", "trainer.eval_interval=null",
               "strategy.num_envs=4", "strategy.n_steps=64", "strategy.batch_size=128",
               f"trainer.run_dir={run}"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    evaluated = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "evaluate", str(run), "--episodes", "1",
         "trainer.eval_max_episode_steps=200"], capture_output=True, text=True, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "return" in evaluated.stdout
    policy = load_policy(run)
    env = EnvSpec("ALE/Pong-v5", atari=AtariConfig(), training=False)()
    obs, _ = env.reset(seed=0)
    action = policy(obs)
    assert env.action_space.contains(int(action))
    exported = tmp_path / "pong.pt2"
    subprocess.run([sys.executable, "-m", "rltrain.cli", "export", str(run), str(exported)],
                   check=True, capture_output=True, timeout=300)
    program = torch.export.load(str(exported)).module()
    batch = torch.as_tensor(obs[None])
    assert int(program(batch).reshape(-1)[0]) == int(action)
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_dqn_atari_replays_frames_stored_once_and_resumes(tmp_path: Path, backend: str) -> None:
    if backend == "envpool":
        pytest.importorskip("envpool")
    run = tmp_path / "dqn"
    common = [f"env.backend={backend}", "strategy.buffer_size=2000", "trainer.eval_interval=null",
              "strategy.warmup_steps=200", "trainer.logger=false",
              "trainer.enable_progress_bar=false"]
    first = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "fit", "dqn_atari", "env.id=ALE/Pong-v5",
         "trainer.num_steps=400", f"trainer.run_dir={run}", *common],
        capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    state = read_checkpoint(run / "checkpoints" / "last.pt")
    buffer = state["buffer"]
    assert buffer["frame_stack"] == 4 and buffer["steps"] == 400
    assert tuple(buffer["frames"].shape[1:]) == (1, 84, 84)  # frames, not stacks
    again = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "fit", "--resume", str(run),
         "trainer.num_steps=600"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    # the ALE's envs are saved as data (rltrain.envs.emulator) and go on; envpool's cannot be
    # saved: the episodes restart, with a word at the first checkpoint and at the resume
    if backend == "envpool":
        assert "have no state API" in first.stderr and "not in this checkpoint" in again.stderr
    else:
        assert len(state["runner"]["emulator"]) == 1
        assert "not in this checkpoint" not in again.stderr + first.stderr
    resumed = read_checkpoint(run / "checkpoints" / "last.pt")
    assert resumed["buffer"]["steps"] == 600 and resumed["progress"]["gradient_steps"] == 101


@pytest.mark.parametrize("game", ["ALE/Breakout-v5", "ALE/Pong-v5"])
def test_the_training_pipeline_plays_sb3s_atari_wrapper_frame_for_frame(game: str) -> None:
    """rltrain's pipeline and SB3's ``AtariWrapper`` from the same seed and actions: the same
    emulator state, rewards, life-loss ends and 84x84 frames at every step, through resets."""
    pytest.importorskip("stable_baselines3")
    from benchmarks.atari_pipelines import compare

    found = compare(game, seed=5, steps=600)
    assert found["same_ram"] == found["same_reward"] == found["same_end"] == 600
    assert found["largest_pixel_gap"] == 0


@pytest.mark.parametrize("game", ["ALE/Breakout-v5", "ALE/Pong-v5"])
def test_envpools_pipeline_makes_the_gymnasium_pipelines_frames(game: str) -> None:
    """Lined up (one no-op frame per reset, no FIRE reset, no episodic life), envpool's
    pipeline and rltrain's Gymnasium one give the same rewards, lives, ends and frames."""
    pytest.importorskip("envpool")
    from benchmarks.atari_pipelines import compare_envpool

    found = compare_envpool(game, seed=7, steps=600)
    assert found["same_reward"] == found["same_lives"] == found["same_end"] == 600
    assert found["largest_pixel_gap"] == 0

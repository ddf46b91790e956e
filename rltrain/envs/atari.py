"""The standard Atari pipeline (the ALE protocol of Machado et al. 2018 as SB3's ``AtariWrapper``
and CleanRL's ``ppo_atari.py`` apply it), as wrappers chosen by the ``env.atari`` config.

Per sub-env, innermost first:

1. the ALE env made with ``frameskip=1`` (the pipeline skips frames itself), the configured
   sticky-action probability and action set, its last action recorded (:class:`LastAction`,
   for an exact resume with sticky actions) and its episode capped at ``max_episode_frames``;
2. Gymnasium's ``AtariPreprocessing``: up to ``noop_max`` no-op actions after a reset, each
   action repeated ``frame_skip`` times with the last two frames max-pooled, the screen
   grayscaled and resized to ``screen_size`` (OpenCV's area interpolation);
3. :class:`EpisodicLife`: a lost life ends the episode for the learner (``terminated``), and
   the next reset continues the same game;
4. :class:`FireReset`: games that wait for FIRE get it after every reset;
5. :class:`SignReward` (training only): rewards clipped to their sign, -1, 0 or +1;
6. :class:`FrameStack`: the last ``frame_stack`` frames, channels first
   (``[frame_stack, 84, 84]`` ``uint8``), which a frame-stack replay stores once per frame.

Evaluation runs the same pipeline without 5, and with :class:`LifeLossContinue` around it
(:meth:`AtariPipeline.for_evaluation`): a lost life goes on with the game as the agent saw it in
training, so evaluation returns are whole games in the game's own score (as Stable-Baselines3's
``Monitor`` and CleanRL's ``RecordEpisodeStatistics`` report them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from typing_extensions import override

from rltrain.envs.wrapper_state import ARRAYS, PLAIN
from rltrain.settings.base import Settings, setting

#: Where :class:`FrameStack` declares its stack depth in an env's (and so a vector env's)
#: ``metadata``: what a replay reads to store each frame once.
FRAME_STACK_KEY = "frame_stack"


@dataclass
class AtariConfig(Settings):
    """The ``env.atari`` section: the standard Atari pipeline's settings (module docstring).

    The defaults are SB3's ``AtariWrapper`` with CleanRL's and RL-Zoo's protocol (sticky
    actions off, as in their published scores; Machado et al. 2018 recommend 0.25).

    Attributes:
        noop_max: Most no-op actions after a reset (a random number from 1 to it). Default 30.
        frame_skip: Emulator frames per action; the last two are max-pooled. Default 4.
        screen_size: Side of the square, resized grayscale frame in pixels. Default 84.
        episodic_life: A lost life ends the learner's episode (in training; evaluation goes on
            with the game as the agent saw it in training). Default True.
        life_noops: How the game goes on after a lost life (``episodic_life``): True, after a
            random number of no-op frames, 0 to ``noop_max`` - 1 (envpool's way), then one
            no-op action; False, after the one no-op action alone (SB3's ``EpisodicLifeEnv``;
            on envpool rltrain then starts lives and games itself, SB3's way:
            :mod:`rltrain.envs.envpool`). Default None: the training backend's way (True with
            ``env.backend=envpool``, else False), evaluations included.
        fire_reset: Press FIRE after each reset in games that need it. Default True.
        clip_rewards: Rewards clipped to their sign (training only). Default True.
        frame_stack: Frames per observation. Default 4.
        repeat_action_probability: Sticky actions: the probability that the emulator repeats
            the previous action. Default 0.0.
        full_action_space: All 18 actions, whatever the game uses. Default False.
        max_episode_frames: Emulator frames after which a game is truncated (the ALE's cap,
            Machado et al. 2018): ``max_episode_frames / frame_skip`` env steps. Default
            108,000 (27,000 env steps, 30 minutes of play).
    """

    noop_max: int = setting(30, ge=0)
    frame_skip: int = setting(4, ge=1, unit="frames")
    screen_size: int = setting(84, ge=8, unit="pixels")
    episodic_life: bool = True
    life_noops: bool | None = None
    fire_reset: bool = True
    clip_rewards: bool = True
    frame_stack: int = setting(4, ge=1, unit="frames")
    repeat_action_probability: float = setting(0.0, ge=0, le=1)
    full_action_space: bool = False
    max_episode_frames: int = 108_000

    @override
    def rules(self) -> list[tuple[bool, str]]:
        return [(self.max_episode_frames >= self.frame_skip,
                 f"max_episode_frames must be >= frame_skip ({self.frame_skip}); got "
                 f"{self.max_episode_frames}.")]

def is_atari_id(env_id: str | None) -> bool:
    """Whether ``env_id`` names an ALE game (``ALE/Pong-v5``, ``PongNoFrameskip-v4``)."""
    if not env_id:
        return False
    spec = gym.registry.get(env_id)
    point = getattr(spec, "entry_point", None)
    return env_id.startswith("ALE/") or (isinstance(point, str) and point.startswith("ale_py"))


@dataclass(frozen=True)
class AtariPipeline:
    """The pipeline as a picklable wrapper factory: called on the ALE env made with
    :meth:`make_kwargs`, it returns the wrapped env.

    Attributes:
        config: The pipeline's settings.
        training: Whether episodes end at a lost life and rewards are clipped (else whole
            games, unclipped: evaluation). Default True.
    """

    config: AtariConfig
    training: bool = True

    def make_kwargs(self) -> dict[str, Any]:
        """What the ALE env is made with under this pipeline."""
        return {"frameskip": 1, "max_num_frames_per_episode": self.config.max_episode_frames,
                "repeat_action_probability": self.config.repeat_action_probability,
                "full_action_space": self.config.full_action_space}

    def for_evaluation(self) -> AtariPipeline:
        """The same pipeline for evaluation: whole games, unclipped."""
        return replace(self, training=False)

    def __call__(self, env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
        c = self.config
        env = LastAction(env)
        env = gym.wrappers.TimeLimit(env, c.max_episode_frames)  # the ALE's cap, in frames
        env = gym.wrappers.AtariPreprocessing(
            env, noop_max=c.noop_max, frame_skip=c.frame_skip, screen_size=c.screen_size,
            grayscale_obs=True)
        if c.episodic_life:
            env = EpisodicLife(env, c.noop_max if c.life_noops else 0)
        if c.fire_reset and needs_fire(env):
            env = FireReset(env)
        if self.training and c.clip_rewards:
            env = SignReward(env)
        env = FrameStack(env, c.frame_stack)
        return env if self.training or not c.episodic_life else LifeLossContinue(env)


def needs_fire(env: gym.Env[Any, Any]) -> bool:
    """Whether the game waits for FIRE to start (its action 1 is FIRE)."""
    meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    return len(meanings) >= 3 and meanings[1] == "FIRE"


class LastAction(gym.Wrapper[Any, Any, Any, Any]):
    """Records the last action the ALE env was given (0, the no-op, after a reset, as the
    ALE's own reset sets it): with sticky actions the emulator may repeat it, and the ALE's
    saved state does not hold it, so :mod:`rltrain.envs.emulator` saves it from here."""

    saved_attributes: ClassVar[dict[str, str]] = {"last_action": PLAIN}

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.last_action = 0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.last_action = int(action)
        return self.env.step(action)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.last_action = 0
        return self.env.reset(**kwargs)


class EpisodicLife(gym.Wrapper[Any, Any, Any, Any]):
    """A lost life ends the learner's episode (``terminated``, Mnih et al. 2015); the reset
    that follows goes on with the same game instead of starting a new one, unless the game is
    over or the reset is seeded: a random number of no-op frames below ``noop_max`` (none when
    it is 0; drawn from the ALE env's generator, envpool's count), then one no-op step.

    Applied on ``AtariPreprocessing``, whose inner env steps one emulator frame at a time."""

    saved_attributes: ClassVar[dict[str, str]] = {"lives": PLAIN, "game_over": PLAIN}

    def __init__(self, env: gym.Env[Any, Any], noop_max: int = 0) -> None:
        super().__init__(env)
        self.noop_max = noop_max
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over or kwargs.get("seed") is not None:  # a seeded reset starts anew
            obs, info = self.env.reset(**kwargs)
        else:
            ended = any(self._noop_frame() for _ in range(self._noop_frames()))
            if not ended:
                obs, _, terminated, truncated, info = self.env.step(0)
                ended = terminated or truncated
            if ended:  # the game ended during the restart
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        return obs, info

    def _noop_frames(self) -> int:
        """How many single no-op frames this life's restart takes first (0 to noop_max - 1)."""
        if not self.noop_max:
            return 0
        return int(self.env.unwrapped.np_random.integers(self.noop_max))

    def _noop_frame(self) -> bool:
        """One emulator frame of no-op under ``AtariPreprocessing``; whether the game ended."""
        _, _, terminated, truncated, _ = self.env.env.step(0)  # type: ignore[attr-defined]
        return bool(terminated or truncated)


class LifeLossContinue(gym.Wrapper[Any, Any, Any, Any]):
    """Evaluation of an agent trained with :class:`EpisodicLife`: a lost life does not end the
    episode; the game goes on as the agent saw it in training (the reset that continues the
    game: a no-op, FIRE where the game needs it, the stack refilled), so the episode is the
    whole game and its return the game's score. Without it a greedy agent that never learnt
    to press FIRE would wait out the ALE's cap after its first lost life."""

    saved_attributes: ClassVar[dict[str, str]] = {}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and not truncated and self.env.unwrapped.ale.lives() > 0:  # type: ignore[attr-defined]
            obs, info = self.env.reset()
            terminated = False
        return obs, reward, terminated, truncated, info


class FireReset(gym.Wrapper[Any, Any, Any, Any]):
    """After a reset, FIRE then action 2 (SB3's ``FireResetEnv``): games such as Breakout
    wait for FIRE before play starts."""

    saved_attributes: ClassVar[dict[str, str]] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class SignReward(gym.RewardWrapper[Any, Any]):
    """Rewards clipped to their sign, -1, 0 or +1 (Mnih et al. 2015). Training only."""

    saved_attributes: ClassVar[dict[str, str]] = {}

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(float(reward)))


class FrameStack(gym.wrappers.FrameStackObservation[Any, Any]):
    """Gymnasium's ``FrameStackObservation`` (a reset fills the stack with its frame),
    declaring its depth in ``metadata["frame_stack"]`` so
    that a replay can store each frame once."""

    saved_attributes: ClassVar[dict[str, str]] = {"obs_queue": ARRAYS}

    def __init__(self, env: gym.Env[Any, Any], stack_size: int) -> None:
        super().__init__(env, stack_size)
        self.metadata = {**env.metadata, FRAME_STACK_KEY: stack_size}


def frame_stack_of(env: gym.Env[Any, Any] | gym.vector.VectorEnv[Any, Any, Any]) -> int:
    """Frames per observation an env declares it stacks (``metadata["frame_stack"]``, set by
    :class:`FrameStack` and the envpool backend); 1 when it declares none (or nonsense)."""
    declared = env.metadata.get(FRAME_STACK_KEY, 1)
    return declared if isinstance(declared, int) and declared >= 1 else 1


def warn_raw_pixels(env_id: str, agent: str | None) -> None:
    """Warn that ``env_id`` (an ALE game) trains on raw frames without the pipeline, naming the
    preset that applies it."""
    preset = f"{agent}_atari" if agent in ("ppo", "dqn") else "ppo_atari or dqn_atari"
    warnings.warn(
        f"{env_id} is an Atari game, made here without the standard Atari pipeline: the agent "
        "sees raw 210x160 RGB frames, one at a time, with unclipped rewards (slow and hard to "
        f"learn from). Start from the preset ({preset}: `rltrain fit {preset.split()[0]} "
        f"env.id={env_id}`) or add the pipeline with env.atari={{}} (docs/atari.md).",
        stacklevel=2)

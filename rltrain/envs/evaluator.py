"""Greedy evaluation episodes on a separate, seeded vector environment."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv

from rltrain.envs.make import EnvInit, env_factory, env_name, evaluation_env, make_vector_env
from rltrain.envs.runner import Policy, Runner
from rltrain.envs.video import EpisodeRecorder, find_recorder, recorded_env
from rltrain.observe.events import EvaluationEnd, EvaluationStart, EvaluationStep
from rltrain.observe.processor import EventProcessor
from rltrain.runtime.cadence import is_multiple
from rltrain.runtime.interrupt import Interrupter
from rltrain.runtime.watchdog import watch_env_calls
from rltrain.settings.base import Bounds, check_setting
from rltrain.types import Progress

#: Evaluations between recorded ones (``TrainerConfig.video_interval``).
VIDEO_INTERVAL = Bounds(ge=1, unit="evaluations", none="to record none")


@dataclass
class EvaluationSettings:
    """When and how long a strategy evaluates its greedy policy.

    Attributes:
        interval: Env steps between evaluations (and one at the end); None never evaluates.
            Default 10,000.
        episodes: Greedy episodes per evaluation. Default 10.
        max_episode_steps: Env steps after which an evaluation episode is truncated; None:
            no cap. Default 27,000 (``TrainerConfig.eval_max_episode_steps``).
        video_interval: Record videos of every N-th evaluation into ``video_dir``
            (``TrainerConfig.video_interval``); None: none. Default None.
        video_dir: Where the videos go (a Trainer's ``fit``: ``run_dir/videos``). Default None.
    """

    interval: int | None = 10_000
    episodes: int = 10
    max_episode_steps: int | None = 27_000
    video_interval: int | None = None
    video_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.interval is not None and self.interval < 1:
            raise ValueError(f"eval_interval must be >= 1 env step, or None to never evaluate; "
                             f"got {self.interval}.")
        if self.episodes < 1:
            raise ValueError(f"eval_episodes must be >= 1; got {self.episodes}.")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(f"eval_max_episode_steps must be >= 1 env step, or None for no "
                             f"cap; got {self.max_episode_steps}.")



class Evaluator:
    """Runs ``episodes`` deterministic episodes, several sub-envs at a time.

    Every evaluation resets the sub-envs with the same ``seed``, so two evaluations of the same
    weights give the same returns (and a saved policy can be re-evaluated to the same number).
    Sub-env ``i`` runs ``(episodes + i) // num_envs`` episodes, fixed in advance, so short
    episodes are not over-represented (as Stable-Baselines3's ``evaluate_policy``). An
    episode that reaches ``max_episode_steps`` is truncated there (a ``TimeLimit`` around each
    evaluation sub-env), so an environment that never terminates cannot hang an evaluation.
    An Atari pipeline's training-only steps are off (whole games in the game's score) and
    envpool's envs are evaluated as Gymnasium's (:func:`~rltrain.envs.make.evaluation_env`).

    Args:
        env: The environment to evaluate on.
        episodes: Episodes per evaluation (>= 1).
        seed: Reset seed of every evaluation.
        device: Where the policy acts.
        num_envs: Sub-envs stepped together. Default: ``min(episodes, 10)``.
        max_episode_steps: Env steps after which an episode is truncated; None: no cap.
            Default None (the Trainer passes its ``eval_max_episode_steps``).
        video_dir: Where videos of sub-env 0's episodes go (:mod:`rltrain.envs.video`; sub-env 0
            is made with ``render_mode="rgb_array"``); None records none. Default None.
        video_interval: Record every ``video_interval``-th evaluation of this evaluator (the
            N-th, 2N-th, ...; 1: every one), as ``eval-<env_steps>-episode-<k>.mp4``.
            Default 1.
        step_timeout: Seconds each evaluation step or reset may take (the Trainer's
            ``env_step_timeout``; see :class:`~rltrain.envs.runner.Runner`); None: no limit.
            Default None.
    """

    def __init__(self, env: EnvInit, *, episodes: int, seed: int, device: torch.device,
                 num_envs: int | None = None, max_episode_steps: int | None = None,
                 video_dir: str | Path | None = None, video_interval: int = 1,
                 step_timeout: float | None = None) -> None:
        if episodes < 1:
            raise ValueError(f"Evaluation needs >= 1 episode; got eval_episodes={episodes}.")
        self.episodes = episodes
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        check_setting("video_interval", video_interval, VIDEO_INTERVAL)
        num_envs = min(episodes, 10) if num_envs is None else num_envs
        env = evaluation_env(env)
        name = env_name(env)
        limit = (None if max_episode_steps is None
                 else functools.partial(_time_limited, max_episode_steps=max_episode_steps))
        first = None if video_dir is None else recorded_env(env, video_dir, limit)
        if limit is not None:
            env = functools.partial(limit, env_factory(env))
        self.envs = make_vector_env(env, num_envs=num_envs, seed=seed, first_env=first)
        self.recorder: EpisodeRecorder | None = None
        if first is not None:
            assert isinstance(self.envs, SyncVectorEnv)
            self.recorder = find_recorder(self.envs.envs[0])
        self.video_interval, self.evaluations = video_interval, 0
        self.runner = Runner(self.envs, device=device, progress=Progress(),
                             step_timeout=step_timeout, env_name=name)
        self.targets = np.array([(episodes + i) // num_envs for i in range(num_envs)])

    def run(self, policy: Policy, *, env_steps: int, events: EventProcessor,
            interrupter: Interrupter | None = None) -> EvaluationEnd:
        """Evaluate ``policy``, emitting EvaluationStart and EvaluationEnd; stops on request.
        Its env calls are watched (:func:`~rltrain.runtime.watchdog.watch_env_calls`): in the main
        thread, one past ``step_timeout`` is interrupted."""
        with watch_env_calls():
            return self._run(policy, env_steps=env_steps, events=events, interrupter=interrupter)

    def _run(self, policy: Policy, *, env_steps: int, events: EventProcessor,
             interrupter: Interrupter | None) -> EvaluationEnd:
        events.emit(EvaluationStart(env_steps=env_steps, episodes=self.episodes,
                                    max_episode_steps=self.max_episode_steps))
        self.evaluations += 1
        if self.recorder is not None:
            due = is_multiple(self.evaluations, self.video_interval)
            self.recorder.plan(f"eval-{env_steps}", int(self.targets[0]) if due else 0)
        runner = self.runner
        runner.reset(seed=self.seed, policy=policy)
        start = runner.progress.env_steps
        counts = np.zeros_like(self.targets)
        returns: list[float] = []
        lengths: list[int] = []
        complete = True
        while (counts < self.targets).any():
            if interrupter is not None and interrupter.stop_requested():
                complete = False
                break
            _, episodes = runner.step(runner.act(policy, deterministic=True), policy)
            for episode in episodes:
                if counts[episode.env_index] < self.targets[episode.env_index]:
                    counts[episode.env_index] += 1
                    returns.append(episode.episode_return)
                    lengths.append(episode.episode_length)
            events.emit(EvaluationStep(env_steps=env_steps,
                                       eval_env_steps=runner.progress.env_steps - start,
                                       episodes_done=len(returns), episodes=self.episodes))
        result = EvaluationEnd(env_steps=env_steps, returns=tuple(returns),
                               lengths=tuple(lengths), complete=complete)
        events.emit(result)
        return result

    def close(self) -> None:
        """Close the evaluation environments."""
        self.envs.close()


def video_options(settings: EvaluationSettings) -> dict[str, Any]:
    """The :class:`Evaluator`'s video arguments from a run's evaluation settings (none when it
    records no video)."""
    if settings.video_interval is None or settings.video_dir is None:
        return {}
    return {"video_dir": settings.video_dir, "video_interval": settings.video_interval}


def _time_limited(factory: Callable[[], gym.Env[Any, Any]],
                  max_episode_steps: int) -> gym.Env[Any, Any]:
    """One environment from ``factory``, truncated after ``max_episode_steps`` env steps."""
    return gym.wrappers.TimeLimit(factory(), max_episode_steps=max_episode_steps)

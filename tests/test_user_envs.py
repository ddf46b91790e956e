"""Environments a user brings: without a time limit, malformed, or unpicklable (issue 15).

Real Gymnasium environments of the user's own kind (classes defined here, not registered) and
real fits: what each gets warned about or refused with, and that a fit on them ends.
"""

from __future__ import annotations

import io
import threading
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import QUIET, dqn, small

from rltrain import DQN, Trainer
from rltrain.env_checks import time_limit
from rltrain.events import EvaluationEnd, EvaluationStart, EvaluationStep, EventRecorder
from rltrain.events.renderers import ConsoleRenderer, TqdmRenderer
from rltrain.strategies import RLResult


class Endless(gym.Env[np.ndarray, int]):
    """Never terminates, and has no time limit: each episode lasts forever."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.full(2, 0.5 * action, np.float32), 1.0, False, False, {}


def endless_with_a_limit() -> gym.Env[np.ndarray, int]:
    return gym.wrappers.TimeLimit(Endless(), max_episode_steps=30)


def fit_or_stop(trainer: Trainer, env: Any, agent: DQN | None = None,
                seconds: float = 120.0) -> RLResult:
    """``trainer.fit(env, agent)`` in a thread; a fit still running after ``seconds`` is
    stopped (through the interrupter, which evaluations check too) and the test fails."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(trainer.fit(env, agent if agent is not None else dqn()))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(seconds)
    hung = thread.is_alive()
    if hung:
        trainer.interrupter.stop("the test's time is up")
        thread.join()
    assert not hung, f"fit was still running after {seconds} s"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    result = outcome[0]
    assert isinstance(result, RLResult)
    return result


# --- no time limit (item 1) --------------------------------------------------------------------


def test_time_limit_is_found_on_wrappers_specs_and_the_envs_own_limit() -> None:
    assert time_limit(gym.make("CartPole-v1")) == 500
    assert time_limit(endless_with_a_limit()) == 30
    assert time_limit(gym.wrappers.FlattenObservation(endless_with_a_limit())) == 30
    assert time_limit(Endless()) is None
    own = Endless()
    own.max_steps = 40  # type: ignore[attr-defined]  # an env enforcing its own (MiniGrid's)
    assert time_limit(own) == 40


def test_an_env_without_time_limit_is_warned_about_and_its_evaluation_is_capped(
        tmp_path: Path) -> None:
    recorder = EventRecorder()
    trainer = Trainer(num_steps=100, strategy=small(), eval_interval=100, eval_episodes=2,
                      eval_max_episode_steps=300, run_dir=tmp_path, callbacks=[recorder],
                      **QUIET)
    agent = dqn()
    with pytest.warns(UserWarning, match=r"The environment 'Endless' has no time limit .*"
                      r"eval_max_episode_steps \(300 env steps\).*gymnasium\.wrappers\."
                      r"TimeLimit\(env, max_episode_steps=\.\.\.\)"):
        result = fit_or_stop(trainer, Endless, agent)
    assert result.summary.env_steps == 100
    (end,) = recorder.of(EvaluationEnd)
    assert end.complete and end.lengths == (300, 300) and end.returns == (300.0, 300.0)
    assert recorder.of(EvaluationStart)[0].max_episode_steps == 300
    # Trainer.evaluate is capped the same way.
    assert trainer.evaluate(Endless, agent, episodes=1)["eval/length_mean"] == 300


def test_the_default_evaluation_cap_ends_an_evaluation_that_would_never_end(
        tmp_path: Path) -> None:
    # It used to run forever: nothing ended the first evaluation of an env that never ends.
    recorder = EventRecorder()
    trainer = Trainer(num_steps=50, strategy=small(), eval_interval=50, eval_episodes=1,
                      run_dir=tmp_path, callbacks=[recorder], **QUIET)
    assert trainer.eval_max_episode_steps == 27_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fit_or_stop(trainer, Endless)
    assert recorder.of(EvaluationEnd)[0].lengths == (27_000,)


def test_an_env_with_a_time_limit_gets_no_time_limit_warning(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=60, strategy=small(), eval_interval=None, run_dir=tmp_path,
                      **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer.fit(endless_with_a_limit, dqn())
        trainer.run_dir = tmp_path / "cartpole"
        trainer.fit("CartPole-v1", dqn())


def test_a_long_evaluation_shows_its_progress_in_the_console_and_the_bar(
        tmp_path: Path) -> None:
    console, bar, recorder = io.StringIO(), io.StringIO(), EventRecorder()
    trainer = Trainer(num_steps=60, strategy=small(), eval_interval=60, eval_episodes=2,
                      eval_max_episode_steps=200, run_dir=tmp_path, **QUIET,
                      callbacks=[recorder, ConsoleRenderer(file=console, interval_seconds=0),
                                 TqdmRenderer(file=bar, refresh_seconds=0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fit_or_stop(trainer, Endless)
    steps = recorder.of(EvaluationStep)
    assert len(steps) == 200  # one per evaluation vector step (2 sub-envs)
    assert [s.eval_env_steps for s in steps[:3]] == [2, 4, 6]
    assert (steps[-1].episodes_done, steps[-1].episodes) == (2, 2)
    lines = console.getvalue().splitlines()
    progress = [line for line in lines if line.startswith("evaluating at 60 env steps: ")]
    assert progress[0] == "evaluating at 60 env steps: 0/2 episodes done, 2 evaluation env steps"
    assert progress[-1] == ("evaluating at 60 env steps: 2/2 episodes done, 400 evaluation env "
                            "steps")
    assert any(line.startswith("evaluation at 60 env steps: return 200.00")
               and line.endswith("(2 cut at eval_max_episode_steps=200)") for line in lines)
    frames = bar.getvalue()
    assert "evaluating 0/2 episodes" in frames and "evaluating 2/2 episodes" in frames

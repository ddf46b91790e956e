"""Environments a user brings: without a time limit, malformed, or unpicklable (issue 15).

Real Gymnasium environments of the user's own kind (classes defined here, not registered) and
real fits: what each gets warned about or refused with, and that a fit on them ends.
"""

from __future__ import annotations

import io
import json
import threading
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import QUIET, dqn, small
from typing_extensions import override

from rltrain import DQN, Subscriber, Trainer
from rltrain.envs.checks import check_env, time_limit
from rltrain.envs.errors import EnvError
from rltrain.envs.make import EnvSpec
from rltrain.observe import (
    EvaluationEnd,
    EvaluationStart,
    EvaluationStep,
    EventRecorder,
    Metrics,
    Start,
)
from rltrain.observe.renderers import ConsoleRenderer, TqdmRenderer
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
                      r"TimeLimit\(env, max_episode_steps=N\)"):
        result = fit_or_stop(trainer, Endless, agent)
    assert result.summary.env_steps == 100
    (end,) = recorder.of(EvaluationEnd)
    assert end.complete and end.lengths == (300, 300) and end.returns == (300.0, 300.0)
    assert recorder.of(EvaluationStart)[0].max_episode_steps == 300
    # Trainer.evaluate is capped the same way.
    assert trainer.evaluate(Endless, agent, episodes=1)["eval/length_mean"] == 300


@pytest.mark.slow  # 27,000 evaluation steps; an explicit cap is checked above
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


# --- malformed environments, checked before anything is written (item 4) ------------------------


class Corridor(gym.Env[np.ndarray, int]):
    """A well-formed environment of a user's own: walk right along 5 cells, 20 steps at most
    (its own limit, kept as ``max_steps`` as MiniGrid keeps its own)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
    action_space = gym.spaces.Discrete(2)
    max_steps = 20

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.cell, self.t = int(self.np_random.integers(0, 2)), 0
        return self.observe(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.cell, self.t = max(0, min(4, self.cell + (1 if action else -1))), self.t + 1
        return (self.observe(), float(self.cell == 4), self.cell == 4,
                self.t >= self.max_steps, {})

    def observe(self) -> np.ndarray:
        return np.eye(5, dtype=np.float32)[self.cell]


class FloatPixels(Corridor):
    """Declares uint8 images and returns floats in [0, 1]: stored as uint8, they become 0."""

    observation_space = gym.spaces.Box(0, 255, (2, 5), np.uint8)

    def observe(self) -> np.ndarray:
        return np.stack([super().observe()] * 2) * 0.5


class OutOfBounds(Corridor):
    def observe(self) -> np.ndarray:
        return super().observe() * 3.0


class MissingKey(Corridor):
    observation_space = gym.spaces.Dict({"cell": Corridor.observation_space,
                                         "time": gym.spaces.Box(0.0, 20.0, (1,), np.float32)})

    def observe(self) -> Any:
        return {"cell": super().observe()}


class TextReward(Corridor):
    def step(self, action: int) -> Any:
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, str(reward), terminated, truncated, info


def checked(env: gym.Env[Any, Any]) -> list[str]:
    """The warnings ``check_env`` gives ``env`` (errors propagate)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, type(env.unwrapped).__name__, eval_max_episode_steps=27_000)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("make", [
    Corridor, lambda: gym.make("CartPole-v1"), lambda: gym.make("Pendulum-v1"),
    lambda: gym.make("FrozenLake-v1"), lambda: gym.make("Taxi-v4"),
    lambda: gym.make("MountainCar-v0"),
    lambda: gym.wrappers.FlattenObservation(gym.make("CartPole-v1"))],
    ids=["corridor", "cartpole", "pendulum", "frozenlake", "taxi", "mountaincar",
         "flattened"])
def test_well_formed_environments_pass_every_check_silently(make: Any) -> None:
    assert checked(make()) == []


def test_floats_cast_into_an_integer_space_and_bounds_are_warned_about() -> None:
    (cast,) = checked(FloatPixels())
    assert cast.startswith("The environment 'FloatPixels' fails the check of observation "
                           "dtypes: reset() returned a float32 observation for Box(0, 255, "
                           "(2, 5), uint8), so it is cast to uint8 (e.g. 0.5 becomes 0)")
    (bounds,) = checked(OutOfBounds())
    assert "fails the check of observation bounds: reset() returned an observation outside" \
        in bounds


@pytest.mark.parametrize(("env", "message"), [
    (MissingKey, r"'MissingKey' fails the check of observations: reset\(\) returned an "
                 r"observation of \['cell'\], but the observation space is a Dict of "
                 r"\['cell', 'time'\]\. Return a dict with exactly the space's keys"),
    (TextReward, r"'TextReward' fails the check of step's reward: step\(\) returned a reward "
                 r"of type str, not a number\. Return a float"),
])
def test_malformed_observations_and_rewards_are_refused(env: type[gym.Env[Any, Any]],
                                                       message: str) -> None:
    with pytest.raises(EnvError, match=message):
        check_env(env(), env.__name__, eval_max_episode_steps=None)


class FailsOnStart(Subscriber):
    """A callback that raises when training starts: the run fails before its first save."""

    @override
    def on_start(self, event: Start, metrics: Metrics) -> None:
        raise RuntimeError("a callback's bug")


def test_a_run_that_failed_before_its_first_save_leaves_no_run_in_its_directory(
        tmp_path: Path) -> None:
    # It used to be refused as "already holds a run ... Resume it", and resuming it failed:
    # "No intact last checkpoint".
    run_dir = tmp_path / "run"
    failing = Trainer(num_steps=100, strategy=small(), eval_interval=None, run_dir=run_dir,
                      logger=False, enable_progress_bar=False, enable_console=False,
                      callbacks=[FailsOnStart()])
    with pytest.raises(RuntimeError, match="a callback's bug"):
        failing.fit(Corridor, dqn())
    left = sorted(p.name for p in run_dir.iterdir())
    assert "metrics.jsonl" in left and "config.yaml" in left and "summary.json" not in left
    assert not list((run_dir / "checkpoints").glob("*.pt"))
    (run_dir / "notes.txt").write_text("mine")
    trainer = Trainer(num_steps=100, strategy=small(), eval_interval=None, run_dir=run_dir,
                      logger=False, enable_progress_bar=False, enable_console=False)
    assert trainer.fit(Corridor, dqn()).summary.env_steps == 100
    assert (run_dir / "notes.txt").read_text() == "mine"  # not rltrain's: never touched
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rows].count("start") == 1  # the failed run's rows are gone
    # A directory holding a checkpoint is a run, and still refused.
    with pytest.raises(FileExistsError, match="already holds a run"):
        trainer.fit(Corridor, dqn())


# --- environments that cannot be saved (item 7) ----------------------------------------------


def test_the_first_save_warns_once_naming_the_wrapper_that_cannot_be_pickled(
        tmp_path: Path) -> None:
    # Gymnasium 1.4's FlattenObservation holds a lambda: the envs cannot be pickled, so exact
    # resume is lost. That used to be said only at resume, without the cause.
    env = EnvSpec("CartPole-v1", wrappers=(gym.wrappers.FlattenObservation,))
    trainer = Trainer(num_steps=300, strategy=small(), eval_interval=None, run_dir=tmp_path,
                      checkpoint_interval=100, **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(env, dqn())
    unsaved = [str(w.message) for w in caught if "cannot be saved" in str(w.message)]
    assert len(unsaved) == 1, unsaved  # three saves, one warning
    assert unsaved[0].startswith(
        "The environments cannot be saved in this run's checkpoints: FlattenObservation "
        "(wrapping CartPoleEnv) cannot be pickled (AttributeError: Can't pickle local object "
        "'FlattenObservation.__init__.<locals>.<lambda>')")
    assert "the resumed run is not an exact continuation" in unsaved[0]
    assert "replace FlattenObservation with a picklable equivalent" in unsaved[0]


def test_environments_that_pickle_are_saved_without_a_warning(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=200, strategy=small(), eval_interval=None, run_dir=tmp_path,
                      checkpoint_interval=100, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer.fit(EnvSpec("CartPole-v1", wrappers=(gym.wrappers.RecordEpisodeStatistics,)),
                    dqn())

"""Shared test settings: one torch thread (small MLPs, 2-core CI), ``QUIET``, and helpers for
the exact-resume tests."""

import importlib.util
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.observe import EnvStep, EpisodeEnd, EventRecorder, TrainStep

torch.set_num_threads(1)

#: The repository, and its tests folder (helpers such as distributed_worker.py, doc_snippets/).
ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: ``Trainer(**QUIET)``: every built-in output off (no TensorBoard, progress bar, console lines
#: or metrics.jsonl); checkpoints and summary.json are still written.
QUIET: dict[str, Any] = dict(logger=False, enable_progress_bar=False, enable_console=False,
                             enable_metrics_file=False)


def small(**overrides: Any) -> OffPolicyStrategy:
    """A tiny off-policy strategy: 50 warm-up steps, then 2 gradient steps on batches of 16
    every 25 env steps, from a 1,000-transition buffer."""
    settings: dict[str, Any] = dict(warmup_steps=50, train_interval=25, train_steps=2,
                                    batch_size=16, buffer_size=1000)
    settings.update(overrides)
    return OffPolicyStrategy(OffPolicyConfig(**settings))


def small_strategy(**overrides: Any) -> OffPolicyStrategy:
    """:func:`small`, learning a little more: 100 warm-up steps, then 4 gradient steps on
    batches of 32 every 50 env steps, from a 5,000-transition buffer, seed 0 (the Trainer's and
    the renderers' tests; evaluation settings go to the Trainer)."""
    return small(**{"warmup_steps": 100, "train_interval": 50, "train_steps": 4,
                    "batch_size": 32, "buffer_size": 5000, "seed": 0, **overrides})


def rltrain(*args: str | Path, cwd: Path, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rltrain.cli`` (what the ``rltrain`` script runs) in ``cwd``, its output
    captured; ``env`` adds to (or replaces) the environment variables."""
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "rltrain.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=environ,
                          check=False)


def trainer(run_dir: Path, num_steps: int = 200, **kwargs: Any) -> Trainer:
    """A quiet Trainer of the ``small()`` strategy that never evaluates (unless told)."""
    kwargs.setdefault("eval_interval", None)
    return Trainer(num_steps=num_steps, strategy=kwargs.pop("strategy", small()),
                   run_dir=run_dir, **QUIET, **kwargs)


#: RL-Zoo's CartPole-v1 DQN settings (``dqn_cartpole``) but the network: a double-Q target copied
#: every 128 gradient steps and an exploration schedule that does not depend on the run's length
#: (a run resumed for more steps keeps its schedule).
DQN_SETTINGS = {"lr": 2.3e-3, "double_q": True, "target_update_interval": 128,
                "epsilon_end": 0.04, "exploration_steps": 8_000}


def dqn() -> DQN:
    """A DQN with one hidden layer of 16 units (:data:`DQN_SETTINGS`)."""
    return DQN(DQNConfig(hidden_sizes=[16], **DQN_SETTINGS))


class NanLossDQN(DQN):
    """A DQN whose loss is NaN from the 3rd gradient step on."""

    def training_step(self, batch: Any, optim: Any) -> Any:
        if self.progress.gradient_steps >= 2:
            loss = self.q_network(batch.observations).sum() * torch.tensor(float("nan"))
            optim.step("q", loss)
            return {"loss": loss.detach()}
        return super().training_step(batch, optim)


def assert_same_tensors(a: Any, b: Any, where: str = "", skip: Collection[str] = ()) -> None:
    """Assert two checkpoint parts are equal, tensors bit for bit, naming the first difference;
    dict keys in ``skip`` are left out."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            if key not in skip:
                assert_same_tensors(a[key], b[key], f"{where}/{key}", skip)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]", skip)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def stepped_through(env: gym.Env[Any, Any], actions: Any, seed: int) -> gym.Env[Any, Any]:
    """``env`` reset with ``seed`` and stepped with each of ``actions``, reset again whenever
    an episode ends (the state a saved-state test saves or restores into)."""
    env.reset(seed=seed)
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return env


def env_snapshot(data: torch.Tensor | list[torch.Tensor]) -> list[Any]:
    """Every attribute of every wrapper layer of the pickled sub-envs (a sync vector env's,
    pickled together, or an async one's, one pickle each), generators by state.

    (The pickled bytes themselves may differ for equal environments: pickle's memo order.)
    """
    snapshot = []
    envs = ([pickle.loads(t.numpy().tobytes()) for t in data] if isinstance(data, list)
            else pickle.loads(data.numpy().tobytes()))
    for env in envs:
        layer = env
        while layer is not None:
            for key, value in sorted(vars(layer).items()):
                if key == "env":
                    continue
                if isinstance(value, np.random.Generator):
                    value = value.bit_generator.state
                snapshot.append((type(layer).__name__, key, repr(value)))
            layer = getattr(layer, "env", None)
    return snapshot


def straight_and_resumed(fit: Callable[..., object], factory: pytest.TempPathFactory,
                         num_steps: int) -> tuple[Path, Path]:
    """Two run directories: ``num_steps`` trained straight, and half of them then resumed from
    ``last`` to ``num_steps``. ``fit(run_dir, num_steps, ckpt_path=None)`` trains one."""
    straight, split = factory.mktemp("straight"), factory.mktemp("split")
    fit(straight, num_steps)
    fit(split, num_steps // 2)
    fit(split, num_steps, ckpt_path="last")
    return straight, split


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (registered under ``name``: dataclasses look their
    module up by name), for the tests that run a script's short version."""
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class ShapeShifter(gym.Env[np.ndarray, int]):
    """Observations of shape (3,) for 44 steps, then of shape (5,)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)  # type: ignore[assignment]

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        return np.zeros(3 if self.steps < 45 else 5, np.float32), 1.0, False, False, {}


def shape_shifter() -> gym.Env[np.ndarray, int]:
    return gym.wrappers.TimeLimit(ShapeShifter(), 20)


class StopAtGradientStep(EventRecorder):
    """Requests a stop after gradient step ``step`` (in the middle of a training round) of
    the ``trainer`` it is given."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step
        self.trainer: Trainer | None = None

    def on_train_step(self, event: TrainStep, metrics: Any) -> None:
        if event.gradient_steps == self.step and self.trainer is not None:
            self.trainer.interrupter.stop("test")


class StopAtEnvStep(StopAtGradientStep):
    """Requests a stop after the vector step that reaches env step ``step`` (in the middle of
    a rollout) of the ``trainer`` it is given."""

    def on_env_step(self, event: EnvStep, metrics: Any) -> None:
        if event.env_steps == self.step and self.trainer is not None:
            self.trainer.interrupter.stop("test")

    def on_train_step(self, event: TrainStep, metrics: Any) -> None:
        pass


def fit_stopped(env: Any, agent: Any, strategy: Any, run_dir: Path, num_steps: int, *,
                stop: StopAtGradientStep | None = None, ckpt_path: str | None = None,
                **trainer_kwargs: Any) -> Any:
    """``Trainer(...).fit(env, agent)``, quiet, stopped where ``stop`` says (None: not
    stopped); returns the fit's result."""
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      callbacks=[stop] if stop is not None else [],
                      **{**QUIET, **trainer_kwargs})
    if stop is not None:
        stop.trainer = trainer
    return trainer.fit(env, agent, ckpt_path=ckpt_path)


def episode(env_steps: int, ret: float, length: int) -> EpisodeEnd:
    """A training episode of sub-env 0 that ended at ``env_steps`` (terminated)."""
    return EpisodeEnd(env_steps=env_steps, env_index=0, episode_return=ret,
                      episode_length=length, terminated=True)

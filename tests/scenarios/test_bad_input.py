"""Every bad input gets an error that names the problem and the fix, before training if it can.

The cases here are the table in docs/bad_input.md; ``test_the_docs_table_lists_every_case``
keeps the two in step (regenerate the table with ``python scripts/bad_input_table.py``).
A bad input found before training leaves every file as it was
(``test_a_bad_input_found_before_training_writes_nothing``): the early-check promise, tested.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import re
import shlex
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import DQN_SETTINGS, QUIET, ROOT, NanLossDQN, dqn, small, trainer
from omegaconf import DictConfig

from rltrain import (
    DQN,
    PPO,
    SAC,
    DQNConfig,
    OffPolicyConfig,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    Trainer,
)
from rltrain.agents.base import SpaceError
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.checkpoint import Checkpointer, ManifestError, atomic_save, load_agent, read_checkpoint
from rltrain.cli.launchers import SlurmLauncher
from rltrain.cli.plot import read_run
from rltrain.cli.seeds import resume_group
from rltrain.cli.stored_run import resumed_config
from rltrain.cli.study_storage import storage_url
from rltrain.cli.tune_record import read_record as _read_study
from rltrain.cli.tune_space import Dimension, check_params
from rltrain.config.files import ConfigError, literal_config
from rltrain.config.schema import compose
from rltrain.envs.errors import EnvError
from rltrain.envs.make import EnvSpec
from rltrain.errors import TrainingError
from rltrain.inference import load_policy
from rltrain.inference.policy import resolve as resolve_checkpoint
from rltrain.settings.targets import Trust
from rltrain.trainer import RunDirectoryLocked, build

DOCS = ROOT / "docs" / "bad_input.md"


class Poisoned(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose observation (or reward) turns NaN at a given step."""

    def __init__(self, env: gym.Env[Any, Any], at: int, what: str) -> None:
        super().__init__(env)
        self.at, self.what, self.steps = at, what, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.what == "observation":
                obs = np.full_like(obs, np.nan)
            else:
                reward = math.inf
        return obs, reward, terminated, truncated, info


def poisoned(what: str) -> Callable[[], gym.Env[Any, Any]]:
    def make() -> gym.Env[Any, Any]:
        return Poisoned(gym.make("CartPole-v1"), at=30, what=what)
    return make


class _UserEnv(gym.Env[Any, Any]):
    """A user's own environment, done right: 3 floats, 2 actions, episodes of 20 steps (its
    own limit, ``max_steps``); the malformed ones below change one thing each."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)
    max_steps = 20

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self.observe(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return self.observe(), 1.0, False, self.t >= self.max_steps, {}

    def observe(self) -> Any:
        return self.np_random.uniform(-1.0, 1.0, 3).astype(np.float32)


class WrongShape(_UserEnv):
    """Declares 3 floats, returns 4 (numpy's "Output array is the wrong shape" in training)."""

    def observe(self) -> Any:
        return np.zeros(4, np.float32)


class OldGymStep(_UserEnv):
    """The old Gym API's step: (observation, reward, done, info)."""

    def step(self, action: Any) -> Any:  # type: ignore[override]
        self.t += 1
        return self.observe(), 1.0, self.t >= 20, {}


class OldGymReset(_UserEnv):
    """The old Gym API's reset: no seed, the observation alone."""

    def reset(self) -> Any:  # type: ignore[override]
        self.t = 0
        return self.observe()


class ObservationAlone(_UserEnv):
    """Takes the seed but returns the observation without its info."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return super().reset(seed=seed)[0]


class IgnoresItsSeed(_UserEnv):
    """Draws its start from NumPy's global generator, whatever the seed."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return np.random.uniform(-1.0, 1.0, 3).astype(np.float32), {}


class Float64Box(_UserEnv):
    """Declares (and returns) float64 observations."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float64)

    def observe(self) -> Any:
        return self.np_random.uniform(-1.0, 1.0, 3)


def not_an_env() -> Any:
    return "CartPole-v1"


def fit_user_env(run_dir: Path, env: Any) -> object:
    return trainer(run_dir).fit(env, dqn())


def fitted(run_dir: Path, **kwargs: Any) -> Path:
    trainer(run_dir, **kwargs).fit("CartPole-v1", dqn())
    return run_dir


def resumed(run_dir: Path, ckpt_path: str | Path = "last") -> object:
    """Continue the ``fitted`` run in ``run_dir`` to 400 env steps from ``ckpt_path``."""
    return trainer(run_dir, 400).fit("CartPole-v1", dqn(), ckpt_path=ckpt_path)


def strict(action: Callable[[], object]) -> object:
    """Run ``action`` with UserWarnings raised as errors: the warning is what the case checks."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        return action()


#: A whole run from overrides: tiny, quiet, never evaluating (``configured`` adds run_dir).
TINY = ["trainer.num_steps=200", "trainer.eval_interval=null", "trainer.logger=false",
        "trainer.enable_progress_bar=false", "trainer.enable_console=false",
        "trainer.enable_metrics_file=false", "strategy.warmup_steps=50",
        "strategy.train_interval=25", "strategy.train_steps=2", "strategy.batch_size=16",
        "strategy.buffer_size=1000", "agent.hidden_sizes=[16]"]


def configured(run_dir: Path, *overrides: str) -> DictConfig:
    """``compose`` of ``TINY`` and ``overrides``, with ``run_dir`` as the run directory."""
    config = compose([], [*TINY, *overrides])
    config.trainer.run_dir = str(run_dir)
    return config


#: An environment whose package is not installed: LunarLander needs Box2D; where Box2D is
#: installed, an id registered here whose entry point's module does not exist.
MISSING_PACKAGE_ENV = "LunarLander-v3"
if importlib.util.find_spec("Box2D") is not None:
    MISSING_PACKAGE_ENV = "rltrain-test/NoSuchPackage-v0"
    gym.register(MISSING_PACKAGE_ENV, entry_point="rltrain_no_such_package.envs:Env")

#: The file a command named by a malicious checkpoint or config would create.
RAN = "the-command-ran"


def never_ran(run_dir: Path) -> bool:
    return not (run_dir / RAN).exists()


@dataclass(frozen=True)
class Case:
    """One bad input, and the error it must get.

    Attributes:
        name: What is wrong (the first column of docs/bad_input.md).
        run: Does the bad thing, given the run directory (which may not exist yet).
        error: The exception's type (exactly: not a subclass, not a wrapper of another error).
        message: A regex the message must match; the message is one line.
        setup: Prepares what the bad thing needs (a fitted run, a planted file) in the run
            directory before it; not part of what is checked.
        before_training: Found before training, so no file may be written; False for what
            only training finds (non-finite observations, rewards, losses).
        absent: Texts the message must not contain.
        after: Must hold after the error (the command a file names never ran).
        slow: Checked with the slow tests only (it starts a process or trains a while).
    """

    name: str
    run: Callable[[Path], object]
    error: type[BaseException]
    message: str
    setup: Callable[[Path], object] | None = None
    before_training: bool = True
    absent: tuple[str, ...] = ()
    after: Callable[[Path], bool] | None = None
    slow: bool = False


CASES = [
    # Settings
    Case("unknown env id", lambda d: trainer(d).fit("CartPol-v1", dqn()), ValueError,
         r"Unknown Gymnasium environment id 'CartPol-v1'\. Did you mean 'CartPole-v1'"),
    Case("action space the agent cannot handle",
         lambda d: trainer(d).fit("Pendulum-v1", dqn()), SpaceError,
         r"DQN needs a Discrete action space; got Box.*Use an agent for continuous actions"),
    Case("num_steps < 1", lambda d: Trainer(num_steps=0), ValueError,
         r"num_steps must be >= 1 env step; got 0"),
    Case("batch size larger than the buffer",
         lambda d: OffPolicyConfig(batch_size=512, buffer_size=256), ValueError,
         r"batch_size \(512\) is larger than buffer_size \(256\); raise buffer_size"),
    Case("eval_episodes < 1", lambda d: Trainer(eval_episodes=0), ValueError,
         r"eval_episodes must be >= 1; got 0"),
    Case("eval_max_episode_steps < 1", lambda d: Trainer(eval_max_episode_steps=0), ValueError,
         r"eval_max_episode_steps must be >= 1 env step, or None for no cap; got 0"),
    Case("negative warmup_steps", lambda d: OffPolicyConfig(warmup_steps=-1), ValueError,
         r"warmup_steps must be >= 0; got -1"),
    Case("learning rate <= 0", lambda d: DQNConfig(lr=0.0), ValueError,
         r"DQNConfig: lr must be > 0; got 0\.0"),
    Case("huber_delta <= 0", lambda d: DQNConfig(huber_delta=0.0), ValueError,
         r"DQNConfig: huber_delta must be > 0 \(the Huber loss's threshold\); got 0\.0"),
    Case("return_threshold that is NaN", lambda d: Trainer(return_threshold=math.nan),
         ValueError, r"return_threshold must be a finite return \(or None, to run all "
                     r"num_steps\); got nan"),
    Case("warmup_steps >= num_steps (a warning)",
         lambda d: strict(lambda: trainer(d, 50, strategy=small(warmup_steps=50)).fit(
             "CartPole-v1", dqn())), UserWarning,
         r"warmup_steps \(50\) >= num_steps \(50\): the run ends before its first gradient "
         r"step, so the agent will not learn\. Lower strategy\.warmup_steps or raise "
         r"trainer\.num_steps"),
    Case("device torch does not know", lambda d: Trainer(device="cpux"), ValueError,
         r"device 'cpux' is not a device torch knows; use 'cpu', 'cuda', 'cuda:<index>' or "
         r"'mps'"),
    Case("replay buffer larger than the memory",
         lambda d: trainer(d, strategy=small(buffer_size=10**12)).fit("CartPole-v1", dqn()),
         MemoryError, r"A ReplayBuffer of 1,000,000,000,000 transitions needs [\d.]+ GB; "
                      r"[\d.]+ GB of memory is available\. Lower buffer_size"),
    Case("empty run_dir", lambda d: Trainer(run_dir=""), ValueError,
         r"run_dir is empty; give a directory, or None for the default \(the current directory "
         r"is used only when named, as '\.'\)"),
    Case("empty checkpoint_dir", lambda d: Trainer(checkpoint_dir=" "), ValueError,
         r"checkpoint_dir is empty; give a directory, or None for the default"),
    Case("return_threshold that is infinite, in a config",
         lambda d: compose([], ["trainer.return_threshold=.inf"]), ConfigError,
         r"trainer: return_threshold must be a finite return \(or None, to run all num_steps\);"
         r" got inf"),
    Case("logger of an unknown type", lambda d: Trainer(logger=42),  # type: ignore[arg-type]
         TypeError,
         r"logger must be a list of loggers, one logger, True or False; a logger is a name, a "
         r"SummaryWriter or an object with log_metrics\(metrics, step\); got int"),
    Case("a folder as the logger", lambda d: Trainer(logger=str(d / "tb")),
         ValueError, r"is not a logger name; the names are tensorboard, csv, wandb, mlflow\. "
         r"TensorBoard writes its files in the run directory; for another folder, pass "
         r"SummaryWriter\(log_dir=\.\.\.\) as the logger in Python"),
    # Environments
    Case("unknown env.kwargs key",
         lambda d: build(configured(d, "env.kwargs={bogus: 1}")).fit(), EnvError,
         r"Cannot make the environment 'CartPole-v1' with kwargs \{'bogus': 1\}: .*unexpected "
         r"keyword argument 'bogus'.*Check its keyword arguments \(env\.kwargs\)"),
    Case("environment whose package is not installed",
         lambda d: build(configured(d, f"env.id={MISSING_PACKAGE_ENV}")).fit(), EnvError,
         rf"Cannot make the environment '{re.escape(MISSING_PACKAGE_ENV)}': a package it needs "
         r"is missing \(.+\)\. Install it"),
    Case("environment observation of another shape than its space",
         lambda d: fit_user_env(d, WrongShape), EnvError,
         r"The environment 'WrongShape' fails the check of observations: reset\(\) returned "
         r"an observation of shape \(4,\), but the observation space Box\(-1\.0, 1\.0, "
         r"\(3,\), float32\) has shape \(3,\)\. Return observations of the declared shape"),
    Case("environment step of the old Gym API (4 values)",
         lambda d: fit_user_env(d, OldGymStep), EnvError,
         r"The environment 'OldGymStep' fails the check of step's result: step\(\) returned 4 "
         r"values \(observation, reward, done, info\): the old Gym API; split done into "
         r"terminated .* and truncated .*Gymnasium's is step\(self, action\) -> "
         r"\(observation, reward, terminated, truncated, info\)"),
    Case("environment reset without a seed (the old Gym API)",
         lambda d: fit_user_env(d, OldGymReset), EnvError,
         r"The environment 'OldGymReset' fails the check of reset's signature: its reset\(\) "
         r"takes no seed .*reset\(self, \*, seed=None, options=None\) -> \(observation, "
         r"info\): add the keywords and call super\(\)\.reset\(seed=seed\) first"),
    Case("environment reset returning the observation alone",
         lambda d: fit_user_env(d, ObservationAlone), EnvError,
         r"The environment 'ObservationAlone' fails the check of reset's result: reset\(\) "
         r"returned a value of type ndarray, not \(observation, info\).*Return observation, \{\}"),
    Case("environment callable returning something else than an env",
         lambda d: fit_user_env(d, not_an_env), EnvError,
         r"The environment callable 'not_an_env' returned a str, not a gymnasium\.Env"),
    Case("environment reset that ignores its seed (a warning)",
         lambda d: strict(lambda: fit_user_env(d, IgnoresItsSeed)), UserWarning,
         r"The environment 'IgnoresItsSeed' fails the check of a seeded reset: reset\(seed=0\) "
         r"twice gave two different observations, so its reset ignores the seed.*Call "
         r"super\(\)\.reset\(seed=seed\) first in its reset, and draw every random number "
         r"from self\.np_random"),
    Case("environment of your own with a float64 Box (a warning)",
         lambda d: strict(lambda: fit_user_env(d, Float64Box)), UserWarning,
         r"The environment 'Float64Box' fails the check of observation dtypes: its "
         r"observation_space is a float64 Box .*rltrain's networks and replay storage are "
         r"float32.*gymnasium\.wrappers\.DtypeObservation\(env, np\.float32\)"),
    # Config files (and overrides)
    Case("YAML syntax error in a config file", lambda d: compose([d / "bad.yaml"]), ConfigError,
         r"bad\.yaml is not a valid YAML config \(line 3, column 16\): mapping values are not "
         r"allowed here", setup=lambda d: _config_file(d, "bad.yaml", (
             "trainer:\n  num_steps: 300\n  run_dir: runs: cartpole\n"))),
    Case("Python object tag in a config file", lambda d: compose([d / "tag.yaml"]), ConfigError,
         r"tag\.yaml is not a valid YAML config \(line 2, column \d+\): it uses a Python object "
         r"tag \(!!python/\.\.\.\); configs hold plain values only",
         setup=lambda d: _config_file(d, "tag.yaml", (
             "trainer:\n  run_dir: !!python/object/apply:os.system "
             f"[{json.dumps('touch ' + shlex.quote(str(d / RAN)))}]\n")), after=never_ran),
    Case("malformed ${...} interpolation in a config file",
         lambda d: compose([d / "interpolation.yaml"]), ConfigError,
         r"interpolation\.yaml: env\.id: .*'\$\{foo'\. Interpolations are written "
         r"\$\{section\.key\} or \$\{oc\.env:NAME\}",
         setup=lambda d: _config_file(d, "interpolation.yaml", "env:\n  id: ${foo\n")),
    Case("stored config naming a function as its env (os.system)",
         lambda d: build(literal_config({"env": {"_target_": "os.system", "kwargs": {
             "command": f"touch {shlex.quote(str(d / RAN))}"}}}), Trust(stored_in=d)),
         ConfigError, r"env\._target_: the stored config would import 'os' \(for 'os\.system'\)"
         r"\. Importing a module runs its code, .*--trust os\.",
         after=never_ran),
    Case("stored config naming a Gymnasium function as its env (gymnasium.make)",
         lambda d: build(literal_config({"env": {"_target_": "gymnasium.make", "kwargs": {
             "id": "CartPole-v1"}}}), Trust(stored_in=d)),
         ConfigError, r"env\._target_: the stored config names 'gymnasium\.make', which is not "
         r"a subclass of gymnasium\.core\.Env\. A stored config .* is untrusted.*--trust "
         r"gymnasium\."),
    Case("stored config of a run whose env had no import path (a lambda)",
         lambda d: build(literal_config({"env": {"id": None, "unrecorded": (
             "it was the Python callable <lambda>, which has no import path")}})), ConfigError,
         r"env: this run's environment cannot be rebuilt from its config: it was the Python "
         r"callable <lambda>.*env\._target_=module\.make_env"),
    Case("package in env.imports that is not installed",
         lambda d: build(compose([], [*TINY, "env.imports=[no_such_package]"])), ConfigError,
         r"env\.imports: cannot import 'no_such_package' .*Install the package"),
    Case("wrapper given without its import path",
         lambda d: compose([], ["env.wrappers=[gymnasium.wrappers.TimeLimit]"]), ConfigError,
         r"env: wrappers\[0\] is 'gymnasium\.wrappers\.TimeLimit'; each wrapper is a mapping "
         r"with the import path of its class"),
    Case("interpolation of a key that does not exist",
         lambda d: compose([], ["trainer.run_dir=${no_such_key}"]), ConfigError,
         r"trainer\.run_dir: .*Interpolation key 'no_such_key' not found"),
    Case("interpolation of an unset environment variable",
         lambda d: compose([], ["env.id=${oc.env:RLTRAIN_TEST_UNSET_VARIABLE}"]), ConfigError,
         r"env\.id: .*Environment variable 'RLTRAIN_TEST_UNSET_VARIABLE' not found"),
    # Training
    Case("NaN observation from the environment",
         lambda d: trainer(d).fit(poisoned("observation"), dqn()), TrainingError,
         r"while collecting experience, in sub-env 0: FloatingPointError: Sub-env 0 returned a "
         r"non-finite observation .* at env step 30 .*An emergency checkpoint",
         before_training=False),
    Case("infinite reward from the environment",
         lambda d: trainer(d).fit(poisoned("reward"), dqn()), TrainingError,
         r"Sub-env 0 returned a non-finite reward \(inf\) at env step 30 ",
         before_training=False),
    Case("NaN loss with on_nan_loss='raise'",
         lambda d: trainer(d, on_nan_loss="raise").fit("CartPole-v1", NanLossDQN(
             DQNConfig(hidden_sizes=[16]))), TrainingError,
         r"while training: FloatingPointError: Non-finite loss: the 'q' loss is nan at gradient "
         r"step 3\. Lower the learning rate", before_training=False),
    # Checkpoints
    Case("missing checkpoint", lambda d: trainer(d).fit("CartPole-v1", dqn(), ckpt_path="last"),
         FileNotFoundError, r"No checkpoint: No intact last checkpoint in .*checkpoints"),
    Case("checkpoint of another agent type",
         lambda d: load_agent(dqn(), d / "sac.pt", "CartPole-v1"), ValueError,
         r"holds a SAC checkpoint; it cannot be loaded into a DQN", setup=lambda d: _sac(d)),
    Case("checkpoint with mismatched network shapes",
         lambda d: trainer(d, 400).fit(
             "CartPole-v1", DQN(DQNConfig(hidden_sizes=[8], **DQN_SETTINGS)), ckpt_path="last"),
         ValueError,
         r"settings differ from the checkpoint's \(agent/hidden_sizes: '\[16\]' in the "
         r"checkpoint, '\[8\]' now\)", setup=fitted),
    Case("observation space differs from the checkpoint's",
         lambda d: trainer(d, 400).fit(EnvSpec("CartPole-v1", wrappers=(_extra_feature,)),
                                       dqn(), ckpt_path="last"), ValueError,
         r"saved on an environment with spaces .*Resume on the environment it was trained on",
         setup=fitted),
    Case("checkpoint whose runner state has another number of envs",
         lambda d: resumed(d, d / "tampered.pt"), ValueError,
         r"tampered\.pt: The checkpoint's runner episode_returns has shape \(3,\); this run's 1 "
         r"environments need \(1,\)\. It was saved with another num_envs or environment",
         setup=lambda d: _other_num_envs(d), absent=("zip()",)),
    Case("corrupt checkpoint file",
         lambda d: read_checkpoint(d / "checkpoints" / "checkpoint-200.pt"), ValueError,
         r"checkpoint-200\.pt is corrupt: its SHA-256 checksum does not match",
         setup=lambda d: _corrupt(d)),
    Case("checkpoint file of zeros", lambda d: resumed(d, d / "zeros.pt"), ValueError,
         r"zeros\.pt is not a readable checkpoint \(truncated, corrupt, or not a checkpoint "
         r"file\)", setup=lambda d: _planted(d, "zeros.pt", bytes(4096)),
         absent=("weights_only",)),
    Case("checkpoint file of random bytes", lambda d: resumed(d, d / "random.pt"), ValueError,
         r"random\.pt is not an rltrain checkpoint: it is not a file of tensors and plain data",
         setup=lambda d: _planted(d, "random.pt", random.Random(0).randbytes(4096)),
         absent=("codec can't decode", "weights_only")),
    Case("checkpoint that is not a checkpoint",
         lambda d: read_checkpoint(d / "foreign.pt"), ValueError,
         r"foreign\.pt holds objects a checkpoint must not contain \(it names "
         r"gymnasium\.spaces\.discrete\.Discrete; only tensors and plain data are loaded",
         setup=lambda d: _foreign(d)),
    Case("checkpoint whose pickle runs a command", lambda d: resumed(d, d / "command.pt"),
         ValueError, r"command\.pt holds objects a checkpoint must not contain \(it names "
                     r"posix\.system; only tensors and plain data are loaded, so nothing in it "
                     r"ran\)", setup=lambda d: _command_pickle(d), absent=("weights_only",),
         after=never_ran),
    # Manifests
    Case("manifest naming a file outside its folder (../x)", resumed, ManifestError,
         r"manifest\.json: its entry checkpoints\[0\] names '\.\./x', which is not a plain file "
         r"name of this folder", setup=lambda d: _manifest(d, _entry_file("../x"))),
    Case("manifest naming an absolute path", resumed, ManifestError,
         r"manifest\.json: its entry checkpoints\[0\] names '/.+/x', which is not a plain file "
         r"name of this folder",
         setup=lambda d: _manifest(d, lambda m, run: _entry_file(str(run / "x"))(m, run))),
    Case("manifest whose last is not a file name", resumed, ManifestError,
         r"manifest\.json: its entry last names \['checkpoint-200\.pt'\]",
         setup=lambda d: _manifest(d, lambda m, run: json.dumps(
             {**m, "last": ["checkpoint-200.pt"]}))),
    Case("manifest.json holding a JSON list (a warning)", lambda d: strict(lambda: resumed(d)),
         UserWarning, r"checkpoints/manifest\.json is unusable: it holds a JSON list, not an "
                      r"object\. Using the checkpoint files in the folder instead "
                      r"\(checkpoint-200\.pt\), unchecked",
         setup=lambda d: _manifest(d, lambda m, run: json.dumps([m]))),
    Case("manifest.json that is not JSON (a warning)", lambda d: strict(lambda: resumed(d)),
         UserWarning, r"checkpoints/manifest\.json is unusable: it is not valid JSON .*Using the "
                      r"checkpoint files in the folder instead",
         setup=lambda d: _manifest(d, lambda m, run: json.dumps(m)[:-7])),
    Case("manifest.json nested too deep (a warning)", lambda d: strict(lambda: resumed(d)),
         UserWarning, r"checkpoints/manifest\.json is unusable: .*Using the checkpoint files in "
                      r"the folder instead",
         setup=lambda d: _manifest(d, lambda m, run: "[" * 100_000 + "]" * 100_000)),
    # Run directories
    Case("run directory already holding a run", lambda d: trainer(d).fit("CartPole-v1", dqn()),
         FileExistsError,
         r"already holds a run \(checkpoints, config.yaml, model_summary.txt, summary.json\)\. "
         r"Resume it with ckpt_path='last'", setup=fitted),
    Case("directory that is not an rltrain run but holds a config.yaml",
         lambda d: trainer(d).fit("CartPole-v1", dqn()), FileExistsError,
         r"is not an rltrain run \(it has no \.rltrain-run\.json\) but holds config\.yaml, which "
         r"rltrain would overwrite",
         setup=lambda d: _config_file(d, "config.yaml", "my: own file\n")),
    Case("run directory whose checkpoints folder is a symbolic link",
         lambda d: trainer(d).fit("CartPole-v1", dqn()), FileExistsError,
         r"holds symbolic links where rltrain writes its own files \(checkpoints\); rltrain "
         r"never writes through a link in a run directory", setup=lambda d: _linked(d)),
    Case("run directory another process is writing",
         lambda d: trainer(d).fit("CartPole-v1", dqn()), RunDirectoryLocked,
         r"is in use by another rltrain run \(PID \d+ on .*, since .*\); one process "
         r"writes a run directory at a time\. Wait for that run to end",
         setup=lambda d: _held_by_another_process(d), after=lambda d: _release(d), slow=True),
    Case("stored config sending checkpoints outside its run",
         lambda d: resumed_config(str(d), []), ConfigError,
         r"The run's saved config sets trainer\.checkpoint_dir=.*elsewhere, outside the run "
         r"directory .*untrusted: confirm that folder on the command line",
         setup=lambda d: _checkpoints_elsewhere(d)),
    Case("a number where a setting is true or false (agent.normalize_observations=2)",
         lambda d: compose(["ppo_cartpole"], ["agent.normalize_observations=2"]), ConfigError,
         r"agent\.normalize_observations must be true or false; got 2\. Write "
         r"agent\.normalize_observations=true or agent\.normalize_observations=false"),
    Case("infinite setting (agent.ent_coef=inf)",
         lambda d: compose(["ppo_cartpole"], ["agent.ent_coef=inf"]), ConfigError,
         r"agent: PPOConfig: ent_coef must be a finite number, not infinite or NaN; got inf"),
    Case("log_std_init whose exponential overflows",
         lambda d: PPOConfig(log_std_init=1000.0), ValueError,
         r"PPOConfig: log_std_init must be in \[-20, 20\] \(a standard deviation of "
         r"exp\(log_std_init\)"),
    Case("env_step_timeout that is not a positive number of seconds",
         lambda d: compose([], ["trainer.env_step_timeout=-1"]), ConfigError,
         r"trainer: env_step_timeout must be a finite number of seconds > 0 \(or None for no "
         r"limit\); got -1"),
    Case("hidden sizes whose networks exceed the memory",
         lambda d: trainer(d, strategy=on_policy()).fit(
             "CartPole-v1", PPO(PPOConfig(hidden_sizes=[10**10]))), MemoryError,
         r"Training PPO's networks of hidden_sizes \[10000000000\] \(130,000,000,003 "
         r"parameters, with their gradients and Adam's two moments\) needs 2080\.00 GB; "
         r".* of memory is available\. Lower the agent's hidden_sizes"),
    Case("on-policy batch_size of 1e12 (the divisor hint answers at once)",
         lambda d: OnPolicyConfig(n_steps=128, num_envs=2, batch_size=10**12), ValueError,
         r"OnPolicyConfig: batch_size \(1,?000,?000,?000,?000\) must divide the rollout"),
    Case("observation of another shape mid-run",
         lambda d: trainer(d, 100).fit(_shape_shifter, dqn()), TrainingError,
         r"sub-env 0 returned from step\(\) an observation of shape \(5,\), but its "
         r"observation space Box\(-1\.0, 1\.0, \(3,\), float32\) has shape \(3,\)",
         before_training=False),
    Case("stored config importing a module planted in the run through a namespace package",
         lambda d: _stored_build(d), ConfigError,
         r"env\.imports: the stored config would import 'run'\. Importing a module runs its "
         r"code, .* confirm the module on the command line: --trust run\.",
         setup=lambda d: _stored_edit(d, ENV, ENV + "\n  imports: [run.evil]"),
         after=never_ran),
    Case("stored config naming a class in a package planted in the run (its __init__ never runs)",
         lambda d: _stored_build(d), ConfigError,
         r"agent\._target_: the stored config would import 'run' \(for "
         r"'run\.evilpkg\.sub\.Agent'\)\. Importing a module runs its code",
         setup=lambda d: _stored_edit(d, "  name: dqn", "  _target_: run.evilpkg.sub.Agent"),
         after=never_ran),
    Case("stored config holding an escaped interpolation (\\${oc.env:...})",
         lambda d: _stored_build(d), ConfigError,
         r"Unknown Gymnasium environment id '\\\\\$\{oc\.env:HOME\}'",
         setup=lambda d: _stored_edit(d, "  id: CartPole-v1", "  id: \\${oc.env:HOME}"),
         absent=(os.environ.get("HOME", "/root"),)),
    Case("stored wrapper of a package that is neither Gymnasium's nor the env's",
         lambda d: _stored_build(d), ConfigError,
         r"env\.wrappers\[0\]\._target_: the stored config names the wrapper "
         r"'minigrid\.wrappers\.ImgObsWrapper' of 'minigrid', which is neither Gymnasium's, "
         r"rltrain's nor the environment's package \('gymnasium'\).*--trust minigrid",
         setup=lambda d: _stored_edit(d, ENV, ENV + "\n  wrappers: "
                                      "[{_target_: minigrid.wrappers.ImgObsWrapper}]")),
    Case("stored RecordVideo wrapper writing outside the run",
         lambda d: _stored_build(d), ConfigError,
         r"env\.wrappers\[0\]\._target_: the stored config records videos into '/tmp/x' "
         r".*outside the run directory .*; a stored config never makes rltrain write elsewhere",
         setup=lambda d: _stored_edit(d, ENV, ENV + "\n  wrappers: "
                                      "[{_target_: gymnasium.wrappers.RecordVideo, "
                                      "video_folder: /tmp/x}]")),
    Case("stored config using YAML aliases (a billion laughs)",
         lambda d: resumed_config(str(d), []), ConfigError,
         r"config\.yaml uses YAML aliases \(\*name\), which rltrain never writes",
         setup=lambda d: _stored_edit(d, ENV, ENV + "\n  imports: &a [x, x]\n  wrappers: *a")),
    Case("checkpoint whose space bounds are stride-0 views (a small file, a huge space)",
         lambda d: load_policy(d), ValueError,
         r"its stored observation space has a low of 134,217,728 elements that its file does "
         r"not hold \(a broadcast view, as rltrain never writes\)",
         setup=lambda d: _broadcast_bounds(d)),
    Case("evaluate following a stored checkpoint_dir outside the run",
         lambda d: resolve_checkpoint(d, "last"), FileNotFoundError,
         r"has no checkpoints/ folder; its config names .*elsewhere as its checkpoint folder, "
         r"outside the run directory \(what a run directory says is untrusted\)\. Pass that "
         r"checkpoint file, or confirm the folder \(rltrain evaluate: "
         r"trainer\.checkpoint_dir=.*elsewhere\)",
         setup=lambda d: _checkpoints_moved_out(d)),
    Case("metrics.jsonl nested too deep, for rltrain plot",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:\d+ is not a JSON line: maximum recursion depth exceeded",
         setup=lambda d: _metrics_line(d, "[" * 100_000 + "]" * 100_000)),
    Case("metrics.jsonl row that is not an object of numbers, for rltrain plot",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:\d+ is not a metrics row \(a JSON object whose env_steps, "
         r"eval/return_mean, time/elapsed are finite numbers of magnitude at most 1e\+15, env "
         r"steps not negative\); it was not written by rltrain",
         setup=lambda d: _metrics_line(d, '{"event": "evaluation", "env_steps": NaN}')),
    Case("metrics.jsonl with a return of 1e308 (an average would overflow)",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:2 is not a metrics row .*magnitude at most 1e\+15",
         setup=lambda d: _metrics_line(d, '{"event": "evaluation", "env_steps": 200, '
                                          '"eval/return_mean": 1e308}')),
    Case("metrics.jsonl with negative env steps",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:2 is not a metrics row .*env steps not negative",
         setup=lambda d: _metrics_line(d, '{"event": "evaluation", "env_steps": -5, '
                                          '"eval/return_mean": 1.0}')),
    Case("metrics.jsonl holding a 5,000-digit integer",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:2 is not a JSON line: it holds an integer of 5,000 digits; rltrain "
         r"writes at most 30",
         setup=lambda d: _metrics_line(d, '{"env_steps": ' + "9" * 5000 + "}")),
    Case("metrics.jsonl line longer than 1 MiB (never read whole)",
         lambda d: read_run(d), ValueError,
         r"metrics\.jsonl:2 is longer than 1,048,576 bytes",
         setup=lambda d: _metrics_line(d, " " * (2 << 20))),
    Case("compare or plot of a path that does not exist",
         lambda d: read_run(d / "nowhere"), FileNotFoundError,
         r"nowhere is not a run directory: it does not exist\.",
         setup=lambda d: d.mkdir()),
    Case("group record (seeds.json) of the earlier format: a command line to replay",
         lambda d: resume_group(d, [], []), ValueError,
         r"seeds\.json is not a group of seeds rltrain wrote: its format is not 2 \(it was "
         r"written by an earlier rltrain.*resume each started seed with rltrain fit --resume",
         setup=lambda d: _record(d, "seeds.json", {"format": 1, "args": ["--import=evil"],
                                                   "seeds": [0], "jobs": 1,
                                                   "passthrough": []})),
    Case("group record (seeds.json) with a field rltrain never writes (passthrough)",
         lambda d: resume_group(d, [], []), ValueError,
         r"seeds\.json is not a group of seeds rltrain wrote: it holds fields rltrain never "
         r"writes \(passthrough\)",
         setup=lambda d: _record(d, "seeds.json", {"format": 2, "seeds": [0], "jobs": 1,
                                                   "config": {}, "passthrough": ["--import=x"]})),
    Case("group record (seeds.json) with 10**9 jobs",
         lambda d: resume_group(d, [], []), ValueError,
         r"seeds\.json is not a group of seeds rltrain wrote: 'jobs' must be an int in \[1, "
         r"1024\]",
         setup=lambda d: _record(d, "seeds.json", {"format": 2, "seeds": [0], "jobs": 10**9,
                                                   "config": {}})),
    Case("group record (seeds.json) whose config is not a config",
         lambda d: resume_group(d, [], []), ValueError,
         r"seeds\.json: the group's config is refused: strategy is a section of settings",
         setup=lambda d: _record(d, "seeds.json", {"format": 2, "seeds": [0], "jobs": 1,
                                                   "config": {"strategy": 5}})),
    Case("study record (tune.json) whose config sets no evaluations",
         lambda d: _read_study(d / "tune.json"), ValueError,
         r"tune\.json is not a study rltrain wrote: its config sets no trainer\.eval_interval",
         setup=lambda d: _record(d, "tune.json", {"format": 2, "space": {}, "config": {
             "trainer": {"eval_interval": None}}})),
    Case("checkpoint file resumed from outside a run's checkpoints folder",
         lambda d: resumed_config(str(d.parent / "lone.pt"), []), ConfigError,
         r"--resume .*lone\.pt: the checkpoint is not in a run's checkpoints/ folder, so where "
         r"the run goes on is not known .*Name it: trainer\.run_dir=DIR\.",
         setup=lambda d: _lone_checkpoint(d)),
    Case("study record (tune.json) of the earlier format: a command line to replay",
         lambda d: _read_study(d / "tune.json"), ValueError,
         r"tune\.json is not a study rltrain wrote: its format is not 2 \(it was written by an "
         r"earlier rltrain",
         setup=lambda d: _record(d, "tune.json", {"format": 1, "files": ["evil.yaml"],
                                                  "overrides": [], "space": {}})),
    Case("study record (tune.json) with 10**12 trials",
         lambda d: _read_study(d / "tune.json"), ValueError,
         r"tune\.json is not a study rltrain wrote: trials of the wrong type or out of bounds",
         setup=lambda d: _record(d, "tune.json", {"format": 2, "config": {}, "space": {},
                                                  "trials": 10**12})),
    Case("study record (tune.json) with a heartbeat of zero seconds",
         lambda d: _read_study(d / "tune.json"), ValueError,
         r"tune\.json is not a study rltrain wrote: heartbeat of the wrong type or out of bounds",
         setup=lambda d: _record(d, "tune.json", {"format": 2, "config": {}, "space": {},
                                                  "heartbeat": 0})),
    Case("group record (seeds.json) naming a Slurm job that is not a job id",
         lambda d: resume_group(d, [], []), ValueError,
         r"seeds\.json is not a group of seeds rltrain wrote: 'slurm' must map the group's "
         r"seeds to their job ids and nodes",
         setup=lambda d: _record(d, "seeds.json", {"format": 2, "seeds": [0], "jobs": 1,
                                                   "config": {}, "slurm": {"0": {
                                                       "job": "1; rm -rf ~"}}})),
    Case("study storage that is neither a database URL nor a journal file",
         lambda d: storage_url(d, "studies.db"), ValueError,
         r"--storage 'studies\.db' is neither a database URL \(postgresql://USER@HOST/DB, "
         r"sqlite:///PATH\) nor journal:PATH"),
    Case("Slurm setting submitit does not take",
         lambda d: SlurmLauncher(["walltime=60"]), ValueError,
         r"--slurm 'walltime=60': write KEY=VALUE with KEY one of partition, time"),
    Case("trial settings from a study's database outside its search space",
         lambda d: check_params({"env.id": "studies.s.evil:Foo-v0"},
                                [Dimension("agent.lr", low=1e-4, high=1e-3)]), ValueError,
         r"its settings \['env\.id'\] are not the search space's \['agent\.lr'\]"),
    Case("trial setting from a study's database beyond its range",
         lambda d: check_params({"agent.lr": 5.0}, [Dimension("agent.lr", low=1e-4, high=1e-3)]),
         ValueError, r"agent\.lr=5\.0 is outside the search space \(from 0\.0001 to 0\.001\)"),
    Case("stored wrapper given a mapping as a keyword",
         lambda d: build(literal_config({"env": {"id": "CartPole-v1", "wrappers": [
             {"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": {"a": 1}}]}}),
             Trust(stored_in=d)), ConfigError,
         r"env\.wrappers\[0\]\._target_: the stored config gives the wrapper "
         r"'gymnasium\.wrappers\.TimeLimit' a mapping as its keyword 'max_episode_steps'"),
    Case("unwritable run directory",
         lambda d: trainer(d / "a-file" / "run").fit("CartPole-v1", dqn()), PermissionError,
         r"Cannot write to the run directory .*Choose a run_dir you can write to",
         setup=lambda d: _config_file(d, "a-file", "not a directory")),
    # Dreamer
    Case("image observations for Dreamer's vector encoder",
         lambda d: trainer(d).fit(EnvSpec("CartPole-v1", wrappers=(_as_image,)), dreamer()),
         SpaceError, r"Dreamer needs a flat Box observation space \(a vector\); got Box of "
                     r"shape \(2, 2\)\. Flatten it \(gymnasium\.wrappers\.FlattenObservation\)"),
    Case("unbounded continuous actions for Dreamer",
         lambda d: trainer(d).fit(EnvSpec("Pendulum-v1", wrappers=(_unbounded,)), dreamer()),
         SpaceError, r"Dreamer scales its tanh actions to the action space's bounds, and "
                     r"Box\(-inf, inf.*has infinite ones\. Declare the range the env really "
                     r"accepts: gymnasium\.wrappers\.TransformAction"),
    Case("Dreamer sequences longer than the replay ring",
         lambda d: trainer(d).fit("Pendulum-v1", dreamer(sequence_length=2_000)), ValueError,
         r"sequence_length 2000 is longer than a ring \(1000 rows per env: capacity / num_envs\);"
         r" raise the capacity \(buffer_size\) or shorten the sequences"),
    Case("imagination horizon < 1", lambda d: DreamerConfig(horizon=0), ValueError,
         r"DreamerConfig: horizon must be >= 1; got 0"),
    # PPO and the on-policy strategy
    Case("PPO with the off-policy strategy",
         lambda d: trainer(d).fit("CartPole-v1", ppo()), ValueError,
         r"PPO trains with on_policy strategies, not off_policy \(OffPolicyStrategy\)\. Leave "
         r"strategy out for the agent's default, or pass .*on_policy"),
    Case("DQN with the on-policy strategy",
         lambda d: trainer(d, strategy=on_policy()).fit("CartPole-v1", dqn()), ValueError,
         r"DQN trains with off_policy strategies, not on_policy \(OnPolicyStrategy\)\. Leave "
         r"strategy out for the agent's default, or pass .*off_policy"),
    Case("on-policy batch_size that does not divide the rollout",
         lambda d: OnPolicyConfig(n_steps=100, num_envs=3, batch_size=64), ValueError,
         r"OnPolicyConfig: batch_size \(64\) must divide the rollout, n_steps x num_envs = "
         r"100 x 3 = 300, so every epoch uses each transition once; use a divisor, e\.g\. "
         r"batch_size=60"),
    Case("num_steps shorter than one rollout",
         lambda d: trainer(d, 100, strategy=on_policy(n_steps=64)).fit("CartPole-v1", ppo()),
         ValueError, r"num_steps \(100\) is shorter than one rollout \(n_steps x num_envs = "
                     r"128 env steps\): the run would end before its first update\. Raise "
                     r"trainer\.num_steps or lower strategy\.n_steps"),
    Case("rollout larger than the memory",
         lambda d: trainer(d, strategy=on_policy(n_steps=10**11)).fit("CartPole-v1", ppo()),
         MemoryError, r"A rollout of 100,000,000,000 x 2 transitions needs [\d.]+ GB; [\d.]+ GB "
                      r"of memory is available\. Lower n_steps or num_envs"),
    Case("Dict observation with a key no encoder takes (a mission text, as MiniGrid's)",
         lambda d: trainer(d, strategy=on_policy()).fit(
             EnvSpec("CartPole-v1", wrappers=(_with_mission,)), ppo()), SpaceError,
         r"PPO cannot encode the observation key 'mission': Mission\(\) \(it encodes a Dict's "
         r"Box, Discrete, MultiDiscrete and MultiBinary parts\)\. Drop it: minigrid\.wrappers\."
         r"ImgObsWrapper\(env\) keeps MiniGrid's image alone \(from the command line 'env\."
         r"wrappers=\[\{_target_: minigrid\.wrappers\.ImgObsWrapper\}\]'\); or gymnasium\."
         r"wrappers\.FilterObservation\(env, \['state'\]\) keeps the keys PPO encodes \(from "
         r"the command line 'env\.wrappers=\[\{_target_: gymnasium\.wrappers\."
         r"FilterObservation, filter_keys: \[state\]\}\]'\)\.$",
         absent=("FlattenObservation",)),
    Case("Tuple observations (Blackjack's) for PPO",
         lambda d: trainer(d, strategy=on_policy()).fit(
             EnvSpec("Blackjack-v1", kwargs={"max_episode_steps": 50}), ppo()), SpaceError,
         r"PPO takes Box, Discrete, MultiDiscrete and MultiBinary observations, or a Dict of "
         r"them; got Tuple\(Discrete\(32\), Discrete\(11\), Discrete\(2\)\)\. Flatten it "
         r"into a one-hot or numeric vector with gymnasium\.wrappers\.FlattenObservation\(env\)"
         r", from the command line 'env\.wrappers=\[\{_target_: gymnasium\.wrappers\."
         r"FlattenObservation\}\]' \(its envs cannot be pickled, so a resumed run is not "
         r"exact\)\.$"),
    Case("agent.encoder=cnn on vector observations",
         lambda d: trainer(d).fit("CartPole-v1", DQN(DQNConfig(encoder="cnn"))), SpaceError,
         r"DQN's encoder=cnn reads 3-D Box observations \(images, grids of channels\); got "
         r"Box\(.*\(4,\), float32\), which has none\. Leave the encoder to the space "
         r"\(agent\.encoder=auto, the default\)\.$"),
    Case("agent.encoder it does not know, in a config",
         lambda d: compose([], ["agent.name=dqn", "agent.encoder=conv"]), ConfigError,
         r"agent: DQNConfig: encoder must be 'auto' \(a CNN for images, as Stable-Baselines3 "
         r"decides them\), 'mlp' \(flatten every observation\) or 'cnn' \(a CNN for every 3-D "
         r"Box\); got 'conv'\.$"),
    Case("PPO clip_range <= 0", lambda d: PPOConfig(clip_range=0.0), ValueError,
         r"PPOConfig: clip_range must be > 0; got 0\.0"),
    Case("PPO gae_lambda > 1", lambda d: PPOConfig(gae_lambda=1.5), ValueError,
         r"PPOConfig: gae_lambda must be in \[0, 1\]; got 1\.5"),
    Case("PPO activation it does not know", lambda d: PPOConfig(activation="gelu"), ValueError,
         r"PPOConfig: activation must be one of \['relu', 'tanh'\]; got 'gelu'"),
    Case("PPO clip_range <= 0, in a config",
         lambda d: compose([], ["agent.name=ppo", "agent.clip_range=-0.1"]), ConfigError,
         r"agent: PPOConfig: clip_range must be > 0; got -0\.1"),
    Case("PPO run resumed with another rollout length",
         lambda d: trainer(d, 256, strategy=on_policy(n_steps=16)).fit(
             "CartPole-v1", ppo(), ckpt_path="last"), ValueError,
         r"settings differ from the checkpoint's \(strategy/n_steps: 32 in the checkpoint, 16 "
         r"now\)", setup=lambda d: _ppo_fitted(d), slow=True),
    # SAC
    Case("SAC on a discrete action space",
         lambda d: trainer(d).fit("CartPole-v1", SAC()), SpaceError,
         r"SAC needs a continuous \(Box\) action space; got Discrete\(2\)\. Use DQN or PPO for "
         r"discrete actions"),
    Case("SAC on an unbounded Box action space",
         lambda d: trainer(d).fit(EnvSpec("Pendulum-v1", wrappers=(_unbounded,)), SAC()),
         SpaceError, r"SAC squashes its actions into the action space's bounds, and Box\(-inf, "
                     r"inf, \(1,\), float32\) has infinite ones\. Declare the range the env "
                     r"really accepts: gymnasium\.wrappers\.TransformAction\(env, lambda a: a, "
                     r"gymnasium\.spaces\.Box\(low, high\)\)"),
    Case("SAC with the on-policy strategy",
         lambda d: trainer(d, strategy=on_policy()).fit("Pendulum-v1", SAC()), ValueError,
         r"SAC trains with off_policy strategies, not on_policy"),
    Case("SAC tau outside (0, 1]", lambda d: SACConfig(tau=1.5), ValueError,
         r"SACConfig: tau must be in \(0, 1\]; got 1\.5"),
]


class _Unbounded(gym.ActionWrapper[Any, Any, Any]):
    """An env whose action space claims no bounds."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action: Any) -> Any:
        return action


def _unbounded(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return _Unbounded(env)


def ppo() -> PPO:
    return PPO(PPOConfig(hidden_sizes=[16]))


def on_policy(**overrides: Any) -> OnPolicyStrategy:
    """2 envs x 32 steps a rollout, 2 epochs of 2 minibatches of 32."""
    settings: dict[str, Any] = dict(num_envs=2, n_steps=32, batch_size=32, update_epochs=2)
    settings.update(overrides)
    return OnPolicyStrategy(OnPolicyConfig(**settings))


def _ppo_fitted(run_dir: Path) -> None:
    trainer(run_dir, 128, strategy=on_policy()).fit("CartPole-v1", ppo())


class _Mission(gym.Space[str]):
    """A text space Gymnasium cannot flatten, as MiniGrid's MissionSpace."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __repr__(self) -> str:
        return "Mission()"


class _WithMission(gym.ObservationWrapper[Any, Any, Any]):
    """CartPole's state beside a mission text, in a Dict (as MiniGrid's observations)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"state": env.observation_space,
                                                  "mission": _Mission()})

    def observation(self, observation: Any) -> Any:
        return {"state": observation, "mission": "balance the pole"}


def _with_mission(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return _WithMission(env)


def dreamer(**overrides: Any) -> Dreamer:
    settings: dict[str, Any] = dict(deter_size=16, stoch_size=4, hidden_size=16,
                                    sequence_length=8, horizon=3)
    settings.update(overrides)
    return Dreamer(DreamerConfig(**settings))


def _as_image(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return gym.wrappers.ReshapeObservation(env, (2, 2))


class _Unbounded(gym.ActionWrapper[Any, Any, Any]):
    """Pendulum that claims to take any real torque."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action: Any) -> Any:
        return np.clip(action, -2.0, 2.0)


def _unbounded(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    return _Unbounded(env)


def _extra_feature(env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
    low = np.append(env.observation_space.low, 0.0).astype(np.float32)  # type: ignore[attr-defined]
    high = np.append(env.observation_space.high, 1.0).astype(np.float32)  # type: ignore[attr-defined]
    space = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda o: np.append(o, 0.0).astype(np.float32),
                                             space)


def _planted(run_dir: Path, name: str, data: bytes) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / name).write_bytes(data)


#: The processes holding a run directory's lock for the "another process" case, by folder.
HOLDERS: dict[Path, subprocess.Popen[str]] = {}

HOLD = """
import sys
from pathlib import Path
from rltrain.trainer.run_dir import open_run
run_dir = Path(sys.argv[1])
with open_run(run_dir, checkpoint_dir=run_dir / "checkpoints", resuming=False,
              overwrite=False):
    print("holding", flush=True)
    sys.stdin.readline()  # until the test lets go (or its pipe closes)
"""


def _held_by_another_process(run_dir: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    HOLDERS[run_dir] = holder


def _release(run_dir: Path) -> bool:
    holder = HOLDERS.pop(run_dir)
    holder.communicate("\n", timeout=30)  # also closes its pipes
    return holder.returncode == 0


def _checkpoints_elsewhere(run_dir: Path) -> None:
    fitted(run_dir)
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace(
        "checkpoint_dir: null", f"checkpoint_dir: {run_dir.parent / 'elsewhere'}"))


#: The env section of a fitted run's stored config.
ENV = "env:\n  id: CartPole-v1\n  kwargs: {}"


def _stored_edit(run_dir: Path, old: str, new: str) -> None:
    """A fitted run whose stored config has ``old`` replaced by ``new``, with code planted in
    it that would leave :data:`RAN` in the run if it were ever imported."""
    fitted(run_dir)
    config = run_dir / "config.yaml"
    assert old in config.read_text(), config.read_text()
    config.write_text(config.read_text().replace(old, new, 1))
    evil = (f"open({str(run_dir / RAN)!r}, 'w').close()\nclass Agent: pass\n")
    (run_dir / "evil.py").write_text(evil)
    (run_dir / "evilpkg").mkdir()
    (run_dir / "evilpkg" / "__init__.py").write_text(evil)
    (run_dir / "evilpkg" / "sub.py").write_text(evil)


def _stored_build(run_dir: Path) -> object:
    """Build the run's stored config as ``rltrain fit --resume RUN`` does, from the folder that
    holds the run (so ``run.evil`` names ``run/evil.py`` through a namespace package)."""
    sys.path.insert(0, str(run_dir.parent))
    try:
        config, _ = resumed_config(str(run_dir), [])
        return build(config, Trust(stored_in=run_dir))
    finally:
        sys.path.remove(str(run_dir.parent))
        for name in [n for n in sys.modules if n == "run" or n.startswith("run.")]:
            del sys.modules[name]


def _broadcast_bounds(run_dir: Path) -> None:
    """A fitted run whose checkpoint's observation bounds are stride-0 views of one number."""
    fitted(run_dir)
    checkpoint = run_dir / "checkpoints" / "last.pt"
    state = read_checkpoint(checkpoint)
    huge = [1 << 27]
    state["spaces"]["observation"].update(
        shape=huge, dtype="float64", low=torch.zeros(1, dtype=torch.float64).expand(*huge),
        high=torch.ones(1, dtype=torch.float64).expand(*huge))
    for path in (run_dir / "checkpoints").iterdir():
        path.unlink()
    atomic_save(state, run_dir / "checkpoints" / "checkpoint-200.pt")


def _checkpoints_moved_out(run_dir: Path) -> None:
    _checkpoints_elsewhere(run_dir)
    (run_dir / "checkpoints").rename(run_dir.parent / "elsewhere")


def _lone_checkpoint(run_dir: Path) -> Path:
    """A copy of a fitted run's checkpoint beside the run, out of its checkpoints folder."""
    fitted(run_dir)
    lone = run_dir.parent / "lone.pt"
    lone.write_bytes(Checkpointer(run_dir / "checkpoints").resolve("last").read_bytes())
    return lone


def _record(folder: Path, name: str, data: dict[str, Any]) -> None:
    """A group's or a study's record, ``data``, in ``folder``."""
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps(data))


def _metrics_line(run_dir: Path, line: str) -> None:
    """A run's ``metrics.jsonl`` of an evaluation row, ``line``, and a last line after it."""
    run_dir.mkdir(parents=True)
    rows = [{"event": "evaluation", "env_steps": 100, "eval/return_mean": 20.0}, {}]
    (run_dir / "metrics.jsonl").write_text(
        "\n".join([json.dumps(rows[0]), line, json.dumps(rows[1])]) + "\n")


def _shape_shifter() -> gym.Env[Any, Any]:
    """CartPole-like observations of shape (3,) that turn (5,) at the 45th step."""
    from conftest import shape_shifter

    return shape_shifter()


def _config_file(run_dir: Path, name: str, text: str) -> None:
    _planted(run_dir, name, text.encode())


def _sac(run_dir: Path) -> None:
    """A real checkpoint relabelled as a SAC's, as ``sac.pt``."""
    fitted(run_dir)
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    state["agent_class"] = "SAC"
    atomic_save(state, run_dir / "sac.pt")


def _other_num_envs(run_dir: Path) -> None:
    """A real checkpoint whose runner state is for 3 envs, as ``tampered.pt`` (a file no
    manifest lists, so no checksum says it was altered)."""
    fitted(run_dir)
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    state["runner"]["episode_returns"] = torch.zeros(3, dtype=torch.float64)
    atomic_save(state, run_dir / "tampered.pt")


def _corrupt(run_dir: Path) -> None:
    fitted(run_dir)
    path = run_dir / "checkpoints" / "checkpoint-200.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run_dir / "checkpoints" / "last.pt").unlink()
    path.write_bytes(bytes(data))


def _foreign(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"model": gym.spaces.Discrete(3)}, run_dir / "foreign.pt")


class _RunsACommand:
    """Unpickles by calling ``os.system(command)``: what a malicious checkpoint does."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def _command_pickle(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    command = f"touch {shlex.quote(str(run_dir / RAN))}"
    torch.save({"agent": _RunsACommand(command)}, run_dir / "command.pt")


def _manifest(run_dir: Path, edit: Callable[[dict[str, Any], Path], str]) -> None:
    """A ``fitted`` run whose manifest is replaced by ``edit(manifest, run_dir)``."""
    fitted(run_dir)
    path = run_dir / "checkpoints" / "manifest.json"
    path.write_text(edit(json.loads(path.read_text()), run_dir))


def _entry_file(name: str) -> Callable[[dict[str, Any], Path], str]:
    """An edit naming ``name`` as the manifest's first checkpoint file."""
    def edit(manifest: dict[str, Any], run_dir: Path) -> str:
        manifest["checkpoints"][0]["file"] = name
        return json.dumps(manifest)
    return edit


def _linked(run_dir: Path) -> None:
    """A run directory whose ``checkpoints`` is a link to a folder beside it."""
    elsewhere = run_dir.parent / "elsewhere"
    elsewhere.mkdir(parents=True)
    run_dir.mkdir()
    (run_dir / "checkpoints").symlink_to(elsewhere, target_is_directory=True)


def raised(case: Case, run_dir: Path) -> BaseException:
    """The error ``case.run`` raises (its type exactly ``case.error``)."""
    with pytest.raises(case.error) as info:
        case.run(run_dir)
    error = info.value
    assert type(error) is case.error, f"{type(error).__name__}: {error}"
    return error


def param(case: Case) -> Any:
    """``case`` as a pytest parameter named by its name, marked slow where it says so."""
    return pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else [])


def prepared(case: Case, tmp_path: Path) -> Path:
    """The case's run directory, with its setup done."""
    run_dir = tmp_path / "run"
    if case.setup is not None:
        case.setup(run_dir)
    return run_dir


@pytest.mark.parametrize("case", [param(c) for c in CASES])
def test_bad_input_gets_a_clear_error(case: Case, tmp_path: Path) -> None:
    run_dir = prepared(case, tmp_path)
    message = str(raised(case, run_dir))
    assert re.search(case.message, message), message
    assert "\n" not in message.strip(), f"not one line: {message!r}"
    for text in case.absent:
        assert text not in message, message
    if case.after is not None:
        assert case.after(run_dir)


def backdate(root: Path) -> None:
    """Set the times of everything under ``root`` an hour back, so that any write shows in the
    modification times, however coarse the file system's clock."""
    past = time.time_ns() - 3600 * 10**9
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.utime(Path(folder, name), ns=(past, past), follow_symlinks=False)


def tree(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path under ``root`` (links not followed), with what a write changes: its kind,
    size, modification time and inode (a file replaced by a rename has a new one)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            info = path.lstat()
            found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size,
                                                  info.st_mtime_ns, info.st_ino)
    return found


def change(before: tuple[int, ...] | None, after: tuple[int, ...] | None) -> str:
    return "new" if before is None else "gone" if after is None else "changed"


BEFORE_TRAINING = [c for c in CASES if c.before_training]


@pytest.mark.parametrize("case", [param(c) for c in BEFORE_TRAINING])
def test_a_bad_input_found_before_training_writes_nothing(case: Case, tmp_path: Path) -> None:
    """The early-check promise: every file (the setup's run included) is left as it was."""
    run_dir = prepared(case, tmp_path)
    backdate(tmp_path)
    before = tree(tmp_path)
    raised(case, run_dir)
    after = tree(tmp_path)
    written = [f"{path} ({change(before.get(path), after.get(path))})"
               for path in sorted(before.keys() | after.keys())
               if before.get(path) != after.get(path)]
    if case.after is not None:
        assert case.after(run_dir)
    assert not written, f"written before the error: {', '.join(written)}"


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    run = Trainer(num_steps=400, strategy=small(), eval_interval=None, run_dir=tmp_path,
                  **QUIET, checkpoint_interval=50)
    result = run.fit("CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16])))
    assert result.summary.stop_reason is not None
    assert "non-finite loss: the 'q' loss is nan at gradient step 3" in result.summary.stop_reason
    last = read_checkpoint(Checkpointer(tmp_path / "checkpoints").resolve("last"))
    assert last["progress"]["gradient_steps"] <= 2
    assert all(torch.isfinite(t).all() for t in last["agent"].values())


def test_nan_loss_with_skip_warns_and_trains_on(tmp_path: Path) -> None:
    run = Trainer(num_steps=200, strategy=small(), eval_interval=None, run_dir=tmp_path,
                  **QUIET, on_nan_loss="skip")
    with pytest.warns(UserWarning, match="Skipped an update: the 'q' loss is nan"):
        result = run.fit("CartPole-v1", NanLossDQN(DQNConfig(hidden_sizes=[16])))
    assert result.summary.env_steps == 200
    assert result.summary.stop_reason is None


def test_the_docs_table_lists_every_case(tmp_path: Path) -> None:
    table = DOCS.read_text()
    for case in CASES:
        assert f"| {case.name} |" in table, f"docs/bad_input.md lacks {case.name!r}"

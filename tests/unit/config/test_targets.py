"""Runs whose pieces are the user's own (an env, wrappers, a strategy in a local module) are
recorded by import path and rebuilt by the CLI; what cannot be rebuilt says so; a stored config
never makes rltrain call what it was not meant to."""

from __future__ import annotations

import json
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import rltrain
from omegaconf import OmegaConf

from rltrain import DQN, Trainer
from rltrain.cli import main
from rltrain.config.files import ConfigError, load_stored
from rltrain.config.instantiate import make_env
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose
from rltrain.envs.make import env_name
from rltrain.settings.loops import OffPolicyConfig
from rltrain.strategies.off_policy import OffPolicyStrategy
from rltrain.trainer.preflight import default_run_dir

QUICK = ["trainer.num_steps=300", "strategy.warmup_steps=100", "strategy.batch_size=32",
         "trainer.eval_episodes=3", "trainer.eval_interval=1000", "trainer.return_threshold=null",
         "trainer.enable_progress_bar=false", "trainer.enable_console=false",
         "trainer.logger=false"]

MY_ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register


class Corridor(gym.Env):
    """Walk right to the end of a corridor of ``length`` cells; each step costs 0.1."""

    def __init__(self, length=5):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, float(length), (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = int(self.np_random.integers(0, 2))
        return np.array([self.position], np.float32), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        done = self.position >= self.length
        return (np.array([self.position], np.float32), 1.0 if done else -0.1, done, False, {})


def make_corridor(length=5):
    return gym.wrappers.TimeLimit(Corridor(length), max_episode_steps=40)


register(id="Corridor-v0", entry_point="my_envs:Corridor", max_episode_steps=40)
'''

MY_STRATEGIES = '''
from rltrain.strategies.off_policy import OffPolicyStrategy


class MyOffPolicy(OffPolicyStrategy):
    """The off-policy loop under another name: a user's own strategy class."""
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder holding their own modules, importable here as from the CLI there."""
    (tmp_path / "my_envs.py").write_text(textwrap.dedent(MY_ENVS))
    (tmp_path / "my_strategies.py").write_text(textwrap.dedent(MY_STRATEGIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("my_envs", "my_strategies"):
        sys.modules.pop(name, None)


def evaluated(process_stdout: str) -> dict[str, float]:
    return json.loads(process_stdout)  # type: ignore[no-any-return]


def final_return(run_dir: Path) -> float:
    return float(json.loads((run_dir / "summary.json").read_text())
                 ["final_metrics"]["eval/return_mean"])


@pytest.mark.slow
def test_a_cli_run_of_an_env_and_strategy_in_local_modules_evaluates_and_resumes(
        project: Path) -> None:
    run_dir = project / "run"
    fit = rltrain("fit", "env._target_=my_envs.Corridor", "env.kwargs.length=4",
                  "env.wrappers=[{_target_: gymnasium.wrappers.TimeLimit, "
                  "max_episode_steps: 30}]", "strategy._target_=my_strategies.MyOffPolicy",
                  "strategy.seed=3", f"trainer.run_dir={run_dir}", *QUICK, cwd=project)
    assert fit.returncode == 0, fit.stderr
    stored = load_stored(run_dir / "config.yaml")
    assert stored.strategy._target_ == "my_strategies.MyOffPolicy" and stored.strategy.seed == 3
    assert stored.env._target_ == "my_envs.Corridor" and stored.env.id is None
    assert stored.env.wrappers == [{"_target_": "gymnasium.wrappers.TimeLimit",
                                    "max_episode_steps": 30}]
    # the run's own modules are the user's word on the command line only, never the record's
    refused = rltrain("evaluate", run_dir, cwd=project)
    assert refused.returncode == 2 and "--trust my_" in refused.stderr, refused.stderr
    trusted = ["--trust", "my_envs", "--trust", "my_strategies"]
    evaluate = rltrain("evaluate", run_dir, *trusted, cwd=project)
    assert evaluate.returncode == 0, evaluate.stderr
    metrics = evaluated(evaluate.stdout)
    assert metrics["eval/return_mean"] == pytest.approx(final_return(run_dir))
    assert metrics["eval/length_mean"] <= 30
    resume = rltrain("fit", "--resume", run_dir, "trainer.num_steps=400", *trusted,
                     cwd=project)
    assert resume.returncode == 0, resume.stderr
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 400


def test_a_gymnasium_module_colon_id_and_env_imports_are_accepted(project: Path) -> None:
    colon = compose([], ["env.id=my_envs:Corridor-v0"])
    assert make_env(colon.env) == "my_envs:Corridor-v0"
    imported = make_env(compose([], ["env.id=Corridor-v0", "env.imports=[my_envs]"]).env)
    assert imported().spec.id == "Corridor-v0"  # type: ignore[operator,union-attr]
    with pytest.raises(ConfigError, match="cannot import 'no_such_package'"):
        make_env(compose([], ["env.id=Corridor-v0", "env.imports=[no_such_package]"]).env)


@pytest.mark.slow
def test_python_runs_with_importable_pieces_are_rebuilt_by_the_cli(project: Path) -> None:
    import my_envs
    import my_strategies

    run_dir = project / "python-run"
    strategy = my_strategies.MyOffPolicy(OffPolicyConfig(seed=7, warmup_steps=100,
                                                         batch_size=32))
    trainer = Trainer(num_steps=300, run_dir=run_dir, eval_episodes=3, strategy=strategy,
                      enable_progress_bar=False, enable_console=False, logger=False)
    trainer.fit(my_envs.make_corridor, DQN())
    stored = load_stored(run_dir / "config.yaml")
    assert stored.env._target_ == "my_envs.make_corridor"
    assert stored.strategy._target_ == "my_strategies.MyOffPolicy"
    assert stored.strategy.seed == 7
    evaluate = rltrain("evaluate", run_dir, "--trust", "my_envs", "--trust", "my_strategies",
                       cwd=project)
    assert evaluate.returncode == 0, evaluate.stderr
    assert evaluated(evaluate.stdout)["eval/return_mean"] == pytest.approx(final_return(run_dir))


def test_a_stored_function_target_needs_the_users_trust(project: Path) -> None:
    import my_envs

    run_dir = project / "function-run"
    Trainer(num_steps=150, run_dir=run_dir, eval_episodes=2, enable_progress_bar=False,
            enable_console=False, logger=False,
            strategy=OffPolicyStrategy(OffPolicyConfig(warmup_steps=100, batch_size=32))
            ).fit(my_envs.make_corridor, DQN())
    refused = rltrain("evaluate", run_dir, cwd=project)
    assert refused.returncode == 2
    assert "--trust my_envs" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.slow
def test_what_cannot_be_recorded_is_said_and_the_seed_of_a_script_strategy_is_kept(
        project: Path) -> None:
    class ScriptStrategy(OffPolicyStrategy):  # defined in a function: no import path
        pass

    run_dir = project / "lambda-run"
    trainer = Trainer(num_steps=300, run_dir=run_dir, eval_episodes=3,
                      enable_progress_bar=False, enable_console=False, logger=False,
                      strategy=ScriptStrategy(OffPolicyConfig(seed=5, warmup_steps=100,
                                                              batch_size=32)))
    trainer.fit(lambda: __import__("my_envs").make_corridor(3), DQN())
    stored = load_stored(run_dir / "config.yaml")
    assert "lambda" in stored.env.unrecorded and stored.env.id is None
    assert "ScriptStrategy" in stored.strategy.unrecorded and stored.strategy.seed == 5
    refused = rltrain("evaluate", run_dir, cwd=project)
    assert refused.returncode == 2
    assert "environment cannot be rebuilt" in refused.stderr and "lambda" in refused.stderr
    # given the env on the command line, it evaluates with the run's seed (5), not seed 0
    given = rltrain("evaluate", run_dir, "env._target_=my_envs.make_corridor",
                    "env.kwargs.length=3", cwd=project)
    assert given.returncode == 0, given.stderr
    assert evaluated(given.stdout)["eval/return_mean"] == pytest.approx(final_return(run_dir))


@pytest.mark.slow
def test_a_hostile_stored_config_calls_nothing(project: Path) -> None:
    run_dir = project / "run"
    fit = rltrain("fit", "env.id=my_envs:Corridor-v0", f"trainer.run_dir={run_dir}", *QUICK,
                  cwd=project)
    assert fit.returncode == 0, fit.stderr
    stored = OmegaConf.load(run_dir / "config.yaml")
    stored.env = {"_target_": "os.system", "kwargs": {"command": "touch pwned"}}
    OmegaConf.save(stored, run_dir / "config.yaml")
    resume = rltrain("fit", "--resume", run_dir, cwd=project)
    assert resume.returncode == 2
    assert "os.system" in resume.stderr and "--trust os" in resume.stderr
    assert not (project / "pwned").exists()
    # a module inside the run directory is never imported from its stored config
    (run_dir / "evil.py").write_text("open('imported', 'w').close()\n"
                                     "import gymnasium\nclass Evil(gymnasium.Env): pass\n")
    stored.env = {"_target_": "evil.Evil"}
    OmegaConf.save(stored, run_dir / "config.yaml")
    inside = rltrain("fit", "--resume", ".", cwd=run_dir)
    assert inside.returncode == 2 and "the stored config would import 'evil'" in inside.stderr
    assert not (run_dir / "imported").exists()


def test_integral_floats_flag_hints_run_dir_names_and_presets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = compose(["dqn_cartpole"], ["trainer.num_steps=1e4", "strategy.buffer_size=5e4"])
    assert config.trainer.num_steps == 10_000 and isinstance(config.trainer.num_steps, int)
    with pytest.raises(ConfigError, match="num_steps"):
        compose([], ["trainer.num_steps=1.5"])
    with pytest.raises(SystemExit):
        main(["fit", "--steps", "100"])
    assert "write trainer.num_steps=N" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit", "--no-tqdm"])
    assert "write trainer.enable_progress_bar=false" in capsys.readouterr().err
    assert default_run_dir("DQN", env_name(lambda: None)).name.endswith("-dqn-env")  # was
    # "-dqn-<lambda>": a shell redirection
    assert default_run_dir("DQN", "my_envs:Corridor-v0").name.endswith("-dqn-Corridor-v0")
    assert default_run_dir("DQN", "phys2d/CartPole-v1").name.endswith("-dqn-phys2d_CartPole-v1")
    with pytest.warns(UserWarning, match="dqn_cartpole is tuned for CartPole-v1.*dqn_acrobot"):
        compose(["dqn_cartpole"], ["env.id=Acrobot-v1"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compose(["dqn_acrobot"])  # its own env: no warning
    assert choose_preset(["env.id=Acrobot-v1"]).files == ["dqn_acrobot"]
    assert choose_preset(["env.id=MountainCar-v0"]).files == ["dqn_mountaincar"]
    assert choose_preset([]).files == ["dqn_cartpole"]
    assert choose_preset(["agent.name=ppo"]).files == ["ppo_cartpole"]


def test_evaluate_can_pick_the_best_checkpoint(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    assert main(["fit", "dqn_cartpole", f"trainer.run_dir={run_dir}", *QUICK]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--checkpoint", "best", "--episodes", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert Path(printed["checkpoint"]).name.startswith("best")


def test_only_names_the_user_gives_reach_the_current_directory(project: Path) -> None:
    from rltrain.settings import search_path

    search_path._LOCAL.allowed.discard("ale_py")
    config = compose([], ["env.id=ALE/Pong-v5", "agent.name=ppo", "env.atari={}"])
    make_env(config.env)  # rltrain imports ale_py itself: from installed packages only
    assert "ale_py" not in search_path._LOCAL.allowed
    make_env(compose([], ["env.id=Corridor-v0", "env.imports=[my_envs]"]).env)
    assert "my_envs" in search_path._LOCAL.allowed  # the user's own name

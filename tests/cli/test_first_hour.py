"""What a newcomer types in the first hour gets what they meant, or a message that says the
right form: overrides anywhere on the line, a section given a value, a list written without
brackets, a name in the wrong case, an agent's name where a config file goes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from rltrain.cli.app import main, parse_args
from rltrain.config.presets import choose_preset


def error_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line ``rltrain *argv`` prints on stderr, exiting with status 2."""
    assert main(list(argv)) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_overrides_and_configs_may_come_after_the_flags() -> None:
    args = parse_args(["fit", "--overwrite", "trainer.num_steps=300", "dqn_acrobot",
                       "--print-config", "agent.lr=1e-3"])
    assert args.overwrite and args.print_config
    assert args.args == ["trainer.num_steps=300", "dqn_acrobot", "agent.lr=1e-3"]
    evaluate = parse_args(["evaluate", "runs/x", "--episodes", "3", "env.id=Acrobot-v1"])
    assert evaluate.episodes == 3 and evaluate.overrides == ["env.id=Acrobot-v1"]
    with pytest.raises(SystemExit):
        parse_args(["fit", "--steps", "100"])  # a flag of another tool is still refused


def test_an_override_after_overwrite_is_applied(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    assert main(["fit", "--print-config", "--overwrite", "trainer.num_steps=1234",
                 f"trainer.run_dir={tmp_path / 'run'}"]) == 0
    printed = capsys.readouterr().out
    assert "num_steps: 1234" in printed and "overwrite: true" in printed


@pytest.mark.parametrize(("given", "meant"), [("env=CartPole-v1", "env.id=CartPole-v1"),
                                              ("agent=ppo", "agent.name=ppo"),
                                              ("strategy=on_policy", "strategy.name=on_policy")])
def test_a_section_given_a_value_names_the_key_it_meant(
        capsys: pytest.CaptureFixture[str], given: str, meant: str) -> None:
    line = error_line(capsys, "fit", given, "--print-config")
    assert "is a section of settings, not a value" in line and f"Write {meant}" in line
    assert "Merge error" not in line


def test_a_list_written_without_brackets_gets_its_bracketed_form(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "fit", "agent.hidden_sizes=64,64", "--print-config")
    assert "agent.hidden_sizes is a list; got '64,64'" in line
    assert "agent.hidden_sizes=[64,64]" in line and "AnyNode" not in line


def test_a_name_in_another_case_is_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "fit", "agent.name=DQN", "--print-config")
    assert "unknown agent 'DQN'. Did you mean 'dqn'?" in line
    line = error_line(capsys, "fit", "strategy.name=On-Policy", "--print-config")
    assert "Did you mean 'on_policy'?" in line


def test_an_agent_s_name_where_a_config_goes_says_how_to_pick_the_agent(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "fit", "ppo", "--print-config")
    assert "To train PPO, write agent.name=ppo" in line


def test_without_a_file_a_preset_is_taken_only_where_it_was_tuned(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert choose_preset(["agent.name=ppo", "env.id=Acrobot-v1"]).files == ["ppo_acrobot"]
    # no preset of PPO is tuned for Taxi: PPO's own defaults, never CartPole's settings
    taxi = choose_preset(["agent.name=ppo", "env.id=Taxi-v3"])
    assert taxi.files == [] and "no shipped preset is tuned for Taxi-v3 with ppo" in taxi.note
    # each agent's default preset runs on the base install (SAC's LunarLander one needs Box2D)
    assert choose_preset(["agent.name=sac"]).files == ["sac_pendulum"]
    assert choose_preset(["agent.name=ppo"]).files == ["ppo_cartpole"]
    assert choose_preset(["agent.name=ppo"], use_presets=False).files == []
    assert main(["fit", "agent.name=ppo", "env.id=FrozenLake-v1", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# no shipped preset is tuned for FrozenLake-v1 with ppo")
    assert "return_threshold: null" in printed and "gamma: 0.99" in printed
    assert main(["fit", "--no-preset", "--print-config"]) == 0
    assert capsys.readouterr().out.startswith("# --no-preset: starting from dqn's own defaults")


def test_an_env_without_a_time_limit_gets_one_from_the_command_line() -> None:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    from rltrain.config.instantiate import make_env
    from rltrain.config.schema import compose
    from rltrain.envs.checks import warn_no_time_limit

    with pytest.warns(UserWarning, match=r"Give it one: env\.max_episode_steps=N on the "
                                         r"command line"):
        warn_no_time_limit(CartPoleEnv(), "CartPoleEnv", None)
    env = make_env(compose([], ["env.id=CartPole-v1", "env.max_episode_steps=7"]).env)()
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(steps % 2)
        steps += 1
        assert not terminated  # alternating pushes keep the pole up for 7 steps
    assert steps == 7


WITHOUT_PYGAME = ("import sys; sys.modules['pygame'] = None  # as where it is not installed\n"
                  "from rltrain.cli.app import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.slow
def test_videos_of_an_env_that_cannot_render_are_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYGAME, "fit", "trainer.video_interval=1",
         "trainer.num_steps=300", "trainer.enable_progress_bar=false"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("rltrain: error")]
    assert "Recording videos of 'CartPole-v1' cannot render its frames" in line
    assert "pip install 'rltrain[video]'" in line and "pip install -e '.[video]'" in line
    assert list(tmp_path.iterdir()) == []  # no run directory, no empty videos folder


def test_plot_labels_mixed_runs_by_env_and_agent_before_their_settings() -> None:
    import numpy as np

    from rltrain.cli.plot import RunCurve, labels

    def group(**config: object) -> list[RunCurve]:
        return [RunCurve(Path("run"), np.zeros(1), np.zeros(1), np.zeros(1), config)]

    dqn = {"agent.name": "dqn", "agent.lr": 1e-3, "agent.double_q": True}
    ppo = {"agent.name": "ppo", "agent.ent_coef": 0.0}
    groups = [group(**dqn, **{"env.id": "CartPole-v1"}),
              group(**ppo, **{"env.id": "CartPole-v1", "agent.lr": 3e-4}),
              group(**ppo, **{"env.id": "CartPole-v1", "agent.lr": 1e-3}),
              group(**dqn, **{"env.id": "Acrobot-v1"})]
    assert labels(groups) == ["dqn on CartPole-v1 (1 seed)",
                              "ppo on CartPole-v1: agent.lr=0.0003 (1 seed)",
                              "ppo on CartPole-v1: agent.lr=0.001 (1 seed)",
                              "dqn on Acrobot-v1 (1 seed)"]


def test_an_agent_s_settings_are_its_hyperparameters_without_writing_hparams() -> None:
    """``LearningAgent.hparams`` defaults to the agent's config dataclass, so an agent of your
    own that forgets to override it still has its settings compared on resume."""
    import dataclasses
    from typing import Any

    from rltrain import DQN, DQNConfig
    from rltrain.agents.base import LearningAgent

    @dataclasses.dataclass
    class MyConfig:
        lr: float = 1e-3
        layers: int = 2

    class Mine(LearningAgent):
        def __init__(self, config: MyConfig) -> None:
            super().__init__()
            self.config = config

        def check_spaces(self, observation_space: Any, action_space: Any) -> None:
            pass

        def build(self, observation_space: Any, action_space: Any) -> None:
            pass

        def configure_optimizers(self) -> Any:
            return {}

        def training_step(self, batch: Any, optim: Any) -> Any:
            return {}

        def policy(self, device: Any) -> Any:
            return None

    assert Mine(MyConfig(lr=3e-4)).hparams() == {"agent/lr": 3e-4, "agent/layers": 2}
    assert DQN(DQNConfig(lr=5e-4)).hparams()["agent/lr"] == 5e-4
    unconfigured: Any = Mine(MyConfig())
    unconfigured.config = None
    assert unconfigured.hparams() == {}

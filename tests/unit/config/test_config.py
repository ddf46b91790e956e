"""Structured run configs: composing, type checks, suggestions, building, and the Hydra app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from omegaconf import OmegaConf

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.agents.dreamer import DreamerConfig
from rltrain.config.files import ConfigError, save_config, shipped_configs
from rltrain.config.schema import compose, load_config, validate
from rltrain.settings.registry import AGENTS, registered
from rltrain.trainer import build


def test_defaults_alone_make_a_dqn_cartpole_run() -> None:
    config = compose()
    assert config.agent.name == "dqn" and config.strategy.name == "off_policy"
    assert config.env.id == "CartPole-v1"
    assert config.agent.lr == DQNConfig().lr
    assert config.trainer.num_steps == Trainer().num_steps


def test_files_merge_left_to_right_then_overrides_win(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("agent:\n  lr: 0.01\n  gamma: 0.9\n")
    second.write_text("agent:\n  lr: 0.02\n")
    config = compose([first, second], ["agent.gamma=0.5", "strategy.seed=7"])
    assert (config.agent.lr, config.agent.gamma, config.strategy.seed) == (0.02, 0.5, 7)


def test_values_are_converted_to_the_declared_types() -> None:
    config = compose([], ["trainer.num_steps=2000", "agent.hidden_sizes=[8,8]",
                          "trainer.gradient_clip_val=null"])
    assert config.trainer.num_steps == 2000 and isinstance(config.trainer.num_steps, int)
    assert list(config.agent.hidden_sizes) == [8, 8]
    assert config.trainer.gradient_clip_val is None


@pytest.mark.parametrize(("overrides", "message"), [
    (["agent.lrr=1"], "Unknown config key 'agent.lrr'. Did you mean 'agent.lr'?"),
    (["strategy.batchsize=3"], "Did you mean 'strategy.batch_size'?"),
    (["trainer.eval_intervals=5"], "Did you mean 'trainer.eval_interval'?"),
    (["env.idd=x"], "Did you mean 'env.id'?"),
    (["agnt.lr=1"], "Did you mean 'agent'?"),
    (["trainer.num_steps=many"], "trainer.num_steps: Value 'many' of type 'str' could not be "
                                 "converted to Integer"),
    (["strategy.name=of_policy"], "unknown strategy 'of_policy'. Did you mean 'off_policy'?"),
    (["trainer.dtype=half"], "dtype must be one of"),
    (["trainer.accumulate_grad_batches=0"], "accumulate_grad_batches must be >= 1"),
    (["strategy.batch_size=0"], "batch_size must be >= 1"),
    (["env.id=CartPole-v9"], "env.id: Unknown Gymnasium environment id 'CartPole-v9'"),
    (["trainer.compile=2"], "trainer.compile must be true, false or a string; got 2 (int)"),
    (["env.atari.foo=1"], "Valid keys under 'env.atari': noop_max, frame_skip, screen_size"),
    (["env.atari.episodic_life=2"], "env.atari.episodic_life must be true or false; got 2."),
    (["env.atari.life_noops=yes please"],
     "env.atari.life_noops must be true or false (or null); got 'yes please'."),
    (["trainer.logger=3"], "logger must be a list of logger names (tensorboard, csv, wandb, "
                            "mlflow), one name, true or false; got 3"),
])
def test_a_wrong_key_or_value_is_a_config_error_naming_it(overrides: list[str],
                                                           message: str) -> None:
    with pytest.raises(ConfigError) as error:
        compose([], overrides)
    assert message in str(error.value)


def test_a_typo_key_in_a_yaml_file_suggests_the_closest_key(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("strategy:\n  warmup_step: 10\n")
    with pytest.raises(ConfigError, match=r"Did you mean 'strategy\.warmup_steps'"):
        compose([path])


def test_every_shipped_config_validates_and_names_a_registered_agent() -> None:
    assert "dqn_cartpole" in shipped_configs()
    for name in shipped_configs():
        config = compose([name])
        assert config.agent.name in AGENTS
    assert (ROOT / "configs" / "dqn_cartpole.yaml").is_file()  # the repository's link


def test_the_dreamer_defaults_are_the_benchmarked_pendulum_config() -> None:
    # docs/dreamer.md: DreamerConfig() is what configs/dreamer_pendulum.yaml trains
    composed = compose(["dreamer_pendulum"]).agent
    for key, value in asdict(DreamerConfig()).items():
        assert composed[key] == value, key


def test_a_saved_config_loads_back_equal(tmp_path: Path) -> None:
    config = compose(["dqn_cartpole"], ["agent.lr=3e-4"])
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_build_makes_the_trainer_strategy_agent_and_env_the_config_names() -> None:
    run = build(compose(["dqn_cartpole"], ["agent.lr=1e-3", "strategy.batch_size=32",
                                           "trainer.dtype=bfloat16", "env.id=Acrobot-v1",
                                           "env.kwargs={max_episode_steps: 100}"]))
    assert isinstance(run.agent, DQN) and run.agent.config.lr == 1e-3
    assert type(run.agent.config) is DQNConfig  # the plain config, without the section's name
    assert isinstance(run.trainer.strategy, OffPolicyStrategy)
    assert run.trainer.strategy.config == OffPolicyConfig(batch_size=32)
    assert run.trainer.dtype == "bfloat16" and run.trainer.torch_dtype == torch.bfloat16
    assert run.trainer.return_threshold == 475.0
    env = run.env
    assert not isinstance(env, str) and env().spec.max_episode_steps == 100  # type: ignore[operator,union-attr]


def test_the_config_a_trainer_writes_validates_and_rebuilds_the_same_run() -> None:
    trainer = Trainer(num_steps=1234, eval_episodes=4, dtype="bfloat16",
                      strategy=OffPolicyStrategy(OffPolicyConfig(seed=5)))
    described = trainer.run_config("CartPole-v1", DQN(DQNConfig(lr=1e-4)))
    rebuilt = build(validate(described))
    assert rebuilt.trainer.settings() == trainer.settings()
    assert rebuilt.trainer.strategy.config == OffPolicyConfig(seed=5)  # type: ignore[attr-defined]
    assert isinstance(rebuilt.agent, DQN) and rebuilt.agent.config == DQNConfig(lr=1e-4)
    assert rebuilt.env == "CartPole-v1"


def test_from_config_accepts_trainer_arguments_beyond_the_config() -> None:
    trainer = Trainer.from_config(compose(), callbacks=(), overwrite=True)
    assert trainer.overwrite is True
    assert trainer.config is not None and trainer.config.agent.name == "dqn"


@pytest.mark.slow
def test_the_hydra_example_trains_with_overrides_and_refuses_a_typo(tmp_path: Path) -> None:
    pytest.importorskip("hydra")
    script = ROOT / "examples" / "hydra_app.py"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.run(
        [sys.executable, str(script), "trainer.num_steps=1200", "trainer.eval_interval=1200",
         "trainer.eval_episodes=2", "agent.lr=1e-3", "agent.hidden_sizes=[32]",
         "trainer.enable_progress_bar=false", f"hydra.run.dir={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    out = tmp_path / "out"
    assert (out / ".hydra" / "config.yaml").is_file()  # Hydra's own record
    saved = OmegaConf.load(out / "config.yaml")  # rltrain's, in the same folder
    assert saved.agent.lr == 1e-3 and saved.trainer.num_steps == 1200
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 1200
    assert f"best evaluation return: {summary['best_eval_return']}" in run.stdout

    typo = subprocess.run(
        [sys.executable, str(script), "agent.lrr=1e-3", f"hydra.run.dir={tmp_path / 'bad'}"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False)
    assert typo.returncode != 0
    assert "Key 'lrr' not in" in typo.stderr and "full_key: agent.lrr" in typo.stderr
    assert not (tmp_path / "bad" / "summary.json").exists()


def test_an_agent_of_ones_own_can_be_registered_and_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class TinyDQN(DQN):
        pass

    monkeypatch.setitem(AGENTS, "tiny", registered("tiny", TinyDQN, DQNConfig, "a small DQN"))
    run = build(compose([], ["agent.name=tiny", "agent.hidden_sizes=[4]"]))
    assert type(run.agent) is TinyDQN and run.agent.config.hidden_sizes == [4]
    with pytest.raises(ConfigError, match=r"Did you mean 'agent\.hidden_sizes'"):
        compose([], ["agent.name=tiny", "agent.hiden_sizes=[4]"])

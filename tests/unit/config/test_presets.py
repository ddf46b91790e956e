"""The shipped presets (rltrain/config/shipped/*.yaml): each composes and validates, names an env
that is registered or the extra it needs, says what it is on its first line, and the RL-Zoo DQN
presets hold RL-Zoo's values (hyperparams/dqn.yml) in rltrain's units and train."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from rltrain.config.files import SHIPPED_CONFIGS, shipped_configs
from rltrain.config.schema import compose
from rltrain.settings.registry import AGENTS, STRATEGIES
from rltrain.trainer import build

QUIET = ["trainer.logger=false", "trainer.enable_progress_bar=false",
         "trainer.enable_console=false", "trainer.enable_metrics_file=false"]

#: rl-baselines3-zoo hyperparams/dqn.yml, as SB3 counts: target_update_interval in env steps,
#: exploration_fraction of n_timesteps, gradient_steps -1 = the env steps of each round.
RL_ZOO_DQN = {
    "dqn_acrobot": dict(env="Acrobot-v1", n_timesteps=100_000, learning_rate=6.3e-4,
                        batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
                        target_update_interval=250, train_freq=4, gradient_steps=-1,
                        exploration_fraction=0.12, exploration_final_eps=0.1),
    "dqn_mountaincar": dict(env="MountainCar-v0", n_timesteps=120_000, learning_rate=4e-3,
                            batch_size=128, buffer_size=10_000, learning_starts=1000,
                            gamma=0.98, target_update_interval=600, train_freq=16,
                            gradient_steps=8, exploration_fraction=0.2,
                            exploration_final_eps=0.07),
    "dqn_lunarlander": dict(env="LunarLander-v3", n_timesteps=100_000, learning_rate=6.3e-4,
                            batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
                            target_update_interval=250, train_freq=4, gradient_steps=-1,
                            exploration_fraction=0.12, exploration_final_eps=0.1),
}


def comment(name: str) -> str:
    """The leading comment block of a shipped config."""
    lines = (SHIPPED_CONFIGS / f"{name}.yaml").read_text().splitlines()
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block)


@pytest.mark.parametrize("name", shipped_configs())
def test_every_shipped_config_composes_and_validates(name: str) -> None:
    config = compose([name])
    assert config.agent.name in AGENTS
    assert config.strategy.name in STRATEGIES
    assert config.trainer.num_steps >= 1
    first = comment(name).splitlines()[0]
    assert first.startswith("# ") and len(first) > 10, f"{name}: no one-line description"


@pytest.mark.parametrize("name", shipped_configs())
def test_every_preset_env_is_registered_or_names_its_extra(name: str) -> None:
    env_id = str(compose([name]).env.id)
    text = comment(name)
    if env_id not in gym.registry:  # another package's env ("module:Id" or imported first)
        assert "pip install" in text, f"{name}: {env_id} needs a package; say which"
        return
    entry_point = str(gym.registry[env_id].entry_point)
    if "box2d" in entry_point:
        assert 'pip install "rltrain[box2d]"' in text, f"{name}: {env_id} needs Box2D"


@pytest.mark.parametrize("name", sorted(RL_ZOO_DQN))
def test_the_dqn_presets_hold_rl_zoos_values_in_rltrains_units(name: str) -> None:
    zoo = RL_ZOO_DQN[name]
    config = compose([name])
    strategy, agent, trainer = config.strategy, config.agent, config.trainer
    assert config.env.id == zoo["env"]
    assert trainer.num_steps == zoo["n_timesteps"]
    assert agent.lr == zoo["learning_rate"] and agent.gamma == zoo["gamma"]
    assert strategy.batch_size == zoo["batch_size"]
    assert strategy.buffer_size == zoo["buffer_size"]
    assert strategy.warmup_steps == zoo["learning_starts"]
    assert strategy.num_envs == 1
    assert strategy.train_interval == zoo["train_freq"]
    gradient_steps = zoo["gradient_steps"]
    assert strategy.train_steps == (zoo["train_freq"] if gradient_steps == -1 else gradient_steps)
    # rltrain counts the target interval in gradient steps, SB3 in env steps
    assert agent.target_update_interval == (
        zoo["target_update_interval"] * strategy.train_steps / strategy.train_interval)
    assert agent.tau == 1.0
    assert agent.epsilon_start == 1.0 and agent.epsilon_end == zoo["exploration_final_eps"]
    assert agent.exploration_steps == round(zoo["exploration_fraction"] * zoo["n_timesteps"])
    assert list(agent.hidden_sizes) == [256, 256]
    assert trainer.gradient_clip_val == 10.0  # SB3 DQN's max_grad_norm
    assert not agent.double_q and not agent.dueling  # SB3's DQN
    assert "rl-baselines3-zoo" in comment(name)


@pytest.mark.parametrize("name, extra", [("dqn_acrobot", []),
                                         ("dqn_mountaincar", ["strategy.warmup_steps=100"])])
def test_a_short_run_of_the_preset_trains_and_evaluates(name: str, extra: list[str],
                                                        tmp_path: Path) -> None:
    config = compose([name], ["trainer.num_steps=300", "trainer.eval_interval=150",
                              "trainer.eval_episodes=1", f"trainer.run_dir={tmp_path}/run",
                              *QUIET, *extra])
    run = build(config)
    summary = run.fit().summary
    assert summary.env_steps == 300
    expected = (300 // config.strategy.train_interval
                - config.strategy.warmup_steps // config.strategy.train_interval)
    assert summary.gradient_steps == expected * config.strategy.train_steps
    assert summary.best_eval_return is not None
    assert (tmp_path / "run" / "config.yaml").is_file()

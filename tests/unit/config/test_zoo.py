"""``zoo:ALGO/ENV_ID``: RL-Zoo's entries translated into configs, the hand-written presets
equal to their translations, units (train_freq, gradient_steps -1, target_update_interval,
exploration_fraction, lin_ schedules, normalize, policy_kwargs), refusals naming the key, and a
hostile entry read as data, never evaluated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import rltrain
from omegaconf import OmegaConf

from rltrain import build, compose
from rltrain.config import zoo
from rltrain.config.files import ConfigError

#: Each hand-written preset and the RL-Zoo entry it was written from, with the settings where
#: it differs on purpose.
PRESETS: list[tuple[str, str, dict[str, Any]]] = [
    ("dqn_cartpole", "zoo:dqn/CartPole-v1", {"agent.double_q": (True, False)}),
    ("dqn_acrobot", "zoo:dqn/Acrobot-v1", {}),
    ("dqn_mountaincar", "zoo:dqn/MountainCar-v0", {}),
    ("dqn_lunarlander", "zoo:dqn/LunarLander-v3", {}),
    ("qrdqn_cartpole", "zoo:qrdqn/CartPole-v1", {}),
    ("qrdqn_acrobot", "zoo:qrdqn/Acrobot-v1", {}),
    ("ppo_cartpole", "zoo:ppo/CartPole-v1", {}),
    ("ppo_acrobot", "zoo:ppo/Acrobot-v1", {}),
    ("ppo_lunarlander", "zoo:ppo/LunarLander-v3", {}),
    ("ppo_pendulum_gsde", "zoo:ppo/Pendulum-v1", {}),
    ("ppo_halfcheetah", "zoo:ppo/HalfCheetah-v4", {}),
    ("sac_pendulum", "zoo:sac/Pendulum-v1", {}),
    ("sac_halfcheetah", "zoo:sac/HalfCheetah-v4", {}),
    ("td3_pendulum", "zoo:td3/Pendulum-v1", {}),
    ("td3_halfcheetah", "zoo:td3/HalfCheetah-v4", {}),
    ("ppo_lstm_cartpole_novel", "zoo:ppo_lstm/CartPoleNoVel-v1", {}),
]


def differences(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    left, right = OmegaConf.to_container(a), OmegaConf.to_container(b)
    assert isinstance(left, dict) and isinstance(right, dict)
    found = {f"{section}.{key}": (left[section].get(key), right[section].get(key))
             for section in ("strategy", "agent") for key in {*left[section], *right[section]}
             if left[section].get(key) != right[section].get(key)}
    for key in ("num_steps", "gradient_clip_val"):
        if left["trainer"][key] != right["trainer"][key]:
            found[f"trainer.{key}"] = (left["trainer"][key], right["trainer"][key])
    if left["env"]["wrappers"] != right["env"]["wrappers"]:
        found["env.wrappers"] = (left["env"]["wrappers"], right["env"]["wrappers"])
    return found


@pytest.mark.filterwarnings("ignore:zoo:")
@pytest.mark.parametrize(("preset", "entry", "on_purpose"), PRESETS,
                         ids=[p for p, _, _ in PRESETS])
def test_each_hand_written_preset_is_its_zoo_entrys_translation(
        preset: str, entry: str, on_purpose: dict[str, Any]) -> None:
    assert differences(compose([preset]), compose([entry])) == on_purpose


def test_the_units_are_translated() -> None:
    acrobot = compose(["zoo:dqn/Acrobot-v1"])  # train_freq 4, gradient_steps -1, tui 250
    assert (acrobot.strategy.train_interval, acrobot.strategy.train_steps) == (4, 4)
    assert acrobot.agent.target_update_interval == 250  # env steps -> gradient steps
    assert acrobot.agent.exploration_steps == 12_000  # 0.12 x 100,000
    cartpole = compose(["zoo:dqn/CartPole-v1"])  # tui 10 < a round of 256 env steps
    assert cartpole.agent.target_update_interval == 128  # once per round, as SB3 copies
    ppo = compose(["zoo:ppo/CartPole-v1"])  # lin_0.001, lin_0.2, 8 envs
    assert (ppo.agent.lr, ppo.agent.anneal_lr, ppo.agent.anneal_clip_range) == (1e-3, True, True)
    assert ppo.strategy.num_envs == 8
    cheetah = compose(["zoo:ppo/HalfCheetah-v4"])  # normalize: true
    assert cheetah.agent.normalize_observations and cheetah.agent.normalize_rewards
    td3 = compose(["zoo:td3/Pendulum-v1"])  # noise_type normal, noise_std 0.1
    assert td3.agent.exploration_noise == 0.1 and td3.agent.hidden_sizes == [400, 300]
    atari = compose(["zoo:dqn/ALE/Pong-v5"])  # the "atari" entry
    assert atari.env.atari.frame_stack == 4 and atari.strategy.warmup_steps == 100_000
    novel = compose(["zoo:ppo_lstm/CartPoleNoVel-v1"])
    assert novel.env.id == "CartPole-v1" and novel.agent.recurrent == "lstm"


def test_gsde_entries_take_sb3s_gsde_settings() -> None:
    car = compose(["zoo:sac/MountainCarContinuous-v0"])  # use_expln=True, log_std_init -3.67
    assert car.agent.use_sde and car.agent.sde_expln and car.agent.sde_full_std
    assert car.agent.sde_learn_features  # SB3's SAC learns them; its PPO does not
    assert car.agent.log_std_init == -3.67 and car.agent.hidden_sizes == [64, 64]
    ppo = compose(["zoo:ppo/MountainCarContinuous-v0"])  # batch 256 > a rollout of 8 x 1
    assert ppo.agent.use_sde and not ppo.agent.sde_learn_features
    assert ppo.strategy.batch_size == 8  # SB3 cuts the minibatch to the rollout


def test_another_version_of_an_env_takes_the_tuned_one_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="RL-Zoo tuned HalfCheetah-v4, not HalfCheetah-v5"):
        config = compose(["zoo:sac/HalfCheetah-v5"])
    assert config.env.id == "HalfCheetah-v5" and config.strategy.warmup_steps == 10_000


@pytest.mark.parametrize(("entry", "message"), [
    ("zoo:sac/LunarLanderContinuous-v3",
     r"RL-Zoo's learning_rate: 'lin_7.3e-4' has no rltrain equivalent \(sac has no "
     r"learning-rate schedule\)"),
    ("zoo:a2c/CartPole-v1", r"rltrain translates RL-Zoo's \['dqn', 'ppo', 'ppo_lstm', "
                            r"'qrdqn', 'sac', 'td3'\]; not 'a2c'"),
    ("zoo:dqn/Pendulum-v1", r"RL-Zoo has no dqn entry for Pendulum-v1; it has \["),
    ("zoo:dqn", r"write zoo:ALGO/ENV_ID"),
])
def test_what_cannot_be_translated_is_refused_naming_it(entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compose([entry])


def test_a_hostile_entry_is_read_as_data_and_never_evaluated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    hyperparams = tmp_path / "dqn.yml"
    hyperparams.write_text(
        "CartPole-v1:\n  n_timesteps: 1000\n  policy: MlpPolicy\n"
        f"  policy_kwargs: \"dict(net_arch=__import__('pathlib').Path('{marker}').touch())\"\n")
    monkeypatch.setattr(zoo, "zoo_file", lambda algo: hyperparams)
    with pytest.raises(ConfigError, match=r"policy_kwargs: .*is not data rltrain reads"):
        compose(["zoo:dqn/CartPole-v1"])
    assert not marker.exists()
    hyperparams.write_text("CartPole-v1:\n  n_timesteps: 1000\n  policy: MlpPolicy\n"
                           "  callback: my.Callback\n")
    with pytest.raises(ConfigError, match=r"RL-Zoo's callback: 'my.Callback' has no rltrain "
                                          r"equivalent \(a setting rltrain does not have\)"):
        compose(["zoo:dqn/CartPole-v1"])


@pytest.mark.slow
def test_the_command_line_prints_a_translation_and_refuses_in_one_line(tmp_path: Path) -> None:
    done = rltrain("fit", "zoo:qrdqn/Acrobot-v1", "strategy.seed=3", "--print-config",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = OmegaConf.create(done.stdout)
    assert printed.agent.name == "qrdqn" and printed.agent.n_quantiles == 25
    assert printed.strategy.seed == 3  # overrides apply on top
    done = rltrain("fit", "zoo:sac/LunarLanderContinuous-v3", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "learning_rate" in done.stderr and not (tmp_path / "runs").exists()


def test_the_command_line_says_what_a_zoo_entry_became(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rltrain.cli import main

    assert main(["fit", "zoo:ppo/CartPole-v1", "--print-config"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("# zoo:ppo/CartPole-v1: RL-Zoo's ppo entry (")
    for setting in ("trainer.num_steps=100000", "strategy.num_envs=8",
                    "strategy.n_steps=32", "agent.gamma=0.98"):
        assert setting in first


#: An RL-Zoo entry that sets nothing but its budget: SB3's defaults, per algorithm, on an env
#: of the right kind.
EMPTY_ENTRIES = [("dqn", "CartPole-v1"), ("qrdqn", "CartPole-v1"), ("ppo", "CartPole-v1"),
                 ("sac", "Pendulum-v1"), ("td3", "Pendulum-v1")]


#: Where an agent's own default is its paper's rather than SB3's: SB3's TD3 adds no action
#: noise unless given some; the TD3 paper explores with N(0, 0.1).
PAPERS_OVER_SB3 = {"td3": {"agent.exploration_noise": (0.0, 0.1)}}


@pytest.mark.parametrize(("algo", "env_id"), EMPTY_ENTRIES, ids=[a for a, _ in EMPTY_ENTRIES])
def test_an_agents_own_defaults_are_sb3s(algo: str, env_id: str) -> None:
    """An agent's own defaults and its own schedule, which a run without a preset takes, are
    SB3's (issue 48, item 3): an entry that sets nothing (SB3's defaults, as the zoo module
    records them for every translation) translates to ``--no-preset agent.name=...``, key for
    key, with epsilon decaying over the same env steps."""
    num_steps = 100_000
    translated = OmegaConf.create(zoo.translate_entry(
        algo, env_id, {"n_timesteps": num_steps, "policy": "MlpPolicy"}))
    agent = translated.agent.name
    own = compose([], [f"agent.name={agent}", f"env.id={env_id}",
                       f"trainer.num_steps={num_steps}"])
    exploration = translated.agent.pop("exploration_steps", None)
    found = {f"{section}.{key}": (value, own[section].get(key))
             for section in ("strategy", "agent")
             for key, value in translated[section].items() if own[section].get(key) != value}
    assert found == PAPERS_OVER_SB3.get(algo, {})
    if exploration is not None:  # None in the agent's own config: a share of the run
        assert own.agent.exploration_steps is None
        made = build(own).agent
        made.num_steps = num_steps
        assert made.exploration_steps == exploration

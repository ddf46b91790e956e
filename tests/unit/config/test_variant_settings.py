"""The bad-input rows of the variants' settings (n-step, prioritized replay, C51, QR-DQN, PQN,
recurrent PPO): each refused with a message naming the setting, from Python and from the
``rltrain`` command (an exit status and one line, no traceback, nothing written), and an
altered recurrent rollout refused on resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import rltrain

from rltrain.agents import C51Config, PQNConfig, QRDQNConfig
from rltrain.agents.ppo_config import PPOConfig
from rltrain.buffers.recurrent import RecurrentRollout
from rltrain.settings.loops import OffPolicyConfig

ROWS: list[tuple[Any, dict[str, Any], str]] = [
    (OffPolicyConfig, {"n_step": 0}, r"^OffPolicyConfig: n_step must be >= 1"),
    (OffPolicyConfig, {"priority_alpha": 1.5}, r"priority_alpha must be in \[0, 1\]; got 1.5"),
    (OffPolicyConfig, {"priority_beta": -0.1}, r"priority_beta must be in \[0, 1\]"),
    (OffPolicyConfig, {"priority_epsilon": 0.0}, r"priority_epsilon must be > 0"),
    (C51Config, {"n_atoms": 1}, r"^C51Config: n_atoms must be >= 2"),
    (C51Config, {"v_min": 5.0, "v_max": 5.0}, r"v_min \(5.0\) must be below v_max \(5.0\)"),
    (C51Config, {"lr": -1.0}, r"^C51Config: lr must be > 0"),
    (QRDQNConfig, {"n_quantiles": 0}, r"^QRDQNConfig: n_quantiles must be >= 1"),
    (QRDQNConfig, {"kappa": 0.0}, r"kappa must be > 0"),
    (QRDQNConfig, {"adam_eps": 0.0}, r"^QRDQNConfig: adam_eps must be > 0"),
    (PQNConfig, {"q_lambda": 1.2}, r"^PQNConfig: q_lambda must be in \[0, 1\]"),
    (PQNConfig, {"exploration_fraction": 2.0}, r"exploration_fraction must be in \[0, 1\]"),
    (PQNConfig, {"hidden_sizes": [0]}, r"hidden_sizes must be positive widths"),
    (PPOConfig, {"recurrent": "rnn"}, r"recurrent must be one of \['lstm', 'gru'\] or null"),
    (PPOConfig, {"recurrent": "gru", "recurrent_hidden_size": 0},
     r"recurrent_hidden_size must be >= 1"),
]


@pytest.mark.parametrize(("config", "kwargs", "message"), ROWS,
                         ids=[f"{c.__name__}-{'-'.join(k)}" for c, k, _ in ROWS])
def test_each_bad_setting_is_refused_naming_it(config: Any, kwargs: dict[str, Any],
                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**kwargs)


# One command line (a process, 3 s) in the inner loop; the rest with the slow checks: each
# refusal's message is checked in-process above.
@pytest.mark.parametrize(("overrides", "message"), [
    (["strategy.n_step=0"], "n_step must be >= 1"),
    pytest.param(["strategy.prioritized=maybe"], "prioritized", marks=pytest.mark.slow),
    pytest.param(["agent.name=c51", "agent.v_min=1", "agent.v_max=0"], "v_min",
                 marks=pytest.mark.slow),
    pytest.param(["agent.name=ppo", "agent.recurrent=transformer"], "recurrent must be one of",
                 marks=pytest.mark.slow),
    pytest.param(["agent.name=dreamer", "strategy.n_step=3"],
                 "Dreamer does not learn from n-step", marks=pytest.mark.slow),
])
def test_the_command_line_refuses_them_in_one_line(overrides: list[str], message: str,
                                                   tmp_path: Path) -> None:
    done = rltrain("fit", *overrides, "trainer.num_steps=100", "trainer.run_dir=run",
                   cwd=tmp_path)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_an_altered_recurrent_rollout_is_refused_on_load() -> None:
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    rollout = RecurrentRollout(4, num_envs=2, observation_space=space,
                               action_space=gym.spaces.Discrete(2), state_size=6)
    for bad in (torch.zeros(2, 5), torch.full((2, 6), float("nan")),
                torch.zeros(2, 6, dtype=torch.float64), "state"):
        state = rollout.state_dict()
        state["initial_state"] = bad
        with pytest.raises(ValueError, match="initial_state is not a finite float32 tensor"):
            RecurrentRollout(4, num_envs=2, observation_space=space,
                             action_space=gym.spaces.Discrete(2),
                             state_size=6).load_state_dict(state)

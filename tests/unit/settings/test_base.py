"""One way to declare and check a setting (rltrain/settings/base.py): the bounds beside the
default, checked in order where the value enters, with one message per rule; every config a
run is made of declares its settings that way."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest

from rltrain.agents.td3 import DDPGConfig
from rltrain.config.trainer_config import TrainerConfig
from rltrain.settings.base import (
    Bounds,
    Settings,
    check_setting,
    discount_factor,
    learning_rate,
    setting,
    widths,
)
from rltrain.settings.registry import AGENTS, STRATEGIES


@dataclass
class Example(Settings):
    lr: float = learning_rate(3e-4)
    gamma: float = discount_factor()
    hidden_sizes: list[int] = widths(64, 64)
    warmup: int = setting(1_000, ge=0, unit="env steps")
    every: int = setting(1, ge=1, unit="env steps")
    cap: int | None = setting(None, ge=1, none="for no cap")
    kind: str = setting("a", choices=("a", "b"))
    flag: bool = True
    maybe: bool | None = None

    def rules(self) -> list[tuple[bool, str]]:
        return [(self.lr < 1 or self.warmup > 0, "an lr >= 1 needs a warm-up.")]


@pytest.mark.parametrize(("changes", "message"), [
    ({"lr": 0}, "Example: lr must be > 0; got 0."),
    ({"gamma": 1.5}, r"Example: gamma must be in [0, 1]; got 1.5."),
    ({"hidden_sizes": [64, 0]}, "Example: hidden_sizes must be positive widths; got [64, 0]."),
    ({"warmup": -1}, "Example: warmup must be >= 0 env steps; got -1."),
    ({"every": 0}, "Example: every must be >= 1 env step; got 0."),
    ({"cap": 0}, "Example: cap must be >= 1, or None for no cap; got 0."),
    ({"kind": "c"}, "Example: kind must be one of 'a', 'b'; got 'c'."),
    ({"lr": 2.0, "warmup": 0}, "Example: an lr >= 1 needs a warm-up."),
    ({"lr": math.inf}, "Example: lr must be a finite number, not infinite or NaN; got inf."),
    ({"lr": math.nan}, "Example: lr must be > 0; got nan."),
    ({"flag": 2}, "Example: flag must be True or False"),
    ({"flag": None}, "Example: flag must be True or False (a config"),
    ({"maybe": 2}, "Example: maybe must be True or False (or None)"),
    ({"every": True}, "Example: every must be >= 1 env step; got True."),
])
def test_each_rule_says_the_setting_its_bounds_and_the_value(changes: dict[str, object],
                                                             message: str) -> None:
    with pytest.raises(ValueError) as error:
        Example(**changes)  # type: ignore[arg-type]
    assert str(error.value).startswith(message), str(error.value)


def test_defaults_and_edges_pass_and_lists_are_fresh() -> None:
    first, second = Example(), Example(gamma=0.0, cap=None, warmup=0, every=1, kind="b",
                                       maybe=False)
    first.hidden_sizes.append(1)
    assert Example().hidden_sizes == [64, 64] and second.gamma == 0.0
    assert Example(every=10**400).every == 10**400  # an int beyond any float stays exact


def test_the_first_broken_bound_in_declaration_order_answers() -> None:
    with pytest.raises(ValueError, match=r"^Example: lr "):
        Example(lr=0, gamma=2)


def test_a_subclass_that_changes_a_default_keeps_the_bounds() -> None:
    assert DDPGConfig().policy_delay == 1
    with pytest.raises(ValueError, match=r"^DDPGConfig: policy_delay must be >= 1 gradient step"):
        DDPGConfig(policy_delay=0)


def test_a_class_that_takes_a_setting_as_an_argument_checks_the_same_bounds() -> None:
    bounds = Bounds(gt=0, finite=True, none="for no limit",
                    says="a finite number of seconds > 0 (or None for no limit)")
    check_setting("timeout", None, bounds)
    check_setting("timeout", 2.5, bounds)
    for bad in (0, -1.0, math.inf, math.nan, True, "1"):
        with pytest.raises(ValueError, match=r"^timeout must be a finite number of seconds > 0 "
                                             r"\(or None for no limit\); got "):
            check_setting("timeout", bad, bounds)


def test_the_trainer_and_the_checkpointer_share_one_declaration(tmp_path: object) -> None:
    from rltrain.checkpoint import Checkpointer

    messages = []
    for make in (lambda: TrainerConfig(checkpoint_interval=0),
                 lambda: Checkpointer(str(tmp_path), interval=0)):
        with pytest.raises(ValueError) as error:
            make()
        messages.append(str(error.value).removeprefix("trainer: "))
    assert messages[0] == messages[1], messages


def test_every_config_a_run_is_made_of_declares_its_settings_this_way() -> None:
    configs = [entry.config for entry in (*AGENTS.values(), *STRATEGIES.values())]
    assert len(configs) >= 10
    for config in (*configs, TrainerConfig):
        assert issubclass(config, Settings), config
        assert "__post_init__" not in vars(config) or config is TrainerConfig, (
            f"{config.__name__} checks its settings in its own __post_init__: declare them "
            "with setting() and rules()")
        declared = [f for f in dataclasses.fields(config) if f.metadata]
        assert declared, config


def test_an_n_step_window_longer_than_the_replay_is_refused() -> None:
    from rltrain.settings.loops import OffPolicyConfig

    with pytest.raises(ValueError, match=r"OffPolicyConfig: n_step \(50\) is longer than the "
                                         r"replay holds: a window spans n_step x num_envs = "
                                         r"100 transitions, buffer_size is 64"):
        OffPolicyConfig(n_step=50, num_envs=2, buffer_size=64, batch_size=32)
    assert OffPolicyConfig(n_step=32, num_envs=2, buffer_size=64, batch_size=32).n_step == 32

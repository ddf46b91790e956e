"""Which shipped preset ``rltrain fit`` starts from when no config file is named.

A preset is tuned for one env and agent (``ppo_cartpole``: PPO on CartPole-v1). It is chosen
only where it fits what the command line names:

- ``env.id`` and the agent (``dqn`` by default) both named, and a preset tuned for that pair:
  that preset (an ``<agent>_atari`` preset is tuned for every ALE game: ``ALE/Pong-v5``);
- ``env.id`` named, and no preset tuned for it with that agent: none. The run starts from the
  agent's and strategy's own defaults, never from another env's tuned settings (a discount,
  a learning-rate schedule, a return threshold of CartPole's would silently misfit);
- no ``env.id``: the agent's own default preset, the first of its presets whose environment
  the installed packages can make, CartPole-v1 first, then Gymnasium's classic control
  (``dqn_cartpole``, ``ppo_cartpole``; ``sac_pendulum``, not ``sac_lunarlander``, which needs
  Box2D, nor ``sac_halfcheetah``, which needs MuJoCo);
- an agent of the user's own (``agent._target_``), or ``--no-preset``: none.

Each choice comes with one line that says what was chosen and why.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import gymnasium as gym
from omegaconf import OmegaConf

from rltrain.config.files import load_yaml, preset_fits, shipped_configs


@dataclass(frozen=True)
class PresetChoice:
    """The shipped configs to start from, and the line that says why.

    Attributes:
        files: ``[]`` (the defaults) or one shipped config's name.
        note: What was chosen and why, in one line.
    """

    files: list[str]
    note: str


def choose_preset(overrides: list[str], *, use_presets: bool = True) -> PresetChoice:
    """The preset ``rltrain fit`` starts from for these ``key=value`` ``overrides`` (module
    docstring); ``use_presets=False`` (``--no-preset``) always gives the defaults."""
    keys = {key: value.strip() for key, _, value in (o.partition("=") for o in overrides)}
    if "agent._target_" in keys or keys.get("agent", "").startswith("{"):
        return PresetChoice([], "an agent of your own: starting from the defaults, no preset")
    agent = keys.get("agent.name", "dqn")
    strategy = keys.get("strategy.name")
    if not use_presets:
        return PresetChoice([], f"--no-preset: starting from {agent}'s own defaults")
    presets = [name for name in shipped_configs()
               if _value(name, "agent.name") == agent
               and strategy in (None, _value(name, "strategy.name"))]
    env_id = keys.get("env.id")
    if env_id is not None:
        tuned = [name for name in presets if preset_fits(name, env_id)]
        if tuned:
            what = (f"every Atari game ({env_id})"
                    if _value(tuned[0], "env.atari") is not None else env_id)
            return PresetChoice(tuned[:1], f"starting from the preset {tuned[0]}, tuned for "
                                           f"{what} with {agent}")
        return PresetChoice([], f"no shipped preset is tuned for {env_id} with {agent}: "
                                f"starting from {agent}'s own defaults (presets of {agent}: "
                                f"{', '.join(presets) or 'none'})")
    runnable = sorted((name for name in presets if _makeable(str(_value(name, "env.id")))),
                      key=lambda name: (_value(name, "env.id") != "CartPole-v1",
                                        not _classic(str(_value(name, "env.id"))), name))
    if not runnable:
        return PresetChoice([], f"no shipped preset of {agent} runs with the installed "
                                f"packages: starting from {agent}'s own defaults")
    env = _value(runnable[0], "env.id")
    return PresetChoice(runnable[:1], f"starting from {agent}'s default preset {runnable[0]} "
                                      f"({env}); name another env with env.id=...")


def _value(preset: str, key: str) -> object:
    return OmegaConf.select(load_yaml(preset), key)


def _classic(env_id: str) -> bool:
    """Whether ``env_id`` is one of Gymnasium's classic-control envs (made with no extra)."""
    point = getattr(gym.registry.get(env_id), "entry_point", None)
    return isinstance(point, str) and point.startswith("gymnasium.envs.classic_control")


def _makeable(env_id: str) -> bool:
    """Whether the module of ``env_id``'s entry point imports (Box2D's needs its extra)."""
    spec = gym.registry.get(env_id)
    point = getattr(spec, "entry_point", None)
    if not isinstance(point, str):
        return spec is not None
    try:
        importlib.import_module(point.partition(":")[0])
    except (ImportError, gym.error.DependencyNotInstalled):
        return False
    return True

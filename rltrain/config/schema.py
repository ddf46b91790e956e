"""Structured configs: one typed, validated omegaconf config for a whole run.

A run's config has four sections, each a dataclass with defaults that work:

    trainer:   TrainerConfig   (the Trainer's arguments: steps, devices, logging, checkpoints)
    env:       EnvConfig       (a Gymnasium id and its keyword arguments)
    strategy:  name + the strategy's config   (off_policy: OffPolicyConfig)
    agent:     name + the agent's config      (dqn: DQNConfig)

``name`` picks the registered class (:data:`AGENTS`, :data:`STRATEGIES`); the rest of the
section is type-checked against that class's config. An unknown key or a value of the wrong type
is a :class:`ConfigError` naming the key and suggesting the closest valid one.

    cfg = compose(["configs/dqn_cartpole.yaml"], ["trainer.num_steps=20000", "agent.lr=1e-3"])
    run = build(cfg)          # rltrain.trainer.build: trainer, agent and env
    run.fit()
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

import rltrain.agents
import rltrain.strategies  # noqa: F401  (and the shipped strategies)
from rltrain.config.files import (
    SHIPPED_CONFIGS,
    ConfigError,
    load_stored,
    load_yaml,
    omegaconf_message,
    parse_overrides,
    preset_fits,
    shipped_configs,
    to_container_raw,
)
from rltrain.config.hints import check_sections, list_hint, type_hint, unknown_key_message
from rltrain.config.trainer_config import TrainerConfig as TrainerConfig
from rltrain.config.zoo import translate, zoo_file
from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import check_env_id
from rltrain.settings.registry import (
    AGENTS,
    STRATEGIES,
    Registered,
    default_strategy,
    load_plugins,
)


@dataclass
class EnvConfig:
    """The ``env:`` section.

    Attributes:
        id: A registered Gymnasium id, or Gymnasium's ``"module:EnvId"``. Default
            ``"CartPole-v1"``; ignored (set to null) when ``_target_`` is given.
        kwargs: Keyword arguments for ``gymnasium.make`` or ``_target_`` (e.g.
            ``{max_episode_steps: 200}``).
        imports: Modules imported first: packages that register their ids (``[minigrid]``).
        wrappers: Applied in order, each ``{_target_: import.path.Wrapper, **kwargs}``
            (``[{_target_: minigrid.wrappers.ImgObsWrapper}]``).
        _target_: Instead of ``id``: the import path of an env class, or of a function
            returning an env, called with ``kwargs`` (``my_envs.Corridor``; a module in the
            current directory is found). Default null.
        max_episode_steps: A time limit in env steps (Gymnasium's ``TimeLimit``, applied
            before ``wrappers``) for an env that has none or a longer one. Default null: the
            env's own.
        atari: The standard Atari pipeline (no-op reset, frame skip with max-pooling,
            episodic life and reward clipping for training only, fire reset, 84x84 grayscale,
            frame stack; :class:`~rltrain.envs.atari.AtariConfig`, docs/atari.md), applied
            before ``wrappers``; ``{}`` for its defaults. Default null: none.
        backend: ``gymnasium`` or ``envpool`` (envpool's C++ vector env for an id it knows,
            Atari with its own pipeline; no Python wrappers; evaluation runs on Gymnasium's).
            Default ``gymnasium``.
        unrecorded: Set by rltrain when the run's env was a Python callable with no import
            path: why the env cannot be rebuilt from this config. Default null.
    """

    id: str | None = "CartPole-v1"
    kwargs: dict[str, Any] = field(default_factory=dict)
    imports: list[str] = field(default_factory=list)
    wrappers: list[Any] = field(default_factory=list)
    _target_: str | None = None
    max_episode_steps: int | None = None
    atari: AtariConfig | None = None
    backend: str = "gymnasium"  # str, not a Literal: omegaconf cannot type-check Literals
    unrecorded: str | None = None

    def __post_init__(self) -> None:
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 env step, or null for the "
                             f"env's own limit; got {self.max_episode_steps}.")
        for index, wrapper in enumerate(self.wrappers):
            if not isinstance(wrapper, Mapping) or not isinstance(wrapper.get("_target_"), str):
                raise ValueError(
                    f"wrappers[{index}] is {wrapper!r}; each wrapper is a mapping with the "
                    "import path of its class and its keyword arguments, e.g. {_target_: "
                    "gymnasium.wrappers.TimeLimit, max_episode_steps: 200}.")
        if self.backend not in ("gymnasium", "envpool"):
            raise ValueError(f"backend must be 'gymnasium' or 'envpool'; got {self.backend!r}.")
        if self.id is None and self._target_ is None and self.unrecorded is None:
            raise ValueError("give the environment an id (a Gymnasium id) or a _target_ "
                             "(the import path of an env class or function).")


@dataclass
class RunConfig:
    """The schema of a whole run (the default agent and strategy; :func:`schema` swaps in the
    sections of the ones a config names)."""

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    strategy: Any = field(default_factory=STRATEGIES["off_policy"].section)
    agent: Any = field(default_factory=AGENTS["dqn"].section)


def schema(agent: str | None = "dqn", strategy: str | None = "off_policy") -> DictConfig:
    """The typed, default config for ``agent`` trained by ``strategy``; None leaves that
    section untyped (a section naming its class by ``_target_``, checked when it is made)."""
    config = OmegaConf.structured(RunConfig(
        strategy={} if strategy is None else _strategy_section(agent, strategy),
        agent={} if agent is None else lookup(AGENTS, agent, "agent").section()))
    assert isinstance(config, DictConfig)
    return config


def _strategy_section(agent: str | None, strategy: str) -> Any:
    """The default ``strategy`` section: the agent's own schedule
    (``default_strategy_settings()``, what ``Trainer(agent=...)`` takes when given no strategy)
    where it is settings of this strategy, else the strategy's config defaults."""
    entry = lookup(STRATEGIES, strategy, "strategy")
    if agent is not None:
        named = lookup(AGENTS, agent, "agent")
        settings = named.cls(named.config()).default_strategy_settings()
        if type(settings) is entry.config and dataclasses.is_dataclass(settings):
            return entry.section(**{f.name: getattr(settings, f.name)
                                    for f in dataclasses.fields(settings) if f.init})
    return entry.section()


def compose(files: Sequence[str | Path] = (), overrides: Sequence[str] = ()) -> DictConfig:
    """Merge YAML ``files`` (later ones win) and ``key=value`` ``overrides`` onto the defaults,
    type-checked. A file name without a folder or suffix (``dqn_cartpole``) is a shipped config.
    A shipped preset whose ``env.id`` a later file or override changes gets a warning: its
    settings were tuned for its own env.
    """
    layers = [zoo_layer(str(path)) if str(path).startswith("zoo:") else load_yaml(path)
              for path in files]
    config = validate(OmegaConf.merge(*layers, parse_overrides(overrides)) if layers or overrides
                      else OmegaConf.create())
    for path, layer in zip(files, layers, strict=True):
        tuned = OmegaConf.select(layer, "env.id")
        if (_is_shipped(path) and tuned is not None
                and not preset_fits(Path(path).stem, config.env.id)):
            warnings.warn(retuned_message(Path(path).stem, str(tuned), config), stacklevel=2)
    return config


def zoo_layer(name: str) -> DictConfig:
    """``zoo:ALGO/ENV_ID``: RL-Zoo's entry translated into a config layer
    (:mod:`rltrain.config.zoo`)."""
    algo, sep, env_id = name.removeprefix("zoo:").partition("/")
    if not sep or not algo or not env_id:
        raise ConfigError(f"{name}: write zoo:ALGO/ENV_ID, e.g. zoo:dqn/CartPole-v1.")
    return OmegaConf.create(translate(algo, env_id))


def zoo_note(name: str) -> str:
    """What ``zoo:ALGO/ENV_ID`` was translated into, in one line: the file of RL-Zoo's entry
    and the settings it became (``key=value``), as a preset's line says which preset."""
    algo, _, env_id = name.removeprefix("zoo:").partition("/")
    settings = ", ".join(f"{key}={json.dumps(value)}" for key, value in
                         _dotted(translate(algo, env_id)))
    return f"{name}: RL-Zoo's {algo} entry ({zoo_file(algo)}) as {settings}"


def _dotted(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            items += _dotted(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _is_shipped(path: str | Path) -> bool:
    found = Path(path)
    if not found.exists() and found.parent == Path(".") and not found.suffix:
        found = SHIPPED_CONFIGS / f"{found}.yaml"
    return found.resolve().parent == SHIPPED_CONFIGS.resolve()


def presets_for(env_id: str | None, agent: str | None = None) -> list[str]:
    """The shipped configs tuned for ``env_id`` (and ``agent``, when given)."""
    return [name for name in shipped_configs()
            if preset_fits(name, env_id)
            and agent in (None, OmegaConf.select(load_yaml(name), "agent.name"))]


def retuned_message(preset: str, tuned: str, config: DictConfig) -> str:
    """The warning for a shipped ``preset`` tuned for ``tuned`` but run on another env."""
    env = config.env.id or config.env._target_
    agent = OmegaConf.select(config, "agent.name")
    matching = presets_for(config.env.id, agent) if config.env.id is not None else []
    advice = (f"start from {' or '.join(matching)} instead" if matching else
              "no shipped preset is tuned for it, so tune the strategy.* and agent.* "
              "settings (RL-Zoo's hyperparameters are a good start)")
    return (f"{preset} is tuned for {tuned}, and env.id is now {env}: its settings may not "
            f"suit {env}; {advice}.")


def validate(config: Mapping[str, Any] | DictConfig | ListConfig) -> DictConfig:
    """``config`` merged onto the schema of the agent and strategy it names, type-checked, and
    checked by each section's dataclass (its ``__post_init__``). Raises :class:`ConfigError`."""
    try:
        return _validate(config)
    except OmegaConfBaseException as error:  # a malformed ${...} interpolation, mostly
        raise ConfigError(omegaconf_message(error)) from None


def _validate(config: Mapping[str, Any] | DictConfig | ListConfig) -> DictConfig:
    if isinstance(config, ListConfig):
        raise ConfigError("A run config is a mapping of sections (trainer, env, strategy, "
                          "agent), not a list.")
    raw = OmegaConf.create(to_container_raw(config) if isinstance(config, DictConfig)
                           else dict(config))  # a copy: the caller's config is not changed
    agent, strategy = _named(raw, "agent"), _named(raw, "strategy")
    if strategy == "":  # the agent's own kind (off_policy for one named by import path)
        strategy = (default_strategy(lookup(AGENTS, agent, "agent").cls).name
                    if agent is not None else "off_policy")
    base = schema(agent, strategy)
    check_sections(raw)
    try:
        merged = OmegaConf.merge(base, _integral_floats(base, raw))
    except ConfigKeyError as error:
        raise ConfigError(unknown_key_message(base, error)) from None
    except OmegaConfBaseException as error:
        raise ConfigError(list_hint(error) or type_hint(error) or omegaconf_message(error)
                          ) from None
    assert isinstance(merged, DictConfig)
    if merged.env._target_ is not None:
        merged.env.id = None
    for section in ("trainer", "env", "strategy", "agent"):
        try:
            OmegaConf.to_object(merged[section])  # runs the dataclass's own checks
        except OmegaConfBaseException as error:  # before ValueError: some are ValueErrors
            raise ConfigError(omegaconf_message(error)) from None
        except ValueError as error:
            said = str(error)
            raise ConfigError(said if said.startswith(f"{section}: ") else f"{section}: {said}"
                              ) from None
    env_id = merged.env.id
    if env_id is not None and ":" not in env_id and not merged.env.imports:
        try:  # an id in an imported module is checked once the module is imported
            check_env_id(str(env_id))
        except ValueError as error:
            raise ConfigError(f"env.id: {error}") from None
    return merged


def _named(raw: DictConfig, section: str) -> str | None:
    """The registered name a section selects; None for a section naming its class by
    ``_target_`` (or recorded as not rebuildable; a ``name`` beside it, from a preset, is
    dropped); ``""`` for a strategy left to the agent."""
    node = OmegaConf.select(raw, section)
    if isinstance(node, DictConfig) and ("_target_" in node or "unrecorded" in node):
        if "name" in node:  # a _target_ over a preset's registered name: the class given wins
            del node["name"]
        return None
    default = "dqn" if section == "agent" else ""
    return str(OmegaConf.select(raw, f"{section}.name", default=default))


def _integral_floats(base: DictConfig, raw: DictConfig) -> DictConfig:
    """``raw`` with integral floats (``1e4``, as YAML and overrides read it) turned into ints
    where the schema's field is an int, and anything but true or false (or null where the
    field allows it) refused where it is a bool (OmegaConf would read ``2`` as true)."""
    for section in ("trainer", "env", "strategy", "agent"):
        _typed_scalars(base.get(section), raw.get(section), section)
    return raw


def _typed_scalars(schema_node: Any, node: Any, name: str) -> None:
    """:func:`_integral_floats` on one section, and on the dataclass sections within it
    (``env.atari``)."""
    if not isinstance(node, DictConfig) or not isinstance(schema_node, DictConfig):
        return
    kind = OmegaConf.get_type(schema_node)
    hints = typing.get_type_hints(kind) if dataclasses.is_dataclass(kind) else {}
    for key, value in node.items():
        hint, path = hints.get(str(key)), f"{name}.{key!s}"
        if isinstance(value, float) and value.is_integer() and hint in (int, int | None):
            node[key] = int(value)
        if (hint in (bool, bool | None) and not isinstance(value, bool)
                and not (value is None and hint is not bool)
                and not OmegaConf.is_interpolation(node, str(key))):
            null = "" if hint is bool else " (or null)"
            raise ConfigError(f"{path} must be true or false{null}; got {value!r}. Write "
                              f"{path}=true or {path}=false.")
        inner = schema_node.get(str(key))
        section = next((t for t in typing.get_args(hint) or (hint,)
                        if dataclasses.is_dataclass(t)), None)
        if not isinstance(inner, DictConfig) and isinstance(section, type):
            inner = OmegaConf.structured(section)  # a section that defaults to null
        _typed_scalars(inner, value, path)


def load_config(path: str | Path) -> DictConfig:
    """A saved ``config.yaml``, validated."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No run configuration at {path}; is this an rltrain run "
                                "directory?")
    return validate(load_stored(path))


def to_container(config: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as plain dicts, lists and scalars (for checkpoints and JSON)."""
    if isinstance(config, DictConfig):
        container = OmegaConf.to_container(config, resolve=True)
        assert isinstance(container, dict)
        return {str(k): v for k, v in container.items()}
    return {str(k): (to_container(v) if isinstance(v, Mapping) else v)
            for k, v in config.items()}


def lookup(registry: Mapping[str, Registered], name: str, kind: str) -> Registered:
    """The entry ``name`` selects (installed plugins loaded first when it is not found);
    :class:`ConfigError` naming the closest one otherwise."""
    if name not in registry:
        load_plugins()
    entry = registry.get(name)
    if entry is None:
        lowered = {key.lower(): key for key in registry}
        close = [lowered[n] for n in difflib.get_close_matches(
            str(name).lower().replace("-", "_"), list(lowered), n=1, cutoff=0.5)]
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{kind}.name: unknown {kind} {name!r}.{hint} Registered: "
                          f"{sorted(registry)} (rltrain list shows them). Your own {kind} "
                          "registers itself when its module is imported: rltrain fit --import "
                          "MODULE.")
    return entry

"""Objects from config sections and back: the agent, strategy and env a run config describes
(:func:`make_agent`, :func:`make_strategy`, :func:`make_env`), and the sections that describe
the objects of a run (:func:`describe_agent`, :func:`describe_strategy`, :func:`describe_env`).

A section names a registered class (``name: dqn``) or any class by import path
(``_target_: my_agents.MyAgent``, Hydra's convention), built as ``cls(ConfigClass(**rest))``
when its ``__init__`` takes a config dataclass (``config: MyAgentConfig``), else
``cls(**rest)``. An object that has no import path (defined in a script or a function, or a
lambda) is described as ``unrecorded``: why it cannot be rebuilt, which making it then says.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import RecordVideo
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rltrain.agents.base import LearningAgent
from rltrain.config.files import ConfigError
from rltrain.config.schema import lookup, to_container
from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import EnvInit, EnvSpec, check_env_id, env_factory
from rltrain.settings.registry import AGENTS, STRATEGIES, Registered
from rltrain.settings.targets import (
    INSTALLED,
    TRUSTED,
    Target,
    TargetError,
    Trust,
    check_untrusted,
    describe_callable,
    env_packages,
    import_modules,
    import_path,
    inside,
    locate,
    split_target,
)
from rltrain.strategies.base import RLStrategy


def make_agent(section: DictConfig, trust: Trust = TRUSTED) -> LearningAgent:
    """The agent an ``agent:`` section names, with its hyperparameters."""
    agent = _make(section, AGENTS, LearningAgent, "agent", trust)
    assert isinstance(agent, LearningAgent)
    return agent


def make_strategy(section: DictConfig, trust: Trust = TRUSTED) -> RLStrategy:
    """The strategy a ``strategy:`` section names, with its settings."""
    strategy = _make(section, STRATEGIES, RLStrategy, "strategy", trust)
    assert isinstance(strategy, RLStrategy)
    return strategy


def make_env(section: DictConfig, trust: Trust = TRUSTED) -> EnvInit:
    """The environment an ``env:`` section describes: its id, or an :class:`EnvSpec` with
    keyword arguments, imports, wrappers or a ``_target_``. Every import path is located (and
    checked against ``trust``) here, before anything runs."""
    if section.unrecorded is not None:
        raise ConfigError(
            f"env: this run's environment cannot be rebuilt from its config: "
            f"{section.unrecorded}. Give it on the command line (env.id=... or "
            "env._target_=module.make_env), or evaluate it from Python: "
            "Trainer.evaluate(env, agent, ckpt_path=...).")
    try:
        imports = [str(name) for name in section.imports]
        import_modules(imports, trust)
        if str(section.id).startswith("ALE/") and "ale_py" not in imports:
            import_modules(["ale_py"], INSTALLED)  # registers the ids, never from cwd
            imports.append("ale_py")  # in env workers too
        kwargs = to_container(section.kwargs) if section.kwargs else {}
        if section._target_ is not None:
            made = locate(str(section._target_), kind=gym.Env, trust=trust, what="env._target_")
            home = str(getattr(made, "__module__", ""))
        else:
            check_env_id(str(section.id), trust)
            home = _registered_module(str(section.id))
        wrappers = tuple(_wrapper(to_container(w), i, trust, home)
                         for i, w in enumerate(section.wrappers))
        if section.max_episode_steps is not None:  # before the user's wrappers
            wrappers = (Target("gymnasium.wrappers.TimeLimit",
                               {"max_episode_steps": int(section.max_episode_steps)}),
                        *wrappers)
        atari = (None if section.atari is None
                 else AtariConfig(**to_container(section.atari)))
        backend = str(section.backend)
        if section._target_ is not None:
            return EnvSpec(target=str(section._target_), kwargs=kwargs, wrappers=wrappers,
                           imports=imports, atari=atari, backend=backend)  # type: ignore[arg-type]
        if kwargs or wrappers or imports or atari is not None or backend != "gymnasium":
            return EnvSpec(str(section.id), kwargs, wrappers, imports, atari=atari,
                           backend=backend)  # type: ignore[arg-type]
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return str(section.id)


def check_stored_targets(config: DictConfig, trust: Trust) -> None:
    """Refuse a stored config any of whose import paths (``env.imports``, an ``env.id``'s
    module, each ``_target_``) would import code from inside the folder it came from, importing
    nothing: for what reads a config without building all of it (``load_policy``)."""
    for what, path in _named(to_container(config)):
        try:
            check_untrusted(path, trust, what)
        except TargetError as error:
            raise ConfigError(str(error)) from None


def named_modules(config: DictConfig, *, every: bool = False) -> list[str]:
    """The top-level modules ``config``'s import paths name (``env.imports``, an ``env.id``'s
    module, each ``_target_``), but (unless ``every``) for the packages a stored config may
    import anyway: what the user confirms (``--trust``) when a process started by rltrain
    reads the user's own config as a stored one."""
    found = (path.partition(":")[0].split(".")[0] for _, path in _named(to_container(config)))
    return [name for name in dict.fromkeys(found)
            if name and (every or name not in env_packages())]


def _named(plain: dict[str, Any]) -> list[tuple[str, str]]:
    """``(config key, import path)`` of each import path in plain config data."""
    env = plain.get("env") or {}
    named = [("env.imports", name) for name in env.get("imports") or ()]
    if isinstance(env.get("id"), str) and ":" in env["id"]:
        named.append(("env.id", env["id"].rpartition(":")[0]))
    named += [(f"{where}._target_", path) for where, path in _targets(plain)]
    return [(what, path) for what, path in named if isinstance(path, str)]


def _targets(node: Any, where: str = "") -> list[tuple[str, Any]]:
    """``(key, path)`` of every ``_target_`` in plain config data."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_":
                found.append((where, value))
            else:
                found += _targets(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _targets(value, f"{where}[{i}]")
    return found


def _registered_module(env_id: str) -> str:
    """The module of the entry point Gymnasium's registry holds for ``env_id`` ("" when none)."""
    module, sep, name = env_id.rpartition(":")
    entry = gym.registry.get(name if sep else env_id)
    point = entry.entry_point if entry is not None else None
    if isinstance(point, str):
        return point.partition(":")[0]
    return str(getattr(point, "__module__", "") or module)


#: The packages whose wrappers a stored config may name without ``--trust`` (besides the
#: package of the environment itself).
WRAPPER_PACKAGES = ("gymnasium", "rltrain")


def _wrapper(item: dict[str, Any], index: int, trust: Trust, home: str) -> Target:
    """The wrapper a config's ``wrappers[index]`` names. From a stored config, without the
    user's trust, only a wrapper of Gymnasium's, rltrain's or the environment's own package
    (``home``), and one that writes files (``RecordVideo``) only into the run directory."""
    path, kwargs = split_target(item)
    what = f"env.wrappers[{index}]._target_"
    cls = locate(path, kind=gym.Wrapper, trust=trust, what=what)
    module = str(getattr(cls, "__module__", ""))
    if trust.trusts(module) or trust.stored_in is None:
        return Target(path, kwargs)
    for key, value in kwargs.items():
        if _holds_mapping(value):
            raise TargetError(
                f"{what}: the stored config gives the wrapper {path!r} a mapping as its "
                f"keyword {key!r} ({str(value)[:80]}); a stored wrapper takes plain values "
                "(numbers, strings, lists of them) and rltrain builds no object from a stored "
                "mapping. Give that wrapper on the command line, or confirm its module: "
                f"--trust {module.split('.')[0]}.")
    top, packages = module.split(".")[0], (*WRAPPER_PACKAGES, home.split(".")[0])
    if top not in packages:
        raise TargetError(
            f"{what}: the stored config names the wrapper {path!r} of {top!r}, which is "
            f"neither Gymnasium's, rltrain's nor the environment's package ({packages[-1]!r}). "
            "A stored config (a run directory's or a checkpoint's) is untrusted; if you added "
            f"that wrapper yourself, confirm it: --trust {top}.")
    if isinstance(cls, type) and issubclass(cls, RecordVideo):
        _check_video_folder(kwargs, trust.stored_in, what)
    return Target(path, kwargs)


def _holds_mapping(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    return isinstance(value, list | tuple) and any(_holds_mapping(v) for v in value)


def _check_video_folder(kwargs: Mapping[str, Any], run_dir: Path, what: str) -> None:
    """Refuse a stored ``RecordVideo`` that would write outside ``run_dir``."""
    folder, prefix = kwargs.get("video_folder"), kwargs.get("name_prefix", "rl-video")
    plain_prefix = isinstance(prefix, str) and "/" not in prefix and "\\" not in prefix
    if not isinstance(folder, str) or not plain_prefix or not inside(Path(folder), run_dir):
        raise TargetError(
            f"{what}: the stored config records videos into {str(folder)[:200]!r} (name_prefix "
            f"{str(prefix)[:40]!r}), outside the run directory {run_dir}; a stored config "
            "never makes rltrain write elsewhere. Record with rltrain evaluate --video DIR.")


def _make(section: DictConfig, registry: Mapping[str, Registered], kind: type, name: str,
          trust: Trust) -> Any:
    values = to_container(section)
    if "unrecorded" in values:
        raise ConfigError(
            f"{name}: this run's {name} cannot be rebuilt from its config: "
            f"{values['unrecorded']}. Continue or evaluate it from Python with the same "
            f"{name} object, or define its class in an importable module (then the run "
            "records its import path).")
    if "_target_" in values:
        path, kwargs = split_target(values)
        try:
            cls = locate(path, kind=kind, trust=trust, what=f"{name}._target_")
        except TargetError as error:
            raise ConfigError(str(error)) from None
        made = construct(cls, kwargs, f"{name} ({path})")
        if not isinstance(made, kind):
            raise ConfigError(f"{name}._target_: {path!r} made a {type(made).__name__}, not a "
                              f"{kind.__name__}.")
        return made
    entry = lookup(registry, str(values.pop("name")), name)
    return entry.cls(entry.config(**values))


def construct(cls: Any, kwargs: dict[str, Any], what: str) -> Any:
    """``cls(ConfigClass(**kwargs))`` when ``cls`` takes a config dataclass (its ``config``
    parameter's annotation), type-checked as a config section; else ``cls(**kwargs)``."""
    config_class = config_class_of(cls)
    try:
        if config_class is None:
            return cls(**kwargs)
        typed = OmegaConf.merge(OmegaConf.structured(config_class), kwargs)
        return cls(OmegaConf.to_object(typed))
    except (OmegaConfBaseException, TypeError, ValueError) as error:
        message = str(error).splitlines()[0]
        raise ConfigError(f"{what}: {message}.") from None


def config_class_of(cls: Any) -> type | None:
    """The dataclass ``cls``'s ``__init__`` takes as ``config`` (``Optional`` unwrapped), or
    None."""
    init = cls.__init__ if inspect.isclass(cls) else cls
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # annotations naming what cannot be imported: no config class
        return None
    for hint in typing.get_args(hints.get("config")) or (hints.get("config"),):
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return hint
    return None


def describe_agent(agent: LearningAgent) -> dict[str, Any]:
    """The ``agent:`` section that makes ``agent`` again."""
    return _describe(agent, AGENTS, "agent")


def describe_strategy(strategy: RLStrategy) -> dict[str, Any]:
    """The ``strategy:`` section that makes ``strategy`` again (an unrecorded one keeps its
    ``seed``, so evaluations still start where the run's did)."""
    section = _describe(strategy, STRATEGIES, "strategy")
    return {**section, "seed": strategy.seed} if "unrecorded" in section else section


def _describe(obj: Any, registry: Mapping[str, Registered], name: str) -> dict[str, Any]:
    config = getattr(obj, "config", None)
    plain = dataclasses.asdict(config) if (
        dataclasses.is_dataclass(config) and not isinstance(config, type)) else None
    for entry in registry.values():
        if type(obj) is entry.cls and entry.cls.__module__.startswith("rltrain.") and plain:
            return {"name": entry.name, **plain}
    cls = type(obj)
    path = import_path(cls)
    if path is None:
        return {"unrecorded": f"its class {cls.__qualname__} is defined in {cls.__module__} "
                              "(a script run directly, or a function), which has no import "
                              "path"}
    if not inspect.signature(cls).parameters:  # made with no arguments: its path is enough
        return {"_target_": path}
    if plain is None or config_class_of(cls) is not type(config):
        return {"unrecorded": f"{path} keeps no config dataclass as .config that its "
                              "__init__(config) takes, so its settings are not recorded"}
    return {"_target_": path, **plain}


def describe_env(env: EnvInit) -> dict[str, Any]:
    """The ``env:`` section that makes ``env`` again; ``unrecorded`` (with the reason) for a
    callable or wrapper that has no import path."""
    if isinstance(env, str):
        return {"id": env, "kwargs": {}}
    if isinstance(env, EnvSpec):
        wrappers = [describe_callable(w) for w in env.wrappers]
        missing = [_name(w) for w, d in zip(env.wrappers, wrappers, strict=True) if d is None]
        if missing:
            return _unrecorded(f"its wrapper {', '.join(missing)} has no import path (a "
                               "lambda or a local function); use a wrapper class, or "
                               "functools.partial of one")
        return {"id": env.id, "kwargs": dict(env.kwargs), "imports": list(env.imports),
                "wrappers": wrappers, "_target_": env.target, "backend": env.backend,
                "atari": None if env.atari is None else dataclasses.asdict(env.atari)}
    factory = env_factory(env)
    described = describe_callable(factory)
    if described is None:
        return _unrecorded(f"it was the Python callable {_name(factory)}, which has no import "
                           "path; define it at the top level of an importable module (not a "
                           "script run directly), or use an EnvSpec")
    path, kwargs = split_target(described)
    return {"id": None, "_target_": path, "kwargs": kwargs}


def _unrecorded(why: str) -> dict[str, Any]:
    return {"id": None, "unrecorded": why}


def _name(obj: Any) -> str:
    return str(getattr(obj, "__qualname__", None) or type(obj).__qualname__)

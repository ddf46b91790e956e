"""The agents and strategies a config can name, each registered from its own file.

An agent's module registers it with a decorator, so a new agent is one file:

    @register_agent("reinforce", ReinforceConfig, "Monte-Carlo policy gradient")
    class Reinforce(LearningAgent):
        ...

and ``agent.name=reinforce`` selects it once the module is imported: by your own code, by the
``rltrain`` command's ``--import MODULE``, or, for an installed package, through the
``rltrain.plugins`` entry-point group (``[project.entry-points."rltrain.plugins"]
reinforce = "my_package.reinforce"``), loaded the first time a name is not found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from rltrain.settings.search_path import installed_entry_points

T = TypeVar("T", bound=type)

#: The entry-point group whose modules register agents and strategies when imported.
PLUGIN_GROUP = "rltrain.plugins"


@dataclass(frozen=True)
class Registered:
    """A class the config can name: an agent or a strategy built as ``cls(config)``.

    Attributes:
        name: The ``name:`` value in its section (``"dqn"``).
        cls: The agent or strategy class.
        config: Its config dataclass.
        section: The section's schema: ``config`` plus the ``name`` field.
        summary: One line for ``rltrain list``.
    """

    name: str
    cls: type
    config: type
    section: type
    summary: str


def registered(name: str, cls: type, config: type, summary: str) -> Registered:
    """A :class:`Registered` entry for ``cls`` (built as ``cls(config(...))``), its section
    schema made from ``config`` plus ``name``."""
    section = dataclasses.make_dataclass(
        f"{config.__name__}Section", [("name", str, field(default=name))], bases=(config,),
        namespace={"__module__": __name__, "owner": getattr(config, "owner", None)
                   or config.__name__,  # its errors name the config, not the section
                   "__doc__": f"{config.__name__} with the ``name`` that selects it."})
    return Registered(name, cls, config, section, summary)


#: Agents by the ``agent.name`` that selects them.
AGENTS: dict[str, Registered] = {}

#: Strategies by the ``strategy.name`` that selects them.
STRATEGIES: dict[str, Registered] = {}


def register_agent(name: str, config: type, summary: str) -> Callable[[T], T]:
    """Class decorator: ``agent.name=<name>`` builds the class as ``cls(config(...))``."""
    return _register(AGENTS, "agent", name, config, summary)


def register_strategy(name: str, config: type, summary: str) -> Callable[[T], T]:
    """Class decorator: ``strategy.name=<name>`` builds the class as ``cls(config(...))``."""
    return _register(STRATEGIES, "strategy", name, config, summary)


def _register(registry: dict[str, Registered], kind: str, name: str, config: type,
              summary: str) -> Callable[[T], T]:
    if not name.isidentifier():
        raise ValueError(f"A {kind} name is an identifier (letters, digits, _); got {name!r}.")
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"The config of {kind} {name!r} must be a dataclass; got {config!r}.")

    def add(cls: T) -> T:
        taken = registry.get(name)
        if taken is not None and f"{taken.cls.__module__}.{taken.cls.__qualname__}" != (
                f"{cls.__module__}.{cls.__qualname__}"):  # a module re-imported is no clash
            raise ValueError(f"{kind} name {name!r} is taken by {taken.cls.__module__}."
                             f"{taken.cls.__qualname__}; register {cls.__qualname__} under "
                             "another name.")
        registry[name] = registered(name, cls, config, summary)
        return cls

    return add


def strategy_taking(settings: object) -> Registered:
    """The registered strategy whose config ``settings`` is (an agent's
    ``default_strategy_settings()``)."""
    for entry in STRATEGIES.values():
        if type(settings) is entry.config:
            return entry
    raise ValueError(f"No registered strategy takes {type(settings).__name__} settings; "
                     f"registered: {sorted(STRATEGIES)}.")


def default_strategy(agent_type: type) -> Registered:
    """The first registered strategy (the shipped ones first) whose loop ``agent_type``
    fits (``RLStrategy.fits``: structurally, by the hooks it has)."""
    for entry in STRATEGIES.values():
        fits = getattr(entry.cls, "fits", None)
        if fits is not None and fits(agent_type):
            return entry
    raise ValueError(f"{agent_type.__name__} fits no registered strategy; give it "
                     "make_buffer (a replay) or prepare_rollout (rollouts).")


_plugins_loaded = False


def load_plugins() -> None:
    """Import, once, every module of the installed ``rltrain.plugins`` entry points (so
    their agents and strategies register themselves); never one declared by metadata in the
    current directory (:func:`~rltrain.settings.search_path.installed_entry_points`)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in installed_entry_points(PLUGIN_GROUP):
        entry.load()

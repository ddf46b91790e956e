"""A Trainer described as a run config: its ``trainer`` section, and the whole run's config
(``env``, ``strategy`` and ``agent`` described from the objects when they are registered)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rltrain.agents.base import LearningAgent
from rltrain.config import AGENTS, STRATEGIES, section_of, to_container
from rltrain.envs import EnvInit, EnvSpec
from rltrain.trainer.settings import TrainerSettings
from rltrain.trainer_config import TrainerConfig


def trainer_settings(trainer: TrainerConfig) -> dict[str, Any]:
    """This trainer's settings as the ``trainer`` section of a run config
    (:class:`~rltrain.trainer_config.TrainerConfig`'s fields, folders as strings). A logger
    object is described as ``True``; ``overwrite`` is always saved as False: a saved config
    never replaces a run."""
    settings = {f.name: getattr(trainer, f.name) for f in dataclasses.fields(TrainerConfig)}
    if not isinstance(trainer.logger, (bool, str, Path)):
        settings["logger"] = True
    return {**{name: str(value) if isinstance(value, Path) else value
               for name, value in settings.items()}, "overwrite": False}


def run_config(trainer: TrainerSettings, env: EnvInit, agent: LearningAgent,
               run_dir: Path | None = None) -> dict[str, Any]:
    """The run's config as plain dicts: the ``config`` given, with the ``trainer`` section
    from :meth:`settings` (``run_dir`` filled in), and ``env``, ``strategy`` and ``agent``
    described from the objects when they are registered (their sections as given
    otherwise)."""
    described: dict[str, Any] = {"trainer": trainer_settings(trainer)}
    if run_dir is not None:
        described["trainer"]["run_dir"] = str(run_dir)
    if isinstance(env, str):
        described["env"] = {"id": env, "kwargs": {}}
    elif isinstance(env, EnvSpec) and not env.wrappers:
        described["env"] = {"id": env.id, "kwargs": dict(env.kwargs)}
    for name, section in (("strategy", section_of(trainer.strategy, STRATEGIES)),
                          ("agent", section_of(agent, AGENTS))):
        if section is not None:
            described[name] = section
    given = to_container(trainer.config) if trainer.config is not None else {}
    return {**given, **described}

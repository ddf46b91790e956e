"""A Trainer described as a run config: its ``trainer`` section, and the whole run's config
(``env``, ``strategy`` and ``agent`` described from the objects when they are registered)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rltrain.agents.base import LearningAgent
from rltrain.config.instantiate import describe_agent, describe_env, describe_strategy
from rltrain.config.schema import to_container
from rltrain.config.trainer_config import TrainerConfig
from rltrain.envs.make import EnvInit
from rltrain.observe.loggers import describe_logger
from rltrain.trainer.settings import TrainerSettings


def trainer_settings(trainer: TrainerConfig) -> dict[str, Any]:
    """This trainer's settings as the ``trainer`` section of a run config
    (:class:`~rltrain.config.trainer_config.TrainerConfig`'s fields, folders as strings). The
    loggers are described by name (:func:`~rltrain.observe.loggers.describe_logger`:
    ``[tensorboard, csv]``; a logger object as ``{unrecorded: why}``, with its class);
    ``overwrite`` is always saved as False: a saved config never replaces a run."""
    settings = {f.name: getattr(trainer, f.name) for f in dataclasses.fields(TrainerConfig)}
    settings["logger"] = describe_logger(trainer.logger)
    return {**{name: str(value) if isinstance(value, Path) else value
               for name, value in settings.items()}, "overwrite": False}


def run_config(trainer: TrainerSettings, env: EnvInit, agent: LearningAgent,
               run_dir: Path | None = None) -> dict[str, Any]:
    """The run's config as plain dicts: the ``config`` given, with the ``trainer`` section
    from :meth:`settings` (``run_dir`` filled in), and ``env``, ``strategy`` and ``agent``
    described from the objects (:mod:`rltrain.config.instantiate`): by registered name, by import
    path, or as ``unrecorded`` with the reason they cannot be rebuilt."""
    described: dict[str, Any] = {"trainer": trainer_settings(trainer),
                                 "env": describe_env(env), "agent": describe_agent(agent)}
    if trainer.strategy is not None:
        described["strategy"] = describe_strategy(trainer.strategy)
    if run_dir is not None:
        described["trainer"]["run_dir"] = str(run_dir)
    given = to_container(trainer.config) if trainer.config is not None else {}
    return {**given, **described}

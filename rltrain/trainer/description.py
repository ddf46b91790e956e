"""A Trainer described as a run config: its ``trainer`` section, and the whole run's config
(``env``, ``strategy`` and ``agent`` described from the objects when they are registered)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rltrain.agents.base import LearningAgent
from rltrain.config import AGENTS, STRATEGIES, section_of, to_container
from rltrain.envs import EnvInit, EnvSpec
from rltrain.trainer.settings import TrainerSettings


def trainer_settings(trainer: TrainerSettings) -> dict[str, Any]:
    """This trainer's settings as the ``trainer`` section of a run config
    (:class:`~rltrain.config.TrainerConfig`'s fields). ``overwrite`` is always saved as
    False: a saved config never replaces a run."""
    logger = trainer.logger if isinstance(trainer.logger, bool) else (
        str(trainer.logger) if isinstance(trainer.logger, (str, Path)) else True)
    return {
        "num_steps": trainer.num_steps,
        "eval_interval": trainer.evaluation.interval,
        "eval_episodes": trainer.evaluation.episodes,
        "return_threshold": trainer.return_threshold,
        "device": str(trainer.device),
        "inference_device": str(trainer.inference_device),
        "dtype": str(trainer.dtype).removeprefix("torch."),
        "num_threads": trainer.num_threads,
        "gradient_clip_val": trainer.gradient_clip_val,
        "gradient_clip_algorithm": trainer.gradient_clip_algorithm,
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "on_nan_loss": trainer.on_nan_loss,
        "run_dir": None if trainer.run_dir is None else str(trainer.run_dir),
        "logger": logger,
        "enable_progress_bar": trainer.enable_progress_bar,
        "enable_console": trainer.enable_console,
        "enable_metrics_file": trainer.enable_metrics_file,
        "log_interval": trainer.log_interval,
        "console_interval": trainer.console_interval,
        "checkpoint_dir": None if trainer.checkpoint_dir is None else str(trainer.checkpoint_dir),
        "checkpoint_interval": trainer.checkpoint_interval,
        "keep_last_checkpoints": trainer.keep_last_checkpoints,
        "keep_best": trainer.keep_best,
        "overwrite": False,
    }


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

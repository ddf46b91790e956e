"""The facade: :class:`Trainer` (:mod:`.trainer`), runs built from a config (:mod:`.build`),
the checks made before anything is written (:mod:`.preflight`) and run directories
(:mod:`.run_dir`)."""

from rltrain.trainer.build import BuiltRun, build
from rltrain.trainer.preflight import (
    check_resume_settings,
    check_spaces,
    default_run_dir,
    evaluation_metrics,
    evaluation_seed,
    setup_agent,
)
from rltrain.trainer.run_dir import LOCK, MARKER, RunDirectoryLocked, open_run
from rltrain.trainer.settings import Logger, TrainerSettings
from rltrain.trainer.trainer import Trainer

__all__ = [
    "LOCK",
    "MARKER",
    "BuiltRun",
    "Logger",
    "RunDirectoryLocked",
    "Trainer",
    "TrainerSettings",
    "build",
    "check_resume_settings",
    "check_spaces",
    "default_run_dir",
    "evaluation_metrics",
    "evaluation_seed",
    "open_run",
    "setup_agent",
]

"""A study's record, ``STUDY/tune.json``: what every trial starts from, written once by the
worker that starts the study and read back, as untrusted data, by every worker that joins or
continues it."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint.files import atomic_write_text
from rltrain.cli.records import bounded_int, read_bounded, refuse_unknown_fields
from rltrain.cli.tune_space import Scalar, params_layer
from rltrain.config.files import literal_config
from rltrain.config.schema import validate

RECORD = "tune.json"
#: The record's format: 2 holds the composed config (1 held a command line to replay).
FORMAT = 2
#: The most trials and jobs a study may have; the heartbeat's bounds (seconds).
MAX_TRIALS, MAX_JOBS, MAX_HEARTBEAT = 1_000_000, 1_024, 3_600
#: The Optuna study's name in the default storage (``STUDY/study.db``, one study per file).
DEFAULT_NAME = "rltrain"


@dataclass
class Setup:
    """What every trial of the study starts from.

    Attributes:
        config: The study's composed config, as plain data (each trial's config is this with
            its sampled settings; never a command line to replay).
        space: The search space's mapping (:mod:`rltrain.cli.tune_space`).
        objective: ``auc``, ``final`` or ``best`` (:func:`rltrain.cli.tune.objective`).
        pruning: Whether the median pruner stops trials.
        prune_after: Trials finished before the pruner stops any.
        trials: Trials the study runs in all (first attempts: a trial taken over after its
            worker died is the same trial).
        jobs: Trials a worker runs at once, unless its command line says otherwise.
        storage: Where the trials are recorded, without its password (``None``: the default,
            ``STUDY/study.db``); every worker names it again with ``--storage``.
        name: The Optuna study's name in that storage.
        heartbeat: Seconds between a worker's heartbeats; a trial whose worker missed three
            is taken over (:mod:`rltrain.cli.study_storage`).
    """

    config: dict[str, Any]
    space: dict[str, Any]
    objective: str = "auc"
    pruning: bool = True
    prune_after: int = 5
    trials: int = 20
    jobs: int = 1
    storage: str | None = None
    name: str = DEFAULT_NAME
    heartbeat: int = 10

    def compose(self, params: Mapping[str, Scalar]) -> DictConfig:
        """The trial's config: the study's config with the settings ``params`` (strings taken
        literally)."""
        return validate(OmegaConf.merge(literal_config(self.config), params_layer(params)))


def new_name(study_dir: Path) -> str:
    """A study name no other study in a shared storage has: the folder's name and a random
    suffix."""
    return f"{study_dir.name[:40] or 'study'}-{secrets.token_hex(4)}"


def write_new(path: Path, setup: Setup) -> bool:
    """Write ``setup`` to ``path`` unless a record is there: False when another worker wrote
    one first (the file is created whole or not at all)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    temporary.write_text(_text(setup))
    try:
        os.link(temporary, path)  # atomic, and refused where the file exists (NFS too)
        return True
    except FileExistsError:
        return False
    finally:
        temporary.unlink()


def _text(setup: Setup) -> str:
    return json.dumps({"format": FORMAT, **setup.__dict__}, indent=2) + "\n"


def read_record(path: Path) -> Setup:
    """``tune.json`` read as untrusted data: every field's type and bounds checked."""
    try:
        data = json.loads(read_bounded(path), parse_int=bounded_int)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"its format is not {FORMAT}" + (
                " (it was written by an earlier rltrain, whose records held a command line "
                "to replay, which rltrain no longer trusts: start a new study)"
                if isinstance(data, dict) and data.get("format") == 1 else ""))
        del data["format"]
        refuse_unknown_fields(data, set(Setup.__dataclass_fields__))
        setup = Setup(**data)
        checks = {
            "config": isinstance(setup.config, dict),
            "space": isinstance(setup.space, dict),
            "objective": setup.objective in ("auc", "final", "best"),
            "pruning": isinstance(setup.pruning, bool),
            "prune_after": type(setup.prune_after) is int and 0 <= setup.prune_after <= MAX_TRIALS,
            "trials": type(setup.trials) is int and 1 <= setup.trials <= MAX_TRIALS,
            "jobs": type(setup.jobs) is int and 1 <= setup.jobs <= MAX_JOBS,
            "storage": setup.storage is None or (isinstance(setup.storage, str)
                                                 and 0 < len(setup.storage) <= 1000),
            "name": isinstance(setup.name, str) and 0 < len(setup.name) <= 100
            and setup.name.isprintable(),
            "heartbeat": type(setup.heartbeat) is int and 1 <= setup.heartbeat <= MAX_HEARTBEAT}
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} of the wrong type or out of bounds")
        if setup.compose({}).trainer.eval_interval is None:
            raise ValueError("its config sets no trainer.eval_interval, which a study scores by")
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as error:
        raise ValueError(f"{path} is not a study rltrain wrote: {error}.") from None
    return setup


def rewrite(path: Path, setup: Setup) -> None:
    """Record a continuing command's ``--trials`` and ``--jobs`` (the file replaced whole)."""
    atomic_write_text(path, _text(setup))

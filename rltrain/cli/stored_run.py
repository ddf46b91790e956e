"""The config of a run to continue or evaluate, read from its run directory or checkpoint:
untrusted, so errors name the file at fault, and a stored folder outside the run directory is
used only on the command line's word."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint import LoadedCheckpoint, read_checkpoint
from rltrain.config.files import ConfigError, literal_config, load_stored, parse_overrides
from rltrain.config.schema import validate
from rltrain.settings.targets import within


def resumed_config(resume: str, overrides: list[str]
                   ) -> tuple[DictConfig, str | LoadedCheckpoint]:
    """The saved config of the run ``--resume`` names, with ``overrides`` applied, and the
    checkpoint to resume from (``"last"``, ``"best"``, or a file already read for its config,
    so that the resume reads it once)."""
    ckpt_path: str | LoadedCheckpoint
    given = parse_overrides(overrides)
    path = Path(resume)
    if resume in ("last", "best"):
        run_dir = OmegaConf.select(given, "trainer.run_dir")
        if run_dir is None:
            raise ValueError(f"--resume {resume} needs trainer.run_dir=RUN_DIR, the run to "
                             "continue (or pass --resume RUN_DIR).")
        saved, ckpt_path = load_stored(Path(run_dir) / "config.yaml"), resume
    elif path.is_dir():
        saved, ckpt_path = load_stored(path / "config.yaml"), "last"
        saved.trainer.run_dir = str(path)
    elif path.is_file():
        ckpt_path = LoadedCheckpoint.read(path)
        saved = checkpoint_config(path, ckpt_path.state)
        if path.parent.name == "checkpoints":  # the run it belongs to, wherever it was moved
            saved.trainer.run_dir = str(path.parent.parent)
        elif OmegaConf.select(given, "trainer.run_dir") is None:  # the file's word: untrusted
            raise ConfigError(
                f"--resume {path}: the checkpoint is not in a run's checkpoints/ folder, so "
                "where the run goes on is not known (the run directory its config names is "
                "not used: a checkpoint is untrusted). Name it: trainer.run_dir=DIR.")
    else:
        raise FileNotFoundError(f"Nothing to resume at {path}: pass a run directory, a "
                                "checkpoint file, or last/best with trainer.run_dir=RUN_DIR.")
    with stored_config_errors(path if path.exists() else Path(str(given.trainer.run_dir))):
        config = validate(OmegaConf.merge(saved, given))
    check_stored_paths(saved, given, Path(str(config.trainer.run_dir)))
    return config, ckpt_path


@contextlib.contextmanager
def stored_config_errors(source: Path) -> Iterator[None]:
    """Name ``source`` (a run directory or a checkpoint) in a config error of its stored
    config, so that the message says which file is at fault."""
    try:
        yield
    except ConfigError as error:
        raise ConfigError(f"{source}: its stored config (or an override of it): {error}"
                          ) from None


#: The settings that name folders outside the run directory only on the command line's word.
STORED_FOLDERS = ("trainer.checkpoint_dir",)


def check_stored_paths(saved: DictConfig, given: DictConfig, run_dir: Path) -> None:
    """Refuse a stored config whose checkpoint folder lies outside its run directory
    unless the command line names that folder too: what a run directory says is untrusted, and
    must not make rltrain write elsewhere."""
    for key in STORED_FOLDERS:
        stored = OmegaConf.select(saved, key)
        if not isinstance(stored, str) or OmegaConf.select(given, key) is not None:
            continue
        folder = Path(stored) if Path(stored).is_absolute() else Path.cwd() / stored
        if not within(folder, run_dir):
            raise ConfigError(
                f"The run's saved config sets {key}={stored}, outside the run directory "
                f"{run_dir}. A run directory's files are untrusted: confirm that folder on the "
                f"command line ({key}={stored}) or choose another.")


def checkpoint_folder(config: DictConfig) -> Path:
    """Where the run of ``config`` keeps its checkpoints."""
    folder = config.trainer.checkpoint_dir
    return Path(str(folder)) if folder is not None else Path(
        str(config.trainer.run_dir)) / "checkpoints"


def checkpoint_config(checkpoint: Path, state: dict[str, Any] | None = None) -> DictConfig:
    """The run config stored in ``checkpoint`` (or, for older files, in its run directory);
    ``state``: what the file holds, when it was read already."""
    stored = (state if state is not None else read_checkpoint(checkpoint)).get("config")
    if isinstance(stored, dict) and stored:
        return literal_config(stored)
    return load_stored(checkpoint.parent.parent / "config.yaml")

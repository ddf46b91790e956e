"""Experiment loggers chosen by name (``trainer.logger=[tensorboard,csv]``), and the forms the
``logger`` setting takes.

A run writes to every logger in its list at once. Names:

================  ==============================================================================
``tensorboard``   TensorBoard event files in the run directory (the default)
``csv``           ``metrics.csv`` in the run directory (:class:`CSVLogger`; no extra package)
``wandb``         Weights & Biases (:class:`WandbLogger`; needs ``pip install wandb``)
``mlflow``        MLflow (:class:`MLflowLogger`; needs ``pip install mlflow``)
================  ==============================================================================

``metrics.jsonl`` is not a logger here: every run writes it (``enable_metrics_file``).
"""

from __future__ import annotations

import csv
import importlib
import os
import sys
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import TypeIs

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: The loggers a config can name, and the package each needs (None: none beyond rltrain's).
LOGGER_PACKAGES: dict[str, str | None] = {
    "tensorboard": None, "csv": None, "wandb": "wandb", "mlflow": "mlflow"}

_NAMES = ", ".join(LOGGER_PACKAGES)


def is_logger_name(value: object) -> bool:
    """True for one of :data:`LOGGER_PACKAGES`' names."""
    return isinstance(value, str) and value in LOGGER_PACKAGES


def is_summary_writer(obj: object) -> TypeIs[SummaryWriter]:
    """True when ``obj`` is a torch ``SummaryWriter`` (without importing TensorBoard: a
    writer's module is imported once one exists)."""
    module = sys.modules.get("torch.utils.tensorboard.writer")
    return module is not None and isinstance(obj, module.SummaryWriter)


def is_unrecorded(value: object) -> bool:
    """True for a saved config's ``{"unrecorded": why}``: a logger object given in Python,
    which a config cannot make again."""
    return isinstance(value, Mapping) and set(value) == {"unrecorded"}


def logger_items(logger: Any) -> list[Any]:
    """The ``logger`` setting as the list of loggers a run writes to, as Lightning's
    ``Trainer(logger=...)`` reads it: a list of loggers, one logger, or a bool.

    A logger is a name (:data:`LOGGER_PACKAGES`), a ``SummaryWriter`` or an object with
    ``log_metrics(metrics, step)``; a saved config's ``{"unrecorded": why}`` stands for an object
    given in Python. A list: exactly those loggers, in order; one logger: ``[it]``; ``True``:
    ``["tensorboard"]``; ``False``: none.
    Raises ``ValueError`` naming what is wrong (an unknown name or a folder, a name twice, a
    logger whose package is not installed). Objects are checked by the Trainer."""
    if isinstance(logger, bool):
        return ["tensorboard"] if logger else []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    for item in items:
        _check_item(item)
    names = [item for item in items if isinstance(item, str)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"logger names {', '.join(twice)} more than once; name each logger "
                         "once.")
    return items


def _check_item(item: object) -> None:
    if isinstance(item, bool):
        raise ValueError(f"logger list item {item!r}: a list holds logger names ({_NAMES}) or "
                         "logger objects; write logger=true or logger=false alone.")
    if isinstance(item, (str, Path)):
        if not is_logger_name(item):
            hint = (" metrics.jsonl is written by every run (enable_metrics_file)."
                    if item == "jsonl" else
                    " TensorBoard writes its files in the run directory; for another folder, "
                    "pass SummaryWriter(log_dir=...) as the logger in Python.")
            raise ValueError(f"logger {str(item)!r} is not a logger name; the names are "
                             f"{_NAMES}." + hint)
        require_package(str(item))
    elif isinstance(item, Mapping) and not is_unrecorded(item):
        raise ValueError(f"logger list item {dict(item)!r}: only a saved config's "
                         "{unrecorded: why} entry is a mapping; name loggers as "
                         f"{_NAMES}.")


def require_package(name: str) -> None:
    """Refuse a logger name whose package is not installed, naming the package."""
    package = LOGGER_PACKAGES[name]
    if package is not None and find_spec(package) is None:
        raise ValueError(f"logger {name!r} needs the {package} package, which is not "
                         f"installed: pip install {package} (or remove {name} from logger).")


def describe_logger(logger: Any) -> list[Any]:
    """The ``logger`` setting as a saved config writes it: the list of names, each object
    logger as ``{"unrecorded": why}`` (its class named; a config cannot make it again)."""
    return [item if isinstance(item, str) or is_unrecorded(item) else _unrecorded(item)
            for item in logger_items(logger)]


def _unrecorded(item: object) -> dict[str, str]:
    cls = type(item)
    return {"unrecorded": f"a {cls.__qualname__} object ({cls.__module__}) given in Python; "
                          "a config cannot make it again"}


class CSVLogger:
    """Metrics as rows of a CSV file, as Lightning's ``CSVLogger``: a ``step`` column (env
    steps) and one column per metric, one row per ``log_metrics`` call (blank where a row has
    no value for a column). A metric first seen later adds its column: the file is rewritten
    with the wider header. A resumed run appends to the file it finds.

    Args:
        path: The CSV file (its folder is created).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.columns: list[str] = []
        self.hparams: dict[str, Any] = {}

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Keep ``params`` as :attr:`hparams` (a run's ``config.yaml`` holds them already)."""
        self.hparams = dict(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Append one row: ``step`` and ``metrics``."""
        row = {"step": "" if step is None else step, **metrics}
        if not self.columns and self.path.is_file():
            with self.path.open(newline="", encoding="utf-8") as file:
                self.columns = next(csv.reader(file), [])
        new = [key for key in row if key not in self.columns]
        if new or not self.path.is_file():
            self._rewrite([*self.columns, *(["step"] if "step" not in self.columns else []),
                           *[key for key in new if key != "step"]])
        with self.path.open("a", newline="", encoding="utf-8") as file:
            csv.DictWriter(file, self.columns).writerow(row)

    def _rewrite(self, columns: list[str]) -> None:
        rows: list[dict[str, str]] = []
        if self.path.is_file():
            with self.path.open(newline="", encoding="utf-8") as file:
                rows = list(csv.DictReader(file))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        with partial.open("w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(partial, self.path)
        self.columns = columns

    def finalize(self, status: str) -> None:
        """Nothing to flush: every row is written when logged."""


class WandbLogger:
    """Weights & Biases through the ``wandb`` package (``trainer.logger=[tensorboard,wandb]``).

    The run is made when training starts, in ``run_dir`` (``wandb/`` there), with the run's
    configuration as its config. Project, entity and mode come from wandb's own environment
    variables: ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_MODE=offline`` (no account needed;
    ``wandb sync`` uploads later). Default project: ``rltrain``.

    Args:
        save_dir: The folder wandb writes in.
        name: The run's name on W&B (default: the folder's name).
    """

    def __init__(self, save_dir: str | Path, name: str | None = None) -> None:
        self.save_dir = Path(save_dir)
        self.name = name or self.save_dir.name
        self.experiment: Any = None

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Start the W&B run, with ``params`` as its config."""
        wandb = importlib.import_module("wandb")
        self.save_dir.mkdir(parents=True, exist_ok=True)
        self.experiment = wandb.init(dir=str(self.save_dir), name=self.name,
                                     project=os.environ.get("WANDB_PROJECT", "rltrain"),
                                     config=dict(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """``wandb.log(metrics, step=step)``: W&B's step is the env step."""
        if self.experiment is None:
            self.log_hyperparams({})
        self.experiment.log(dict(metrics), step=step)

    def finalize(self, status: str) -> None:
        """Finish the W&B run (exit code 1 unless ``status`` is ``"success"``)."""
        if self.experiment is not None:
            self.experiment.finish(exit_code=0 if status == "success" else 1)
            self.experiment = None


class MLflowLogger:
    """MLflow through the ``mlflow`` package (``trainer.logger=[tensorboard,mlflow]``).

    The run is started when training starts, with the run's configuration as its parameters
    and each metric against the env step. The tracking store is ``MLFLOW_TRACKING_URI`` when
    set, else ``mlruns/`` in the run directory; the experiment is ``MLFLOW_EXPERIMENT_NAME``
    (default ``rltrain``).

    Args:
        save_dir: The run directory (its ``mlruns/`` is the default store).
        name: The MLflow run's name (default: the folder's name).
    """

    def __init__(self, save_dir: str | Path, name: str | None = None) -> None:
        self.save_dir = Path(save_dir)
        self.name = name or self.save_dir.name
        self._mlflow: Any = None

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Start the MLflow run and log ``params``."""
        mlflow = self._mlflow = importlib.import_module("mlflow")
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            mlflow.set_tracking_uri((self.save_dir / "mlruns").resolve().as_uri())
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "rltrain"))
        mlflow.start_run(run_name=self.name)
        if params:
            mlflow.log_params({key: str(value)[:6000] for key, value in params.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """``mlflow.log_metrics(metrics, step=step)``."""
        if self._mlflow is None:
            self.log_hyperparams({})
        self._mlflow.log_metrics(dict(metrics), step=step)

    def finalize(self, status: str) -> None:
        """End the MLflow run (``FINISHED``, ``KILLED`` after a stop, ``FAILED``)."""
        if self._mlflow is not None:
            self._mlflow.end_run(status={"success": "FINISHED", "interrupted": "KILLED"}.get(
                status, "FAILED"))
            self._mlflow = None


def named_logger(name: str, run_dir: Path) -> CSVLogger | WandbLogger | MLflowLogger:
    """The logger object of ``name`` (not ``tensorboard``) for a run in ``run_dir``."""
    require_package(name)
    if name == "csv":
        return CSVLogger(run_dir / "metrics.csv")
    if name == "wandb":
        return WandbLogger(run_dir)
    if name == "mlflow":
        return MLflowLogger(run_dir)
    raise ValueError(f"logger {name!r} is not a logger name; the names are {_NAMES}.")

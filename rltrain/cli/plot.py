"""Learning curves from run directories: the evaluation return against env steps or wall time,
mean ± spread over the seeds of each config (``rltrain plot RUN_DIR...``).

The data come from each run's ``metrics.jsonl`` (its ``"evaluation"`` rows, and the
``"metrics"`` rows' ``time/elapsed`` for wall time) and its ``config.yaml``. Runs whose configs
differ only in ``strategy.seed`` and ``trainer.run_dir`` form one group. Drawing needs
matplotlib (``pip install 'rltrain[plot]'``); :func:`learning_curves` does not.

Example:

    groups = learning_curves(["runs/s0", "runs/s1", "runs/s2"])
    draw(groups, "curves.png")
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rltrain.cli.metrics_file import read_rows
from rltrain.config.files import read_stored

XAxis = Literal["env_steps", "wall_time"]
Spread = Literal["minmax", "std"]

#: Config keys that do not make two runs different experiments: the seed, where the run is
#: written, how many threads it had (``--seeds`` sets it from ``--jobs`` and the cores), and
#: what it shows or keeps.
IGNORED_KEYS = ("strategy.seed", "trainer.run_dir", "trainer.num_threads",
                "trainer.enable_progress_bar", "trainer.enable_console",
                "trainer.console_interval", "trainer.checkpoint_dir",
                "trainer.checkpoint_interval", "trainer.keep_last_checkpoints",
                "trainer.keep_best", "trainer.overwrite")

X_LABELS = {"env_steps": "env steps", "wall_time": "wall time (s)"}


@dataclass(frozen=True)
class RunCurve:
    """One run's evaluations.

    Attributes:
        run_dir: The run directory.
        env_steps: Env steps of each evaluation.
        wall_time: Seconds of training before each evaluation (``time/elapsed`` at its env step,
            interpolated between ``"metrics"`` rows; a resumed run's segments follow each other).
        returns: Mean evaluation return of each complete evaluation (one a stop request cut
            short is left out).
        config: The run's ``config.yaml``, flattened to dotted keys (empty when it has none).
        state: ``"finished"`` when its last segment ended on its own (all its env steps, its
            return threshold, a callback); else why not: ``"running or killed"`` (its last
            ``start`` row has no ``end``), or the stop request's reason (``"SIGINT
            received"``).
    """

    run_dir: Path
    env_steps: np.ndarray
    wall_time: np.ndarray
    returns: np.ndarray
    config: Mapping[str, Any]
    state: str = "finished"

    @property
    def finished(self) -> bool:
        """Whether the run ended on its own (:attr:`state`)."""
        return self.state == "finished"

    def x(self, axis: XAxis) -> np.ndarray:
        """``env_steps`` or ``wall_time``."""
        return self.env_steps if axis == "env_steps" else self.wall_time


@dataclass(frozen=True)
class GroupCurve:
    """The runs of one config (its seeds), aggregated on the union of their x values: each run
    counts with its last evaluation at or before ``x`` (a run that stopped early, e.g. at its
    ``return_threshold``, keeps its final return); runs not evaluated yet do not count.

    Attributes:
        label: What sets the group apart (the config keys whose values differ between the
            groups), or the agent and env when there is one group.
        runs: The run directories in the group.
        x: Env steps or seconds.
        mean, std, min, max: Over the runs counted at each ``x`` (std: population, 0 for one).
        count: Runs counted at each ``x``.
    """

    label: str
    runs: tuple[Path, ...]
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    count: np.ndarray




def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"a.b": value}``; lists are kept as values (JSON text)."""
    if not isinstance(node, Mapping):
        return {prefix: json.dumps(node, sort_keys=True) if isinstance(node, list) else node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out if out or not prefix else {prefix: "{}"}


def read_run(run_dir: str | Path) -> RunCurve:
    """The evaluations of the run in ``run_dir`` (``metrics.jsonl`` and ``config.yaml``)."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory: "
                                f"{'it does not exist' if not run_dir.exists() else 'a file'}.")
    if not path.is_file():
        raise FileNotFoundError(f"No metrics.jsonl in {run_dir}: curves and comparisons read "
                                "run directories written with trainer.enable_metrics_file=true.")
    steps: list[float] = []
    returns: list[float] = []
    times: list[float] = []  # NaN where the row has no time of its own
    clock_steps: list[float] = []
    clock: list[float] = []
    offset = last = 0.0
    state = "running or killed"
    for row in read_rows(path):
        event = row.get("event")
        if event == "start":
            offset = last  # a resumed run's time/elapsed starts again from 0
            state = "running or killed"
        elif event == "end":
            reason = row.get("stop_reason")
            state = str(reason)[:200] if isinstance(reason, str) and (
                reason.endswith("received") or "non-finite" in reason) else "finished"
        elif event == "metrics" and row.get("time/elapsed") is not None:
            last = offset + float(row["time/elapsed"])
            clock_steps.append(float(row["env_steps"]))
            clock.append(last)
        elif (event == "evaluation" and row.get("eval/return_mean") is not None
              and row.get("complete") is not False):  # cut short by a stop: not a score
            while steps and steps[-1] >= float(row["env_steps"]):  # a run resumed from an
                steps.pop(), returns.pop(), times.pop()  # earlier checkpoint: its new rows win
            steps.append(float(row["env_steps"]))
            returns.append(float(row["eval/return_mean"]))
            own = row.get("time/elapsed")
            times.append(math.nan if own is None else offset + float(own))
    if not steps:
        raise ValueError(f"{path} has no evaluation rows: the run made no evaluation "
                         "(trainer.eval_interval=null?) or stopped before the first one.")
    env_steps = np.asarray(steps)
    wall = np.asarray(times)
    missing = np.isnan(wall)
    if missing.any():
        wall[missing] = (np.interp(env_steps[missing], clock_steps, clock) if clock
                         else np.nan)
    config_file = run_dir / "config.yaml"
    config = flatten(read_stored(config_file)) if config_file.is_file() else {}
    return RunCurve(run_dir=run_dir, env_steps=env_steps, wall_time=wall,
                    returns=np.asarray(returns), config=config, state=state)


def group_key(config: Mapping[str, Any]) -> str:
    """What two runs of one group share: the config without :data:`IGNORED_KEYS`."""
    return json.dumps({k: v for k, v in config.items() if k not in IGNORED_KEYS},
                      sort_keys=True, default=str)


def group_runs(runs: Iterable[RunCurve]) -> list[list[RunCurve]]:
    """``runs`` grouped by config (:func:`group_key`), groups in order of first appearance."""
    groups: dict[str, list[RunCurve]] = {}
    for run in runs:
        groups.setdefault(group_key(run.config), []).append(run)
    return list(groups.values())


def aggregate(runs: Sequence[RunCurve], axis: XAxis = "env_steps",
              label: str = "") -> GroupCurve:
    """Mean, std, min and max of the runs' returns on the union of their x values (see
    :class:`GroupCurve`)."""
    curves = [(run.x(axis), run.returns) for run in runs]
    curves = [(x[~np.isnan(x)], y[~np.isnan(x)]) for x, y in curves]
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    values = np.full((len(curves), len(grid)), np.nan)
    for i, (x, y) in enumerate(curves):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        index = np.searchsorted(x, grid, side="right") - 1  # last evaluation at or before
        values[i, index >= 0] = y[index[index >= 0]]
    count = (~np.isnan(values)).sum(axis=0)
    return GroupCurve(label=label, runs=tuple(run.run_dir for run in runs), x=grid,
                      mean=np.nanmean(values, axis=0), std=np.nanstd(values, axis=0),
                      min=np.nanmin(values, axis=0), max=np.nanmax(values, axis=0),
                      count=count)


#: What tells runs apart first: the environment, the agent and the strategy.
PRIMARY_KEYS = ("env.id", "env._target_", "agent.name", "agent._target_", "strategy.name")


def labels(groups: Sequence[Sequence[RunCurve]]) -> list[str]:
    """A label per group: its agent and env when no other group has both, else the settings
    that tell it from the groups of the same agent and env (a setting one agent has and
    another lacks tells nothing); then its number of seeds."""
    configs = [group[0].config for group in groups]
    out = []
    for group, config in zip(groups, configs, strict=True):
        cohort = [c for c in configs if all(_same(c, config, k) for k in PRIMARY_KEYS)]
        keys = sorted({k for c in cohort for k in c} - set(IGNORED_KEYS) - set(PRIMARY_KEYS))
        differing = [k for k in keys if len({json.dumps(c.get(k), default=str)
                                             for c in cohort}) > 1]
        if len(groups) > 1 and len(cohort) == len(groups) and differing:
            text = ""  # every group of one agent and env: the settings alone
        else:
            agent = config.get("agent.name") or config.get("agent._target_") or "agent"
            env = config.get("env.id") or config.get("env._target_") or group[0].run_dir.name
            text = f"{agent} on {env}" + (": " if len(cohort) > 1 and differing else "")
        if len(cohort) > 1 and differing:
            text += ", ".join(f"{k}={config.get(k)}" for k in differing[:3])
            text += ", ..." if len(differing) > 3 else ""
        seeds = len(group)
        out.append(f"{text} ({seeds} seed{'s' if seeds != 1 else ''})")
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> bool:
    return json.dumps(a.get(key), default=str) == json.dumps(b.get(key), default=str)


def learning_curves(run_dirs: Iterable[str | Path], axis: XAxis = "env_steps"
                    ) -> list[GroupCurve]:
    """The runs in ``run_dirs`` read, grouped by config and aggregated over seeds. A folder
    without ``metrics.jsonl`` stands for the run directories directly inside it."""
    runs = [read_run(run_dir) for run_dir in expand(run_dirs)]
    if not runs:
        raise ValueError("No run directories to plot.")
    groups = group_runs(runs)
    return [aggregate(group, axis, label)
            for group, label in zip(groups, labels(groups), strict=True)]


def expand(run_dirs: Iterable[str | Path]) -> list[Path]:
    """Run directories: each folder given, or the runs directly inside a folder of runs; a
    run given twice (by another path, or inside a folder also given) counts once, with a
    warning."""
    out: list[Path] = []
    seen: dict[Path, Path] = {}
    for run_dir in map(Path, run_dirs):
        found = [run_dir]
        if not (run_dir / "metrics.jsonl").is_file() and run_dir.is_dir():
            inner = sorted(p for p in run_dir.iterdir() if (p / "metrics.jsonl").is_file())
            found = inner or found
        for run in found:
            key = run.resolve()
            if key in seen:
                warnings.warn(f"{run} is the run {seen[key]} given again: counted once.",
                              stacklevel=2)
                continue
            seen[key] = run
            out.append(run)
    return out


def draw(groups: Sequence[GroupCurve], out: str | Path, *, axis: XAxis = "env_steps",
         spread: Spread = "minmax", size: tuple[int, int] = (800, 500),
         title: str | None = None, dpi: int = 100) -> Path:
    """Draw ``groups`` (mean line, spread band) into ``out``: PNG, SVG or PDF by its suffix;
    ``size`` is in pixels (at ``dpi``; an SVG's is in points, 72 per inch). Returns ``out``."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("rltrain plot needs matplotlib: pip install 'rltrain[plot]'.") \
            from error
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"Cannot draw {out}: give a .png, .svg or .pdf file.")
    figure = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi, layout="constrained")
    ax = figure.add_subplot()
    for group in groups:
        low, high = ((group.min, group.max) if spread == "minmax"
                     else (group.mean - group.std, group.mean + group.std))
        (line,) = ax.plot(group.x, group.mean, label=group.label, linewidth=1.8)
        if group.count.max() > 1:
            ax.fill_between(group.x, low, high, color=line.get_color(), alpha=0.2,
                            linewidth=0, step=None)
    ax.set_xlabel(X_LABELS[axis])
    ax.set_ylabel("evaluation return (mean" + (", min–max)" if spread == "minmax"
                                                else " ± std)"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if title:
        ax.set_title(title)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=dpi)
    return out


def plot_runs(run_dirs: Iterable[str | Path], out: str | Path, *,
              axis: XAxis = "env_steps", spread: Spread = "minmax",
              size: tuple[int, int] = (800, 500), title: str | None = None
              ) -> list[GroupCurve]:
    """:func:`learning_curves` then :func:`draw`; returns the groups drawn."""
    groups = learning_curves(run_dirs, axis)
    draw(groups, out, axis=axis, spread=spread, size=size, title=title)
    return groups

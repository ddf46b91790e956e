"""The figure of ``rltrain compare`` (:mod:`rltrain.cli.compare`): four panels, drawn with
matplotlib (``pip install 'rltrain[plot]'``).

1. The IQM, mean and median of each group's final (or best) return with their 95% intervals.
2. Performance profiles: the fraction of runs above each return, with 95% bands.
3. The probability of improvement of each pair of groups, with its interval.
4. The fraction of runs that reached the threshold against env steps (one minus the
   Kaplan-Meier survival curve), when a threshold is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rltrain.cli.compare import AGGREGATES, Comparison, Estimate, kaplan_meier


def draw_comparison(result: Comparison, out: str | Path, *, dpi: int = 100) -> Path:
    """Draw ``result`` into ``out`` (PNG, SVG or PDF by its suffix); returns ``out``."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("rltrain compare --out FILE.png needs matplotlib: "
                          "pip install 'rltrain[plot]'.") from error
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"Cannot draw {out}: give a .png, .svg or .pdf file (or .md for "
                         "the table).")
    figure = Figure(figsize=(13, 9), dpi=dpi, layout="constrained")
    axes = figure.subplots(2, 2)
    colors = [f"C{i % 10}" for i in range(len(result.groups))]
    names = [f"G{i + 1}" for i in range(len(result.groups))]
    _aggregates(axes[0][0], result, names, colors)
    _profiles(axes[0][1], result, names, colors)
    _improvement(axes[1][0], result, names)
    _reached(axes[1][1], result, names, colors)
    figure.legend(handles=[_patch(c) for c in colors],
                  labels=[f"{n}: {g.label}" for n, g in zip(names, result.groups, strict=True)],
                  loc="outside lower center", ncols=min(2, len(names)), fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=dpi)
    return out


def _patch(color: str) -> Any:
    from matplotlib.patches import Patch
    return Patch(color=color)


def _aggregates(ax: Any, result: Comparison, names: list[str], colors: list[str]) -> None:
    rows = len(result.groups)
    for column, aggregate in enumerate(AGGREGATES):
        for row, group in enumerate(result.groups):
            estimate = getattr(group, result.metric)[aggregate]
            y = column * (rows + 1) + row
            _mark(ax, estimate, y, colors[row])
    ax.set_yticks([c * (rows + 1) + (rows - 1) / 2 for c in range(len(AGGREGATES))],
                  [a.upper() if a == "iqm" else a for a in AGGREGATES])
    ax.invert_yaxis()
    ax.set_xlabel(f"{result.metric} evaluation return (95% stratified-bootstrap CI)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("aggregates over runs")


def _mark(ax: Any, estimate: Estimate, y: float, color: str, digits: int = 1) -> None:
    """An estimate at height ``y``: its interval as a bar, its value as a dot, and both as
    numbers beside it, so that a zero-width interval (P = 1.00 [1.00, 1.00]) still shows."""
    ax.plot([estimate.low, estimate.high], [y, y], color=color, linewidth=6, alpha=0.5,
            solid_capstyle="butt")
    ax.plot([estimate.value], [y], marker="o", color="black", markersize=5)
    ax.annotate(estimate.text(digits), (estimate.value, y), xytext=(0, 7),
                textcoords="offset points", ha="center", fontsize="small")


def _profiles(ax: Any, result: Comparison, names: list[str], colors: list[str]) -> None:
    for name, curve, color in zip(names, result.profiles, colors, strict=True):
        ax.plot(result.taus, curve[0], color=color, label=name, linewidth=1.8)
        ax.fill_between(result.taus, curve[1], curve[2], color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel(f"{result.metric} evaluation return τ")
    ax.set_ylabel("fraction of runs with return > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title("performance profiles")


def _improvement(ax: Any, result: Comparison, names: list[str]) -> None:
    pairs = [(i, j) for i, j in result.improvement if i < j]
    if not pairs:
        ax.text(0.5, 0.5, "one group: nothing to compare", ha="center", va="center")
        ax.set_axis_off()
        return
    for y, (i, j) in enumerate(pairs):
        _mark(ax, result.improvement[i, j], y, "C0", digits=2)
    ax.axvline(0.5, color="gray", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(pairs)), [f"P({names[i]} > {names[j]})" for i, j in pairs])
    ax.set_xlim(-0.05, 1.05)  # a probability of 0 or 1 stays inside the frame
    ax.invert_yaxis()
    ax.set_xlabel(f"probability of improvement ({result.metric} return, 95% CI)")
    ax.set_title("probability of improvement")


def _reached(ax: Any, result: Comparison, names: list[str], colors: list[str]) -> None:
    if result.threshold is None:
        ax.text(0.5, 0.5, "no threshold: give --threshold R", ha="center", va="center")
        ax.set_axis_off()
        return
    # Groups whose curves coincide (none reached, or the same steps) stay apart by their
    # dashes, and each line says its group and how many runs reached the threshold.
    styles = ["-", "--", ":", "-."]
    for index, (name, group, color) in enumerate(zip(names, result.groups, colors,
                                                       strict=True)):
        end = max(run.steps_to for run in group.runs)
        steps, fraction = np.array([]), np.array([])
        if group.reached:  # the Kaplan-Meier curve the table's medians are read from
            cdf = kaplan_meier([run.steps_to for run in group.runs],
                               [run.reached for run in group.runs])
            steps, fraction = cdf.quantiles, cdf.probabilities
        last = float(fraction[-1]) if steps.size else 0.0
        ax.step(np.concatenate([[0.0], steps, [end]]), np.concatenate([[0.0], fraction, [last]]),
                where="post", color=color, linestyle=styles[index % len(styles)],
                label=f"{name}: {group.reached} of {len(group.runs)} reached", linewidth=1.8)
    ax.legend(loc="upper left", fontsize="small")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"reached {result.threshold:g} (Kaplan-Meier)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title("time to threshold")

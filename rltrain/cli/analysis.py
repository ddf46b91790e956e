"""The experiment commands over run directories: ``rltrain plot`` (learning curves),
``rltrain compare`` (statistics over seeds) and ``rltrain tune`` (an Optuna study). Each
imports its optional libraries only when it runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rltrain.checkpoint.files import atomic_write_text


def plot(args: argparse.Namespace) -> int:
    """``rltrain plot``: draw the runs' learning curves (:mod:`rltrain.cli.plot`) and print each
    group with its final mean return."""
    from rltrain.cli.plot import plot_runs

    width, _, height = str(args.size).lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ValueError(f"--size must be WIDTHxHEIGHT in pixels, e.g. 800x500; got "
                         f"{args.size!r}.")
    groups = plot_runs(args.runs, args.out, axis=args.axis, spread=args.spread,
                       size=(int(width), int(height)), title=args.title)
    for group in groups:
        print(f"{group.label}: final evaluation return {group.mean[-1]:.2f} "
              f"(min {group.min[-1]:.2f}, max {group.max[-1]:.2f}) over "
              f"{', '.join(str(run) for run in group.runs)}")
    print(f"wrote {args.out}")
    return 0


def compare(args: argparse.Namespace) -> int:
    """``rltrain compare``: the statistics of :mod:`rltrain.cli.compare`, printed as Markdown
    and written to each ``--out`` file (``.md`` the table, ``.png``/``.svg``/``.pdf`` the
    figure). Every output is checked before the statistics are computed."""
    from rltrain.cli.compare import compare as compare_runs
    from rltrain.cli.compare import markdown

    outs: list[Path] = list(args.out)
    for out in outs:
        if out.suffix.lower() not in (".md", ".png", ".svg", ".pdf"):
            raise ValueError(f"--out {out}: give a .md file (the table) or a .png, .svg or "
                             ".pdf file (the figure).")
    result = compare_runs(args.runs, metric=args.metric, threshold=args.threshold,
                          reps=args.reps, seed=args.seed, unfinished=args.include_unfinished)
    table = markdown(result)
    print(table, end="")
    for out in outs:
        if out.suffix.lower() == ".md":
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, table)
        else:
            from rltrain.cli.compare_figure import draw_comparison
            draw_comparison(result, out)
        print(f"wrote {out}")
    return 0


def tune(args: argparse.Namespace) -> int:
    """``rltrain tune``: an Optuna study of rltrain runs (:mod:`rltrain.cli.tune`)."""
    from rltrain.cli.tune import tune_command

    return tune_command(args)


#: The commands of this module by name.
ANALYSES: dict[str, Callable[[argparse.Namespace], int]] = {
    "plot": plot, "compare": compare, "tune": tune}

"""Statistics over seeds (``rltrain compare RUN_OR_PARENT...``), after Agarwal et al. (2021),
"Deep RL at the Edge of the Statistical Precipice".

Runs are read and grouped as ``rltrain plot`` groups them (:mod:`rltrain.cli.plot`: runs whose
configs differ only in seed and run directory are one group). For each group:

- the final and the best evaluation return of its runs: interquartile mean (IQM), mean and
  median over the runs, each with a 95% stratified-bootstrap confidence interval (rliable's
  ``get_interval_estimates``, percentile method);
- the probability that a run of one group scores higher than a run of another (rliable's
  ``probability_of_improvement``, the Mann-Whitney statistic), with its bootstrap interval;
- the performance profile: the fraction of runs scoring above each return τ, with intervals;
- env steps and seconds to the threshold: a run that never reached it is *censored* at its last
  evaluation, not dropped. The time to threshold is the Kaplan-Meier estimate (SciPy's
  ``ecdf`` of censored data); its median, with the interval where the curve's pointwise 95%
  band crosses one half (open-ended when too few runs reached the threshold).

The statistics need ``pip install 'rltrain[stats]'`` (rliable, SciPy); the figure
(:mod:`rltrain.cli.compare_figure`) needs matplotlib too.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rltrain.cli.plot import RunCurve, expand, group_runs, labels, read_run

Metric = Literal["final", "best"]

#: The aggregates of each group's scores, in the order of :func:`aggregates`.
AGGREGATES = ("iqm", "mean", "median")
#: Runs below which the interquartile mean trims nothing (it is the mean).
IQM_RUNS = 4


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its 95% interval (NaN ends when there is none: one run)."""

    value: float
    low: float
    high: float

    def text(self, digits: int = 1) -> str:
        """``"412.3 [380.1, 450.0]"``; an open end is ``∞``, an unknown value ``—``, and no
        interval (one run) ``"412.3 [no CI: 1 run]"``."""
        if math.isnan(self.low) and math.isnan(self.high) and not math.isnan(self.value):
            return f"{_number(self.value, digits)} [no CI: 1 run]"
        return f"{_number(self.value, digits)} [{_number(self.low, digits)}, " \
               f"{_number(self.high, digits)}]"


@dataclass(frozen=True)
class RunScores:
    """What :func:`compare` reads from one run.

    Attributes:
        run: The run's evaluations.
        final: The last evaluation's mean return.
        best: The highest evaluation mean return.
        steps_to: Env steps of the first evaluation at or above the threshold, or, when the
            run never reached it, its last evaluation's env steps (``reached`` False).
        seconds_to: Seconds of training at that evaluation (NaN when not recorded).
        reached: Whether the run reached the threshold.
    """

    run: RunCurve
    final: float
    best: float
    steps_to: float
    seconds_to: float
    reached: bool


@dataclass(frozen=True)
class GroupStats:
    """One group's statistics (see the module docstring).

    Attributes:
        label: What tells the group apart (as ``rltrain plot`` labels it).
        runs: Its runs' scores.
        final, best: ``{"iqm" | "mean" | "median": Estimate}`` of the final and best returns.
        steps_to, seconds_to: Kaplan-Meier median env steps and seconds to the threshold
            (``None`` without a threshold).
    """

    label: str
    runs: tuple[RunScores, ...]
    final: dict[str, Estimate]
    best: dict[str, Estimate]
    steps_to: Estimate | None
    seconds_to: Estimate | None

    @property
    def reached(self) -> int:
        """How many of the group's runs reached the threshold."""
        return sum(run.reached for run in self.runs)


@dataclass(frozen=True)
class Comparison:
    """What ``rltrain compare`` reports.

    Attributes:
        groups: Each group's statistics.
        metric: The score the improvement probabilities and profiles use.
        threshold: The return of "steps to threshold" (``None``: not reported).
        improvement: ``{(i, j): P(a run of group i scores higher than one of group j)}``.
        taus: The returns the profiles are evaluated at.
        profiles: Per group, the fraction of runs above each of ``taus``, with its interval
            (three rows: value, low, high).
    """

    groups: list[GroupStats]
    metric: Metric
    threshold: float | None
    improvement: dict[tuple[int, int], Estimate]
    taus: np.ndarray
    profiles: list[np.ndarray]


def _estimates(scores: dict[str, Any], func: Any, *, reps: int, seed: int
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """rliable's ``get_interval_estimates`` with its bootstrap samples drawn from ``seed``.
    rliable's stratified bootstraps draw their indices from NumPy's global generator (the
    ``random_state`` it takes is not used for them), so that generator is seeded here and
    restored afterwards."""
    library, _ = _rliable()
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return library.get_interval_estimates(  # type: ignore[no-any-return]
            scores, func, reps=reps)
    finally:
        np.random.set_state(state)


def _rliable() -> tuple[Any, Any]:
    try:
        from rliable import library, metrics
    except ImportError as error:
        raise ImportError("rltrain compare needs rliable: pip install 'rltrain[stats]'.") \
            from error
    return library, metrics


def scores_of(run: RunCurve, threshold: float | None) -> RunScores:
    """A run's final and best returns and when it first reached ``threshold``."""
    order = np.argsort(run.env_steps, kind="stable")
    steps, returns, seconds = run.env_steps[order], run.returns[order], run.wall_time[order]
    hits = np.flatnonzero(returns >= threshold) if threshold is not None else np.array([])
    at = int(hits[0]) if hits.size else len(steps) - 1
    return RunScores(run=run, final=float(returns[-1]), best=float(returns.max()),
                     steps_to=float(steps[at]), seconds_to=float(seconds[at]),
                     reached=bool(hits.size))


def aggregates(scores: np.ndarray) -> np.ndarray:
    """IQM, mean and median over the runs of a ``(runs, 1)`` score matrix: rliable's IQM and
    mean, and NumPy's median (rliable's ``aggregate_median`` is the median over tasks of the
    per-task means, which for one task is the mean)."""
    _, metrics = _rliable()
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores),
                     np.median(scores)])


def interval_estimates(scores: Sequence[float], reps: int, seed: int) -> dict[str, Estimate]:
    """:data:`AGGREGATES` of ``scores`` with 95% stratified-bootstrap intervals."""
    matrix = np.asarray(scores, dtype=np.float64)[:, None]
    if len(matrix) < 2:  # a bootstrap of one run is that run: no interval
        return {name: Estimate(float(value), math.nan, math.nan)
                for name, value in zip(AGGREGATES, aggregates(matrix), strict=True)}
    points, intervals = _estimates(
        {"group": matrix}, aggregates, reps=reps, seed=seed)
    return {name: Estimate(float(points["group"][i]), float(intervals["group"][0, i]),
                           float(intervals["group"][1, i]))
            for i, name in enumerate(AGGREGATES)}


def time_to_threshold(times: Sequence[float], reached: Sequence[bool]) -> Estimate:
    """The Kaplan-Meier median of ``times`` (env steps or seconds to the threshold), where a
    run that did not reach it is right-censored at its time; the interval is where the
    estimate's pointwise 95% band (Greenwood) crosses one half. ``inf`` where the curve (or
    its band) stays under one half: too few runs reached the threshold to bound it."""
    data = np.asarray(times, dtype=np.float64)
    hit = np.asarray(reached, dtype=bool)
    valid = np.isfinite(data)
    data, hit = data[valid], hit[valid]
    if not hit.any():
        return Estimate(math.inf, math.inf, math.inf) if data.size else \
            Estimate(math.nan, math.nan, math.nan)
    cdf = kaplan_meier(data, hit)
    with warnings.catch_warnings():  # "undefined at some observations": where it reaches 1
        warnings.simplefilter("ignore", RuntimeWarning)
        band = cdf.confidence_interval(0.95)
    times_at, point = cdf.quantiles, cdf.probabilities
    # Where Greenwood's band is undefined (one run, or none, left at risk), it is as wide as
    # it can be: [0, 1], never the point itself.
    low = np.where(np.isnan(band.low.probabilities), 0.0, band.low.probabilities)
    high = np.where(np.isnan(band.high.probabilities), 1.0, band.high.probabilities)
    return Estimate(_first_at_half(times_at, point), _first_at_half(times_at, high),
                    _first_at_half(times_at, low))


def kaplan_meier(times: Sequence[float] | np.ndarray, reached: Sequence[bool] | np.ndarray
                 ) -> Any:
    """SciPy's Kaplan-Meier estimate (``ecdf(...).cdf``) of the fraction of runs that have
    reached the threshold by each time, runs that did not reach it censored at ``times``."""
    from scipy import stats

    data, hit = np.asarray(times, dtype=np.float64), np.asarray(reached, dtype=bool)
    return stats.ecdf(stats.CensoredData(uncensored=data[hit], right=data[~hit])).cdf


def _first_at_half(times: np.ndarray, fraction: np.ndarray) -> float:
    at = np.flatnonzero(fraction >= 0.5 - 1e-12)
    return float(times[at[0]]) if at.size else math.inf


def improvement(groups: Sequence[np.ndarray], reps: int, seed: int
                ) -> dict[tuple[int, int], Estimate]:
    """P(a run of group i scores higher than a run of group j, ties half), each ordered pair,
    with its 95% bootstrap interval (rliable's ``probability_of_improvement``). P(j over i) is
    one minus P(i over j), bootstrap samples included, so each pair is sampled once."""
    _, metrics = _rliable()
    out = {}
    for i, x in enumerate(groups):
        for j in range(i + 1, len(groups)):
            points, intervals = _estimates(
                {"pair": [x[:, None], groups[j][:, None]]}, metrics.probability_of_improvement,
                reps=reps, seed=seed)
            value, (low, high) = float(np.ravel(points["pair"])[0]), np.ravel(intervals["pair"])
            out[i, j] = Estimate(value, float(low), float(high))
            out[j, i] = Estimate(1.0 - value, 1.0 - float(high), 1.0 - float(low))
    return out


def profiles(groups: Sequence[np.ndarray], reps: int, seed: int
             ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Performance profiles (rliable's score distributions): returns τ spanning every score,
    and per group ``(3, len(τ))``: the fraction of runs above τ, its interval's low and high."""
    library, _ = _rliable()
    every = np.concatenate(groups)
    taus = np.linspace(every.min(), every.max(), 101) if every.min() < every.max() \
        else np.array([every.min() - 1.0, every.min(), every.min() + 1.0])
    out = []
    for scores in groups:
        points, intervals = _estimates(
            {"group": scores[:, None]}, lambda s: library.score_distributions(s, taus),
            reps=reps, seed=seed)
        out.append(np.stack([points["group"], intervals["group"][0], intervals["group"][1]]))
    return taus, out


def compare(run_dirs: Iterable[str | Path], *, metric: Metric = "final",
            threshold: float | None = None, reps: int = 2_000, seed: int = 0,
            unfinished: bool = False) -> Comparison:
    """Read, group and compare the runs in ``run_dirs`` (a folder of runs stands for them;
    a run given twice counts once). ``threshold`` defaults to the runs' shared
    ``trainer.return_threshold`` (none when they differ or have none); ``reps`` bootstrap
    samples drawn from ``seed``. A run that has not finished (still running, killed, stopped
    by a signal) is left out with a warning, unless ``unfinished``: then it counts at its last
    complete evaluation."""
    if reps < 100:
        raise ValueError(f"--reps {reps}: use at least 100 bootstrap samples (default 2000).")
    runs = [read_run(run_dir) for run_dir in expand(run_dirs)]
    if not unfinished:
        for run in (r for r in runs if not r.finished):
            last = f"{int(run.env_steps[-1]):,}" if len(run.env_steps) else "no"
            warnings.warn(f"{run.run_dir} has not finished ({run.state}; its last complete "
                          f"evaluation at {last} env steps): left out. Pass "
                          "--include-unfinished to count it at that evaluation.", stacklevel=2)
        runs = [r for r in runs if r.finished]
    if not runs:
        raise ValueError("No finished run directories to compare (--include-unfinished counts "
                         "the others at their last evaluation).")
    warn_mixed_envs(runs)
    threshold = shared_threshold(runs) if threshold is None else threshold
    grouped = group_runs(runs)
    stats = []
    for index, (group, label) in enumerate(zip(grouped, labels(grouped), strict=True)):
        scores = tuple(scores_of(run, threshold) for run in group)
        timed = threshold is not None
        stats.append(GroupStats(
            label=label, runs=scores,
            final=interval_estimates([s.final for s in scores], reps, seed + index),
            best=interval_estimates([s.best for s in scores], reps, seed + index),
            steps_to=time_to_threshold([s.steps_to for s in scores],
                                       [s.reached for s in scores]) if timed else None,
            seconds_to=time_to_threshold([s.seconds_to for s in scores],
                                         [s.reached for s in scores]) if timed else None))
    chosen = [np.array([getattr(s, metric) for s in group.runs]) for group in stats]
    taus, curves = profiles(chosen, reps, seed)
    return Comparison(groups=stats, metric=metric, threshold=threshold,
                      improvement=improvement(chosen, reps, seed), taus=taus, profiles=curves)


def warn_mixed_envs(runs: Sequence[RunCurve]) -> None:
    """Warn when the runs were trained on different environments: returns are compared as
    they are (not normalised), so across envs the aggregates, profiles and improvement
    probabilities compare scales rather than agents."""
    envs = sorted({str(run.config.get("env.id")) for run in runs if "env.id" in run.config})
    if len(envs) > 1:
        warnings.warn(
            f"These runs were trained on {len(envs)} environments ({', '.join(envs)}): their "
            "returns are on different scales and are not normalised here, so the comparison "
            "measures the environments as much as the agents. Compare runs of one "
            "environment.", stacklevel=2)


def shared_threshold(runs: Sequence[RunCurve]) -> float | None:
    """The ``trainer.return_threshold`` every run has, or ``None``."""
    values = {run.config.get("trainer.return_threshold") for run in runs}
    value = values.pop() if len(values) == 1 else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def markdown(result: Comparison) -> str:
    """The comparison as Markdown: a table of the groups, then the improvement matrix."""
    names = [f"G{i + 1}" for i in range(len(result.groups))]
    lines = ["| group | runs | final IQM [95% CI] | final mean | final median | "
             "best IQM [95% CI] |" + (f" reached {result.threshold:g} | env steps to "
                                      f"{result.threshold:g} (median [95% CI]) | seconds to "
                                      f"{result.threshold:g} |"
                                      if result.threshold is not None else ""),
             "|---|---|---|---|---|---|" + ("---|---|---|" if result.threshold is not None
                                            else "")]
    for name, group in zip(names, result.groups, strict=True):
        mark = "†" if len(group.runs) < IQM_RUNS else ""
        row = (f"| {name}: {group.label} | {len(group.runs)} | "
               f"{group.final['iqm'].text()}{mark} | {group.final['mean'].text()} | "
               f"{group.final['median'].text()} | {group.best['iqm'].text()}{mark} |")
        if group.steps_to is not None and group.seconds_to is not None:
            reached = group.reached > 0
            row += (f" {group.reached}/{len(group.runs)} | "
                    f"{group.steps_to.text(0) if reached else 'not reached'} | "
                    f"{group.seconds_to.text(1) if reached else 'not reached'} |")
        lines.append(row)
    if any(len(group.runs) < IQM_RUNS for group in result.groups):
        lines += ["", f"† fewer than {IQM_RUNS} runs: the interquartile mean cuts none, so "
                      "it is their mean."]
    if len(names) > 1:
        lines += ["", f"Probability of improvement (P(a run of the row's group has a higher "
                      f"{result.metric} return than one of the column's), [95% CI]):", "",
                  "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for i, name in enumerate(names):
            cells = [result.improvement[i, j].text(2) if (i, j) in result.improvement
                     else "—" for j in range(len(names))]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if result.threshold is not None:
        lines += ["", "Runs that never reached the threshold are censored at their last "
                      "evaluation (Kaplan-Meier); ∞: fewer than half reached it within the "
                      "bound, or, as an interval's end, the 95% band (Greenwood's, undefined "
                      "once no run is left at risk) does not cross one half: too few runs to "
                      "bound it."]
    return "\n".join(lines) + "\n"


def _number(value: float, digits: int) -> str:
    if math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:,.{digits}f}"

"""Write docs/results.md, the results page, from the result files in benchmarks/results/: a
summary of every workload first (its seeds, each library's IQM, the verdicts, a link), then one
table per workload (task, budget, seeds, rltrain beside its peer per seed and as an IQM with
its 95% bootstrap interval, the probability that an rltrain run scores higher, the verdict and
the commands). Needs the ``stats`` extra (rliable, SciPy).

    python scripts/results_page.py > docs/results.md

``tests/docs/test_results_page.py`` checks that the page is what this script writes.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from benchmarks._util import first_reaching  # noqa: E402
from rltrain.cli.compare import improvement, interval_estimates  # noqa: E402
from scripts.results_workloads import REFERENCES, WORKLOADS, Reference, Workload  # noqa: E402

#: Bootstrap samples and their seed (fixed: the page is the same for the same files).
REPS, SEED = 2_000, 0
#: Seeds per library below which no verdict is given.
MIN_SEEDS = 5
#: Columns of a table of mean curves: evaluations at most this many, evenly spread.
CURVE_POINTS = 10


def _load(name: str) -> Any:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def verdict(ours: Sequence[float], theirs: Sequence[float], peer: str, lower: bool) -> str:
    """What the probability of improvement's interval says (or that too few runs are in)."""
    if min(len(ours), len(theirs)) < 2:
        return "not enough runs yet"
    a, b = (np.array(theirs), np.array(ours)) if lower else (np.array(ours), np.array(theirs))
    p = improvement([np.nan_to_num(a, posinf=1e18), np.nan_to_num(b, posinf=1e18)],
                    REPS, SEED)[0, 1]
    text = f"P(rltrain better) {p.value:.2f} [{p.low:.2f}, {p.high:.2f}]"
    if min(len(ours), len(theirs)) < MIN_SEEDS:  # a bootstrap of 2 or 3 runs is no interval
        return (f"too few seeds for a verdict ({len(ours)} and {len(theirs)}; at least "
                f"{MIN_SEEDS} each): {text}")
    if p.low > 0.5:
        return f"**rltrain ahead**: {text}"
    if p.high < 0.5:
        return f"**{peer} ahead**: {text}"
    return f"no difference measured: {text}"


def _score(value: float) -> str:
    if math.isinf(value):
        return "∞"
    return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1_000 else f"{value:,.1f}"


def steps_to(curve: Sequence[tuple[int, float]], threshold: float) -> float:
    """The env steps of the first evaluation at or above ``threshold`` (∞: none)."""
    steps = first_reaching(curve, threshold)
    return math.inf if steps is None else float(steps)


def seed_row(name: str, runs: dict[int, float], seeds: Sequence[int]) -> str:
    """A table row of per-seed scores and their IQM (— where a seed never scored)."""
    return (f"| {name} | " + " | ".join(_score(runs[s]) if s in runs else "—" for s in seeds)
            + f" | {iqm_text(runs)} |")


def iqm_text(runs: dict[int, float]) -> str:
    """The IQM of ``runs`` with its interval ("—": none, or a run that never scored)."""
    values = list(runs.values())
    if not values or not all(math.isfinite(v) for v in values):
        return "—"
    digits = 0 if all(v.is_integer() for v in values) else 1
    return str(interval_estimates(values, REPS, SEED)["iqm"].text(digits))


def per_seed_text(runs: dict[int, float]) -> str:
    """Each seed's score, for the few seeds of a reference curve, too few for an interval
    ("—": none)."""
    return ("per seed " + ", ".join(f"{runs[seed]:.1f}" for seed in sorted(runs))
            if runs else "—")


def curve_table(work: Workload, curves: dict[str, dict[int, list[tuple[int, float]]]]
                ) -> list[str]:
    """Mean evaluation return over seeds at (at most :data:`CURVE_POINTS`) evaluations that
    every run of both libraries made, with the seeds' range."""
    every = [dict(curve) for runs in curves.values() for curve in runs.values()]
    steps = sorted(set.intersection(*(set(points) for points in every)))
    if not steps:
        return []
    stride = max(1, math.ceil(len(steps) / CURVE_POINTS))
    steps = steps[::-1][::stride][::-1]  # evenly spread, the last evaluation kept
    lines = ["Mean evaluation return over seeds (lowest and highest seed below):", "",
             "| env steps | " + " | ".join(f"{x:,}" for x in steps) + " |",
             "|---|" + "---|" * len(steps)]
    for name, runs in curves.items():
        at = [[dict(curve)[x] for curve in runs.values()] for x in steps]
        lines.append(f"| {name} | " + " | ".join(
            f"{np.mean(v):,.1f}<br>({min(v):,.1f}, {max(v):,.1f})" for v in at) + " |")
    return [*lines, ""]


def random_text(name: str | None) -> str:
    """The random policy's mean score from results file ``name`` as a sentence ("": none)."""
    random = _load(name) if name else None
    return (f" Random policy on the same evaluation pipeline: {_score(random['mean'])} "
            f"({len(random['returns'])} games)." if random else "")


@dataclass(frozen=True)
class Compared:
    """One workload's runs and verdicts, for its section and its row of the summary.

    Attributes:
        ours, theirs: Each library's score by seed.
        verdict: The verdict on the scores.
        curves: ``library -> {seed: curve}`` (none when the workload has no curves).
        reached: ``library -> {seed: env steps to the threshold}`` (none without one).
        steps_verdict: The verdict on ``reached`` (fewer is better; "" without a threshold).
    """

    ours: dict[int, float]
    theirs: dict[int, float]
    verdict: str
    curves: dict[str, dict[int, list[tuple[int, float]]]] | None = None
    reached: dict[str, dict[int, float]] | None = None
    steps_verdict: str = ""


def compared(work: Workload) -> Compared:
    peer = "sb3" if work.peer == "SB3" else "cleanrl"
    ours, theirs = work.read(work.ours), work.read(peer)
    lower = "env steps to" in work.score  # fewer is better
    said = verdict(list(ours.values()), list(theirs.values()), work.peer, lower)
    if work.curves is None:
        return Compared(ours, theirs, said)
    curves = {"rltrain": work.curves(work.ours), work.peer: work.curves(peer)}
    if work.threshold is None:
        return Compared(ours, theirs, said, curves)
    threshold = work.threshold
    reached = {name: {seed: steps_to(curve, threshold) for seed, curve in runs.items()}
               for name, runs in curves.items()}
    return Compared(ours, theirs, said, curves, reached, verdict(
        list(reached["rltrain"].values()), list(reached[work.peer].values()), work.peer,
        lower=True))


def section(work: Workload, found: Compared) -> list[str]:
    ours, theirs = found.ours, found.theirs
    seeds = sorted(set(ours) | set(theirs))
    lines = [f"## {work.title}", "", work.about, "",
             f"Budget {work.budget:,} env steps; score: {work.score}; seeds: "
             f"{len(ours)} rltrain, {len(theirs)} {work.peer} (planned {work.wanted} each)."
             + random_text(work.random), ""]
    if not seeds:
        return [*lines, "No finished runs yet.", "", *(f"    {c}" for c in work.commands), ""]
    header = ["| seed | " + " | ".join(str(s) for s in seeds) + " | IQM [95% CI] |",
              "|---|" + "---|" * (len(seeds) + 1)]
    lines += [*header, seed_row("rltrain", ours, seeds), seed_row(work.peer, theirs, seeds)]
    lines += ["", f"Verdict: {found.verdict}.", ""]
    if found.reached is not None:
        lines += [f"Env steps to a mean evaluation return of {work.threshold:,g} (∞: not "
                  "reached within the budget):", "", *header,
                  *(seed_row(name, runs, seeds) for name, runs in found.reached.items()), "",
                  f"Verdict (fewer is better): {found.steps_verdict}.", ""]
    if found.curves is not None and all(found.curves.values()):
        lines += curve_table(work, found.curves)
    return [*lines, "Commands:", "", *(f"    {c}" for c in work.commands), ""]


def anchor(title: str) -> str:
    """The link to a heading of the page, as the docs site (Python-Markdown's toc) makes it."""
    words = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return "#" + re.sub(r"[-\s]+", "-", words)


def summary(found: Sequence[tuple[Workload, Compared]]) -> list[str]:
    """One row per workload: its seeds, each library's IQM and the verdicts, linked to its
    section."""
    lines = ["## At a glance", "",
             "| workload | score | seeds | rltrain IQM | peer IQM | verdict | env steps to the "
             "threshold |", "|---|---|---|---|---|---|---|"]
    for work, c in found:
        steps = (f"{c.steps_verdict} (threshold {work.threshold:,g})" if c.reached is not None
                 else "")
        lines.append(f"| [{work.title}]({anchor(work.title)}) | {work.score} | "
                     f"{len(c.ours)} and {len(c.theirs)} {work.peer} | {iqm_text(c.ours)} | "
                     f"{work.peer} {iqm_text(c.theirs)} | {c.verdict} | {steps} |")
    for ref in REFERENCES:
        runs, peer = ref.curves("rltrain"), ref.curves("sb3")
        finals = [{seed: curve[-1][1] for seed, curve in library.items()}
                  for library in (runs, peer)]
        lines.append(f"| [{ref.title}]({anchor(ref.title)}) | evaluation return at "
                     f"{ref.budget:,} env steps | {len(runs)} and {len(peer)} SB3 (planned "
                     f"{ref.wanted} each) | {per_seed_text(finals[0])} | SB3 "
                     f"{per_seed_text(finals[1])}; "
                     "the random policy and published curves in the section | | |")
    return [*lines, ""]


def dopamine_curve(published: dict[str, Any], budget: int) -> dict[int, list[float]]:
    """Dopamine's runs as ``{env steps at an iteration's end: [each run's return]}``."""
    per = int(published["env_steps_per_iteration"])
    return {per * (i + 1): [float(run[i]) for run in published["runs"]]
            for i in range(len(published["runs"][0])) if per * (i + 1) <= budget}


def reference_section(ref: Reference) -> list[str]:
    runs, peer = ref.curves("rltrain"), ref.curves("sb3")
    published = _load(ref.published)
    dopamine = dopamine_curve(published["dopamine"], ref.budget)
    steps = sorted({x for curve in [*runs.values(), *peer.values()] for x, _ in curve}
                   | set(dopamine))
    lines = [f"## {ref.title}", "", ref.about, "",
             f"Budget {ref.budget:,} env steps; seeds: {len(runs)} rltrain, {len(peer)} SB3 "
             f"(planned {ref.wanted} each)." + random_text(ref.random), ""]
    if runs or peer:
        lines += ["Evaluation return (mean of 10 greedy whole games) by env steps, beside "
                  "Dopamine's DQN, each column the iteration that ends there ("
                  f"{published['dopamine']['what']}; the mean of its "
                  f"{len(published['dopamine']['runs'])} runs, lowest and highest below):", "",
                  "| env steps | " + " | ".join(f"{x:,}" for x in steps) + " |",
                  "|---|" + "---|" * len(steps)]
        for name, found in (("rltrain", runs), ("SB3", peer)):
            for seed, curve in sorted(found.items()):
                at = dict(curve)
                lines.append(f"| {name} seed {seed} | " + " | ".join(
                    _score(at[x]) if x in at else "" for x in steps) + " |")
        lines += ["| Dopamine DQN | " + " | ".join(
            f"{np.mean(dopamine[x]):,.1f}<br>({min(dopamine[x]):,.1f}, {max(dopamine[x]):,.1f})"
            if x in dopamine else "" for x in steps) + " |", ""]
    else:
        lines += ["No finished runs yet.", ""]
    lines += ["Published scores at longer budgets: " + "; ".join(
        f"{final['source']}: {_score(final['score'])}"
        + (f" at {final['env_steps']:,} env steps" if final["env_steps"] else "")
        for final in published["finals"]) + ".", "",
        "Commands:", "", *(f"    {c}" for c in ref.commands), ""]
    return lines


def page() -> str:
    head = ["# Results", "",
            "How rltrain learns beside the libraries practitioners compare it with, on the same "
            "settings and seeds. Every number comes from a file in `benchmarks/results/`; this "
            "page is written from them by `python scripts/results_page.py > docs/results.md`. "
            "IQM: the interquartile mean over seeds (the mean below 4 seeds), with a 95% "
            "stratified-bootstrap interval; P(rltrain better): the probability that an rltrain "
            "run scores better than a peer run (Mann-Whitney), with its interval; the verdict "
            "names a library only when that interval excludes one half. The same comparisons "
            "come from `rltrain compare` itself (also the env steps to a threshold with runs "
            "that never reach it censored): `python -m benchmarks.groups` writes each group's "
            "runs as run directories and prints its table. How each benchmark is run, and the "
            "measurements behind implementation choices, are in [benchmarks.md](benchmarks.md)."
            , ""]
    found = [(work, compared(work)) for work in WORKLOADS]
    return "\n".join(head + summary(found)
                     + [line for work, c in found for line in section(work, c)]
                     + [line for ref in REFERENCES for line in reference_section(ref)])


if __name__ == "__main__":
    sys.stdout.write(page())

"""Write docs/results.md, the results page, from the result files in benchmarks/results/: one
table per workload (task, budget, seeds, rltrain beside its peer per seed and as an IQM with
its 95% bootstrap interval, the probability that an rltrain run scores higher, the verdict and
the commands). Needs the ``stats`` extra (rliable, SciPy).

    python scripts/results_page.py > docs/results.md

``tests/docs/test_results_page.py`` checks that the page is what this script writes.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from benchmarks._util import first_reaching  # noqa: E402
from benchmarks.groups import (  # noqa: E402
    GROUPS,
    atari_curves,
    atari_finals,
    cleanrl_finals,
    per_seed_files,
    played_on,
)
from rltrain.cli.compare import improvement, interval_estimates  # noqa: E402

#: Bootstrap samples and their seed (fixed: the page is the same for the same files).
REPS, SEED = 2_000, 0
#: Seeds per library below which no verdict is given.
MIN_SEEDS = 5


@dataclass(frozen=True)
class Workload:
    """One table of the page.

    Attributes:
        title: The heading.
        about: What is run, in a sentence or two.
        budget: Env steps per run.
        score: What a run's score is.
        peer: The other library's name.
        read: ``library -> {seed: score}`` from the result files.
        commands: How to run both sides.
        wanted: Seeds per library the comparison is planned with.
        curves: ``library -> {seed: [(env steps, evaluation return), ...]}``, for the table of
            mean curves and the env steps to ``threshold``. Default: none.
        threshold: A return whose first reaching is tabled per seed. Default: none.
        random: The results file of the random policy's games on rltrain's evaluation
            pipeline. Default: none.
        ours: The name rltrain's result files carry (an earlier version's runs keep their
            own). Default ``"rltrain"``.
    """

    title: str
    about: str
    budget: int
    score: str
    peer: str
    read: Callable[[str], dict[int, float]]
    commands: tuple[str, ...]
    wanted: int = 5
    curves: Callable[[str], dict[int, list[tuple[int, float]]]] | None = None
    threshold: float | None = None
    random: str | None = None
    ours: str = "rltrain"

#: Columns of a table of mean curves: evaluations at most this many, evenly spread.
CURVE_POINTS = 10


def _load(name: str) -> Any:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def of_group(name: str) -> dict[str, Any]:
    """A :class:`Workload`'s curves, threshold and rltrain's name, from peer group ``name``
    (:data:`benchmarks.groups.GROUPS`)."""
    group = GROUPS[name]
    return {"curves": group.curves, "threshold": group.threshold, "ours": group.ours}


BREAKOUT = (
    "`ppo_atari` (8 envs x 128 steps, the Nature CNN; rltrain on envpool's envs) on "
    "ALE/Breakout-v5 beside Stable-Baselines3's PPO `CnnPolicy` on the same settings "
    "(`AtariWrapper`, 4 frames stacked); 10 greedy whole games every 100,000 env steps. "
    "The value loss weighs 0.5 on both sides (`agent.vf_coef=0.5`, the preset's value when "
    "the group began; the preset now has CleanRL's 0.25, which in SB3's convention, "
    "rltrain's, is half CleanRL's `vf_coef`).")
BREAKOUT_COMMANDS = (
    "python -m benchmarks.atari_ppo --library rltrain --seed S --run-dir RUN agent.vf_coef=0.5",
    "python -m benchmarks.atari_ppo --library sb3 --seed S --run-dir RUN_SB3 agent.vf_coef=0.5")

WORKLOADS = [
    Workload(
        "PPO on Atari Breakout", BREAKOUT + " Each library's evaluations restart a lost life "
        "as its training does (rltrain on envpool: after 0 to 29 random no-op frames; SB3: "
        "after one no-op step). rltrain trained on envpool's own frame stack (before "
        "2026-12-06), which carries a lost life's last frames into the next life.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"), BREAKOUT_COMMANDS,
        **of_group("breakout"),
        random="atari_ppo_breakout_random_seed0"),
    Workload(
        "PPO on Atari Breakout, rltrain on Gymnasium's envs", BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on Gymnasium's async envs, whose pipeline "
            "plays SB3's `AtariWrapper` frame for frame") + " The same SB3 runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --backend "
                                      "gymnasium"), BREAKOUT_COMMANDS[1]),
        **of_group("breakout-gymnasium")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs stacked by rltrain", BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on envpool's envs, whose frames rltrain "
            "stacks itself since 2026-12-06, refilled at each life's start as on Gymnasium's "
            "envs (envpool's own stack keeps the lost life's last frames)") + " The same SB3 "
        "runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --label "
                                      "rltrain-envpool-refill"), BREAKOUT_COMMANDS[1]),
        **of_group("breakout-envpool-refill")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs started SB3's way",
        BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on envpool's envs, stacked by rltrain, "
            "whose games and lives rltrain starts itself as SB3's `AtariWrapper` does "
            "(`env.atari.life_noops=false`, since 2026-12-06: a lost life goes on after one "
            "no-op step, then FIRE and action 2, where envpool takes 0 to 29 random no-op "
            "frames); evaluated on the same restart") + " The same SB3 runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --label "
                                      "rltrain-envpool-sb3-starts") + " env.atari.life_noops=false",
         BREAKOUT_COMMANDS[1]),
        **of_group("breakout-envpool-sb3-starts")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs stacked by rltrain, played on SB3's "
        "life restart", "The final checkpoints of the group above played on rltrain's "
        "Gymnasium pipeline, which restarts a lost life after one no-op step as SB3's "
        "`AtariWrapper` does (and as SB3's evaluations above did), beside those SB3 "
        "evaluations: both libraries scored on the same restart. 10 greedy whole games each.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        played_on("repeat"),
        ("python -m benchmarks.atari_life_restart RUN --restarts repeat zeros repeat+noops "
         "--results atari_life_restart_breakout_rltrain-envpool-refill_seedS",),
        ours="rltrain-envpool-refill"),
    Workload(
        "PPO on Atari Breakout, rltrain evaluated on SB3's life restart (before 2026-12-06)",
        BREAKOUT + " rltrain's evaluations then restarted a lost life after one no-op step, "
        "SB3's way, where its training on envpool's envs restarts after random no-ops: its "
        "greedy agents met a restart they had rarely seen (the same three final checkpoints "
        "scored 8.0, 17.0 and 25.6 so, 11.3, 19.5 and 27.5 on envpool's restart). Kept as "
        "measured; the table above is the group measured again.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"), BREAKOUT_COMMANDS,
        **of_group("breakout-one-noop-eval")),
    Workload(
        "DQN on CartPole-v1 with CleanRL's settings", "rltrain's DQN given CleanRL's "
        "`dqn.py` hyperparameters as overrides (`agent.loss=mse`, lr 2.5e-4, a 120-84 MLP, no "
        "double Q, no gradient clip, the target copied every 500 env steps) beside CleanRL's "
        "own script (patched for the Gymnasium 1.x vector API only).", 500_000,
        "mean return of the last 100 training episodes (what CleanRL reports)", "CleanRL",
        cleanrl_finals,
        ("python -m benchmarks.cleanrl_dqn --cleanrl CLEANRL_CHECKOUT --seeds 1 2 3 4 5",)),
    Workload(
        "SAC with gSDE on MountainCarContinuous-v0", "RL-Zoo's entry "
        "(`zoo:sac/MountainCarContinuous-v0`: gSDE with `use_expln`, 64x64, 50,000 env steps) "
        "beside SB3's SAC on the same settings; 10 greedy episodes every 2,500 env steps.",
        50_000, "env steps to a mean greedy return of 90 (∞: not reached)", "SB3",
        per_seed_files("sac_mountaincar_gsde", "threshold_env_steps"),
        ("python -m benchmarks.sac_learning --config zoo:sac/MountainCarContinuous-v0 "
         "--seeds S --threshold 90 --eval-interval 2500 --results "
         "sac_mountaincar_gsde_rltrain_seedS [--sb3 --results sac_mountaincar_gsde_sb3_seedS]",),
        curves=GROUPS["sac"].curves),
    Workload(
        "TD3 on HalfCheetah-v5", "`td3_halfcheetah` beside SB3's TD3 on the same settings; 10 "
        "greedy episodes every 10,000 env steps.", 100_000,
        "mean greedy return at 100,000 env steps", "SB3",
        per_seed_files("td3_halfcheetah", "final_eval_return"),
        ("python -m benchmarks.mujoco_offpolicy --config td3_halfcheetah --seeds S "
         "--run-dir RUNS --results td3_halfcheetah_rltrain_seedS "
         "[--sb3 --results td3_halfcheetah_sb3_seedS]",),
        **of_group("td3")),
]


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
    values = [runs[s] for s in sorted(runs)]
    finite = [v for v in values if math.isfinite(v)]
    digits = 0 if all(v.is_integer() for v in finite) else 1
    iqm = (interval_estimates(finite, REPS, SEED)["iqm"].text(digits) if finite
           and len(finite) == len(values) else "—")
    return (f"| {name} | " + " | ".join(_score(runs[s]) if s in runs else "—" for s in seeds)
            + f" | {iqm} |")


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


def section(work: Workload) -> list[str]:
    ours, theirs = work.read(work.ours), work.read("sb3" if work.peer == "SB3" else "cleanrl")
    lower = "env steps to" in work.score  # fewer is better
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
    verdict_text = verdict(list(ours.values()), list(theirs.values()), work.peer, lower)
    lines += ["", f"Verdict: {verdict_text}.", ""]
    if work.curves is not None:
        curves = {"rltrain": work.curves(work.ours),
                  work.peer: work.curves("sb3" if work.peer == "SB3" else "cleanrl")}
        if work.threshold is not None:
            reached = {name: {seed: steps_to(curve, work.threshold)
                              for seed, curve in runs.items()} for name, runs in curves.items()}
            lines += [f"Env steps to a mean evaluation return of {work.threshold:,g} (∞: not "
                      "reached within the budget):", "", *header,
                      *(seed_row(name, runs, seeds) for name, runs in reached.items()), "",
                      "Verdict (fewer is better): " + verdict(
                          list(reached["rltrain"].values()), list(reached[work.peer].values()),
                          work.peer, lower=True) + ".", ""]
        if all(curves.values()):
            lines += curve_table(work, curves)
    return [*lines, "Commands:", "", *(f"    {c}" for c in work.commands), ""]


@dataclass(frozen=True)
class Reference:
    """A table of rltrain's curves beside published ones and the random policy, where no peer
    ran here on the same settings.

    Attributes:
        title: The heading.
        about: What is run.
        budget: Env steps per run.
        curves: rltrain's finished seeds: ``{seed: [(env steps, evaluation return), ...]}``.
        random: The results file of the random policy's games on rltrain's pipeline.
        published: The results file of published curves (``dopamine``: runs of returns per
            iteration; ``finals``: single scores with their budgets).
        command: How to run rltrain's side.
        wanted: Seeds planned.
    """

    title: str
    about: str
    budget: int
    curves: Callable[[str], dict[int, list[tuple[int, float]]]]
    random: str
    published: str
    command: str
    wanted: int


def dopamine_curve(published: dict[str, Any], budget: int) -> dict[int, list[float]]:
    """Dopamine's runs as ``{env steps at an iteration's end: [each run's return]}``."""
    per = int(published["env_steps_per_iteration"])
    return {per * (i + 1): [float(run[i]) for run in published["runs"]]
            for i in range(len(published["runs"][0])) if per * (i + 1) <= budget}


def reference_section(ref: Reference) -> list[str]:
    runs = ref.curves("rltrain")
    published = _load(ref.published)
    dopamine = dopamine_curve(published["dopamine"], ref.budget)
    steps = sorted({x for curve in runs.values() for x, _ in curve} | set(dopamine))
    lines = [f"## {ref.title}", "", ref.about, "",
             f"Budget {ref.budget:,} env steps; seeds: {len(runs)} rltrain (planned "
             f"{ref.wanted})." + random_text(ref.random), ""]
    if runs:
        lines += ["Evaluation return (mean of 10 greedy whole games) by env steps, beside "
                  "Dopamine's DQN, each column the iteration that ends there ("
                  f"{published['dopamine']['what']}; the mean of its "
                  f"{len(published['dopamine']['runs'])} runs, lowest and highest below):", "",
                  "| env steps | " + " | ".join(f"{x:,}" for x in steps) + " |",
                  "|---|" + "---|" * len(steps)]
        for seed, curve in sorted(runs.items()):
            at = dict(curve)
            lines.append(f"| rltrain seed {seed} | " + " | ".join(
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
        "Command:", "", f"    {ref.command}", ""]
    return lines


REFERENCES = [
    Reference(
        "DQN on Atari Pong", "`dqn_atari` (RL-Zoo's Atari DQN settings: replay 100,000, "
        "100,000 random steps first, one gradient step per 4 env steps, the target copied "
        "every 1,000 env steps, epsilon 1 to 0.01 over 1,000,000 env steps, the Nature CNN) on "
        "ALE/Pong-v5 without sticky actions; 10 greedy whole games every 100,000 env steps. No "
        "peer ran here; beside it, the random policy and published curves.", 1_000_000,
        atari_curves("pong", "dqn"), "atari_dqn_pong_random_seed0", "published_dqn_pong",
        "python -m benchmarks.atari_ppo --library rltrain --preset dqn_atari --game "
        "ALE/Pong-v5 --seed S --run-dir RUN", 2),
]


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
    return "\n".join(head + [line for work in WORKLOADS for line in section(work)]
                     + [line for ref in REFERENCES for line in reference_section(ref)])


if __name__ == "__main__":
    sys.stdout.write(page())

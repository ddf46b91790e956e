"""``rltrain compare``: the statistics against rliable's and SciPy's own functions on fixed data,
censoring of runs that never reach the threshold, and the command on real run directories (the
Markdown table and a PNG figure read back)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import rltrain

pytest.importorskip("rliable")
from rliable import library as rly
from rliable import metrics
from scipy import stats

from rltrain.cli.compare import (
    compare,
    improvement,
    interval_estimates,
    markdown,
    time_to_threshold,
)

SCORES_A = np.array([120.0, 500.0, 480.0, 310.0, 500.0, 95.0, 430.0])
SCORES_B = np.array([60.0, 210.0, 480.0, 150.0, 75.0])


def test_aggregates_and_intervals_are_rliables() -> None:
    got = interval_estimates(SCORES_A, reps=500, seed=3)
    assert interval_estimates(SCORES_A, reps=500, seed=3) == got  # the seed fixes the samples
    np.random.seed(3)  # rliable draws its bootstrap indices from NumPy's global generator
    points, intervals = rly.get_interval_estimates(
        {"a": SCORES_A[:, None]}, lambda s: np.array([
            metrics.aggregate_iqm(s), metrics.aggregate_mean(s), np.median(s)]),
        reps=500)
    for i, name in enumerate(("iqm", "mean", "median")):
        assert got[name].value == pytest.approx(points["a"][i])
        assert (got[name].low, got[name].high) == pytest.approx(tuple(intervals["a"][:, i]))
    # the IQM by hand: the mean of the middle half of the 7 sorted scores (1.75 cut each side)
    assert got["iqm"].value == pytest.approx(stats.trim_mean(SCORES_A, 0.25))
    assert got["median"].value == 430.0  # over the runs (rliable's is over tasks)
    assert got["iqm"].low <= got["iqm"].value <= got["iqm"].high


def test_probability_of_improvement_is_mann_whitney_and_symmetric() -> None:
    got = improvement([SCORES_A, SCORES_B], reps=500, seed=0)
    u = stats.mannwhitneyu(SCORES_A, SCORES_B, alternative="greater").statistic
    assert got[0, 1].value == pytest.approx(u / (len(SCORES_A) * len(SCORES_B)))
    assert got[0, 1].value == pytest.approx(
        metrics.probability_of_improvement(SCORES_A[:, None], SCORES_B[:, None]))
    assert got[1, 0].value == pytest.approx(1 - got[0, 1].value)
    assert got[1, 0].low == pytest.approx(1 - got[0, 1].high)
    assert 0.5 < got[0, 1].value and got[0, 1].low <= got[0, 1].value <= got[0, 1].high


def test_time_to_threshold_is_kaplan_meier_with_censored_runs() -> None:
    # 5 runs: 3 reached at 10k, 20k, 40k; 2 never did, evaluated until 30k and 50k
    times, reached = [10e3, 20e3, 40e3, 30e3, 50e3], [True, True, True, False, False]
    got = time_to_threshold(times, reached)
    # Kaplan-Meier by hand: S = 4/5 after 10k, 3/5 after 20k, (3/5)(1/2) = 3/10 after 40k
    # (the run censored at 30k leaves 2 at risk): the median is 40k. Dropping the censored
    # runs would give 20k.
    assert got.value == 40e3
    cdf = stats.ecdf(stats.CensoredData(uncensored=[10e3, 20e3, 40e3], right=[30e3, 50e3])).cdf
    assert cdf.evaluate(40e3) == pytest.approx(0.7)
    assert got.low <= got.value <= got.high
    never = time_to_threshold([10e3, 30e3, 30e3], [True, False, False])
    assert never.value == math.inf  # 1 of 3 reached by the end: the median is not reached
    assert time_to_threshold([10e3, 20e3], [False, False]).value == math.inf
    assert time_to_threshold([5e3], [True]).value == 5e3


def write_run(run_dir: Path, lr: float, seed: int, returns: list[float],
              env_id: str = "CartPole-v1", *, end: str | None = "num_steps",
              threads: int = 1, cut_short: float | None = None) -> None:
    """A run directory as rltrain writes it (config.yaml, metrics.jsonl). ``end``: the stop
    reason of its ``end`` row (``"num_steps"`` for none: it took all its steps), or None for a
    run with no ``end`` row (running or killed); ``cut_short``: the return of a last
    evaluation a stop request cut short."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(
        f"agent:\n  name: ppo\n  lr: {lr}\nenv:\n  id: {env_id}\nstrategy:\n  seed: {seed}\n"
        f"trainer:\n  run_dir: {run_dir}\n  return_threshold: 400.0\n"
        f"  num_threads: {threads}\n")
    rows: list[dict[str, object]] = [{"event": "start", "env_steps": 0}]
    for k, value in enumerate(returns, 1):
        rows += [{"event": "metrics", "env_steps": k * 1000, "time/elapsed": 2.0 * k},
                 {"event": "evaluation", "env_steps": k * 1000, "eval/return_mean": value,
                  "complete": True}]
    if cut_short is not None:
        rows.append({"event": "evaluation", "env_steps": len(returns) * 1000 + 500,
                     "eval/return_mean": cut_short, "complete": False})
    if end is not None:
        rows.append({"event": "end", "env_steps": len(returns) * 1000,
                     "stop_reason": None if end == "num_steps" else end})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_groups_finals_and_censoring_from_run_directories(tmp_path: Path) -> None:
    curves = {0: [50, 200, 410], 1: [80, 120, 150], 2: [300, 450, 470]}
    for seed, returns in curves.items():
        write_run(tmp_path / "slow" / f"seed-{seed}", 1e-3, seed, returns)
        write_run(tmp_path / "fast" / f"seed-{seed}", 3e-3, seed, [r + 200 for r in returns])
    result = compare([tmp_path / "slow", tmp_path / "fast"], reps=200)
    assert result.threshold == 400.0  # the runs' own trainer.return_threshold
    slow, fast = sorted(result.groups, key=lambda g: g.final["mean"].value)
    assert sorted(s.final for s in slow.runs) == [150, 410, 470]
    assert slow.reached == 2 and fast.reached == 2
    assert slow.steps_to is not None and slow.steps_to.value == 3000  # seeds at 3k, 2k, never
    assert fast.steps_to is not None and fast.steps_to.value == 2000  # 2k, never, 1k
    assert fast.seconds_to is not None and fast.seconds_to.value == 4.0
    table = markdown(result)
    assert "agent.lr=0.001 (3 seeds)" in table and "agent.lr=0.003 (3 seeds)" in table
    assert "2/3" in table and "Probability of improvement" in table


@pytest.mark.slow
def test_the_command_writes_the_table_and_the_figure(tmp_path: Path) -> None:
    for seed in range(3):
        write_run(tmp_path / "runs" / f"seed-{seed}", 1e-3, seed, [10.0 * seed, 420.0])
    done = rltrain("compare", "runs", "--threshold", "415", "--reps", "200", "--out",
                   "report.md", "--out", "report.png", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3/3" in (tmp_path / "report.md").read_text() and "3/3" in done.stdout
    from matplotlib.image import imread
    image = imread(tmp_path / "report.png")
    assert image.shape[0] > 500 and image.shape[1] > 800 and image.std() > 0.01
    bad = rltrain("compare", "runs", "--out", "report.txt", cwd=tmp_path)
    assert bad.returncode == 2 and "--out report.txt" in bad.stderr
    assert not (tmp_path / "report.txt").exists()
    missing = rltrain("compare", "nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and "nowhere is not a run directory: it does not exist" \
        in missing.stderr and "plot" not in missing.stderr


def test_runs_of_different_environments_are_compared_with_a_warning(tmp_path: Path) -> None:
    for seed in range(2):
        write_run(tmp_path / "cartpole" / f"seed-{seed}", 1e-3, seed, [100.0, 400.0 + seed])
        write_run(tmp_path / "acrobot" / f"seed-{seed}", 1e-3, seed, [-300.0, -90.0 - seed],
                  env_id="Acrobot-v1")
    with pytest.warns(UserWarning, match=r"trained on 2 environments \(Acrobot-v1, "
                      r"CartPole-v1\): their returns are on different scales"):
        result = compare([tmp_path / "cartpole", tmp_path / "acrobot"], reps=200)
    assert len(result.groups) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one environment: no warning
        compare([tmp_path / "cartpole"], reps=200)


def test_an_evaluation_a_stop_cut_short_is_not_a_score(tmp_path: Path) -> None:
    write_run(tmp_path / "g" / "seed-0", 1e-3, 0, [50.0, 104.0], cut_short=500.0,
              end="SIGINT received")
    write_run(tmp_path / "g" / "seed-1", 1e-3, 1, [60.0, 200.0])
    result = compare([tmp_path / "g"], reps=200, unfinished=True)
    (group,) = result.groups
    assert sorted(run.final for run in group.runs) == [104.0, 200.0]  # not the cut-short 500
    assert max(run.best for run in group.runs) == 200.0 and group.reached == 0


def test_runs_that_have_not_finished_are_left_out_with_a_warning(tmp_path: Path) -> None:
    write_run(tmp_path / "g" / "seed-0", 1e-3, 0, [50.0, 420.0])
    write_run(tmp_path / "g" / "seed-1", 1e-3, 1, [60.0, 300.0], end=None)  # running/killed
    write_run(tmp_path / "g" / "seed-2", 1e-3, 2, [70.0, 90.0], end="SIGTERM received")
    with pytest.warns(UserWarning) as caught:
        result = compare([tmp_path / "g"], reps=200)
    messages = " ".join(str(w.message) for w in caught)
    assert "seed-1 has not finished (running or killed" in messages
    assert "seed-2 has not finished (SIGTERM received" in messages
    assert [run.final for run in result.groups[0].runs] == [420.0]
    everything = compare([tmp_path / "g"], reps=200, unfinished=True)
    assert sorted(run.final for run in everything.groups[0].runs) == [90.0, 300.0, 420.0]
    threshold = compare([tmp_path / "g" / "seed-0"], reps=200)  # stopped on its threshold
    assert threshold.groups[0].runs[0].final == 420.0


def test_a_run_given_twice_counts_once_and_thread_counts_make_no_group(tmp_path: Path) -> None:
    for seed in range(3):  # launched with other --jobs: other torch thread counts
        write_run(tmp_path / "g" / f"seed-{seed}", 1e-3, seed, [100.0 * seed], threads=seed + 1)
    with pytest.warns(UserWarning, match=r"seed-0 is the run .*seed-0 given again: counted once"):
        result = compare([tmp_path / "g" / "seed-0", tmp_path / "g"], reps=200)
    (group,) = result.groups
    assert sorted(run.final for run in group.runs) == [0.0, 100.0, 200.0]


def test_intervals_are_never_zero_width_where_they_cannot_be_known(tmp_path: Path) -> None:
    # 1 of 3 runs reached the threshold, the other two censored before it: one run at risk
    # at the event, so Greenwood's band is undefined there: the interval is open, not a point
    estimate = time_to_threshold([300.6, 100.0, 150.0], [True, False, False])
    assert estimate.value == math.inf or estimate.high == math.inf
    assert estimate.low < estimate.high
    single = time_to_threshold([300.6, 500.0, 500.0], [True, False, False])
    assert single.high == math.inf  # the upper end is unbounded by one event of three
    # one run: no interval at all; all censored: "not reached"; under 4 runs: IQM = mean
    write_run(tmp_path / "one" / "seed-0", 1e-3, 0, [100.0, 200.0])
    for seed in range(2):
        write_run(tmp_path / "two" / f"seed-{seed}", 3e-3, seed, [50.0, 60.0 + seed])
    result = compare([tmp_path / "one", tmp_path / "two"], reps=200, threshold=400.0)
    one = next(g for g in result.groups if len(g.runs) == 1)
    assert math.isnan(one.final["iqm"].low) and one.final["iqm"].text() == \
        "200.0 [no CI: 1 run]"
    table = markdown(result)
    assert "0/1 | not reached | not reached |" in table and "∞ [∞, ∞]" not in table
    assert "200.0 [no CI: 1 run]†" in table and "† fewer than 4 runs" in table


@pytest.mark.slow
def test_seconds_to_threshold_are_the_summary_s_for_a_real_run(tmp_path: Path) -> None:
    """The table's seconds to threshold of a run that reached it in one ``fit`` are the
    ``threshold_seconds`` its ``summary.json`` reports: one clock, the evaluation's own."""
    from rltrain.cli.compare import scores_of
    from rltrain.cli.plot import read_run

    run = tmp_path / "run"
    done = rltrain("fit", "ppo_cartpole", "trainer.num_steps=8192", "trainer.eval_interval=1024",
                   "trainer.eval_episodes=2", "trainer.return_threshold=25",
                   "trainer.logger=false", f"trainer.run_dir={run}", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["threshold_seconds"] is not None, summary
    scores = scores_of(read_run(run), 25.0)
    assert scores.reached and scores.steps_to == summary["threshold_env_steps"]
    assert scores.seconds_to == pytest.approx(summary["threshold_seconds"], abs=0.01)


@pytest.mark.parametrize("threshold", ["nan", pytest.param("inf", marks=pytest.mark.slow)])
def test_a_threshold_that_is_no_finite_number_is_refused(tmp_path: Path,
                                                          threshold: str) -> None:
    done = rltrain("compare", str(tmp_path), "--threshold", threshold, cwd=tmp_path)
    assert done.returncode == 2
    assert f"argument --threshold: must be a finite number; got {threshold}" in done.stderr


def test_every_estimate_is_drawn_as_a_mark_with_its_number_and_coinciding_lines_apart(
) -> None:
    """When every run of one group beats every run of the other, P = 1.00 [1.00, 1.00] is a
    dot with its number inside the frame (not a zero-width bar on the frame's edge); two
    groups that never reach the threshold have lines told apart by their dashes and labels."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from rltrain.cli.compare import Comparison, Estimate, GroupStats, RunScores
    from rltrain.cli.compare_figure import _aggregates, _improvement, _reached

    def group(label: str, score: float) -> GroupStats:
        runs = tuple(RunScores(run=None, final=score, best=score, steps_to=5_000.0,  # type: ignore[arg-type]
                               seconds_to=float("nan"), reached=False) for _ in range(3))
        same = Estimate(score, score, score)
        return GroupStats(label, runs, {a: same for a in ("iqm", "mean", "median")},
                          {a: same for a in ("iqm", "mean", "median")}, None, None)

    result = Comparison([group("a", 500.0), group("b", 20.0)], "final", 475.0,
                        {(0, 1): Estimate(1.0, 1.0, 1.0), (1, 0): Estimate(0.0, 0.0, 0.0)},
                        np.linspace(0, 500, 5), [np.zeros((3, 5))] * 2)
    axes = Figure().subplots(1, 3)
    _improvement(axes[0], result, ["G1", "G2"])
    assert [t.get_text() for t in axes[0].texts] == ["1.00 [1.00, 1.00]"]
    dots = [line for line in axes[0].lines if line.get_marker() == "o"]
    assert len(dots) == 1 and dots[0].get_xdata()[0] == 1.0
    low, high = axes[0].get_xlim()
    assert low < 0 and high > 1  # the dot at 1 is inside the frame
    _aggregates(axes[1], result, ["G1", "G2"], ["C0", "C1"])
    assert sorted({t.get_text() for t in axes[1].texts}) == ["20.0 [20.0, 20.0]",
                                                            "500.0 [500.0, 500.0]"]
    _reached(axes[2], result, ["G1", "G2"], ["C0", "C1"])
    lines = axes[2].get_lines()
    assert [line.get_label() for line in lines] == ["G1: 0 of 3 reached", "G2: 0 of 3 reached"]
    assert lines[0].get_linestyle() != lines[1].get_linestyle()

"""Learning curves (issue 16, item 5): ``rltrain plot RUN_DIR...`` from real short runs, two
seeds of one config and one run of another; the data (grouping, mean, spread) checked apart
from the drawing, and the image read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from rltrain.cli.metrics_file import MetricsTail, read_rows
from rltrain.cli.plot import RunCurve, aggregate, group_runs, learning_curves, read_run
from rltrain.config.schema import compose
from rltrain.trainer import build

STEPS, INTERVAL = 600, 200


def fit(run_dir: Path, seed: int, lr: float) -> Path:
    overrides = [f"trainer.num_steps={STEPS}", f"trainer.eval_interval={INTERVAL}",
                 "trainer.eval_episodes=2", "trainer.log_interval=100",
                 "trainer.return_threshold=null", "trainer.enable_progress_bar=false",
                 "trainer.enable_console=false", "trainer.logger=false",
                 "trainer.num_threads=1", "strategy.warmup_steps=100",
                 "strategy.train_interval=50", "strategy.train_steps=10",
                 f"strategy.seed={seed}", f"agent.lr={lr}", f"trainer.run_dir={run_dir}"]
    build(compose(["dqn_cartpole"], overrides)).fit()
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plot")
    return {"a0": fit(root / "a0", 0, 1e-3), "a1": fit(root / "a1", 1, 1e-3),
            "b0": fit(root / "b0", 0, 3e-3)}


def evaluation_returns(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["env_steps"]: row["eval/return_mean"] for row in rows
            if row["event"] == "evaluation"}


@pytest.mark.slow
def test_runs_differing_only_in_seed_and_run_dir_form_one_group_with_their_mean(
        runs: dict[str, Path]) -> None:
    groups = learning_curves([runs["a0"], runs["b0"], runs["a1"]])
    assert [g.runs for g in groups] == [(runs["a0"], runs["a1"]), (runs["b0"],)]
    a, b = groups
    assert a.label == "agent.lr=0.001 (2 seeds)" and b.label == "agent.lr=0.003 (1 seed)"
    a0, a1 = evaluation_returns(runs["a0"]), evaluation_returns(runs["a1"])
    assert list(a.x) == [200, 400, 600] == sorted(a0) == sorted(a1)
    expected = np.array([[a0[x], a1[x]] for x in (200, 400, 600)])
    np.testing.assert_allclose(a.mean, expected.mean(axis=1))
    np.testing.assert_allclose(a.std, expected.std(axis=1))
    np.testing.assert_allclose(a.min, expected.min(axis=1))
    np.testing.assert_allclose(a.max, expected.max(axis=1))
    assert list(a.count) == [2, 2, 2] and list(b.count) == [1, 1, 1]
    np.testing.assert_allclose(b.mean, [evaluation_returns(runs["b0"])[x]
                                        for x in (200, 400, 600)])


def test_wall_time_of_each_evaluation_comes_from_the_run_s_elapsed_time(
        runs: dict[str, Path]) -> None:
    run = read_run(runs["a0"])
    rows = [json.loads(line) for line in (runs["a0"] / "metrics.jsonl").read_text().splitlines()]
    elapsed = {r["env_steps"]: r["time/elapsed"] for r in rows if r["event"] == "evaluation"}
    # each evaluation's own clock, the one summary.json's threshold_seconds reads
    np.testing.assert_allclose(run.wall_time, [elapsed[200], elapsed[400], elapsed[600]])
    metrics = {r["env_steps"]: r["time/elapsed"] for r in rows if r["event"] == "metrics"}
    assert all(elapsed[x] >= metrics[x] for x in (200, 400, 600))  # an evaluation follows
    assert np.all(np.diff(run.wall_time) > 0)
    (group,) = learning_curves([runs["a0"], runs["a1"]], axis="wall_time")
    assert len(group.x) == 6 and np.all(np.diff(group.x) > 0)


def curve(name: str, steps: list[float], returns: list[float], seed: int) -> RunCurve:
    return RunCurve(run_dir=Path(name), env_steps=np.array(steps), wall_time=np.array(steps),
                    returns=np.array(returns),
                    config={"strategy.seed": seed, "trainer.run_dir": name, "agent.lr": 1})


def test_a_run_that_stopped_early_counts_with_its_last_return() -> None:
    short = curve("s", [100, 200], [10, 30], 0)
    long = curve("l", [100, 200, 300, 400], [20, 40, 50, 70], 1)
    (group,) = group_runs([short, long])
    result = aggregate(group)
    assert list(result.x) == [100, 200, 300, 400]
    np.testing.assert_allclose(result.mean, [15, 35, 40, 50])
    np.testing.assert_allclose(result.min, [10, 30, 30, 30])
    np.testing.assert_allclose(result.max, [20, 40, 50, 70])
    late = curve("late", [300], [5], 2)  # evaluated first at 300: not counted before
    result = aggregate([short, late])
    assert list(result.count) == [1, 1, 2]


def test_draws_a_png_and_an_svg_of_the_requested_size(
        runs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from PIL import Image

    from rltrain.cli.plot import draw

    groups = learning_curves(list(runs.values()))
    png = draw(groups, tmp_path / "curves.png", size=(640, 400))
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (640, 400)
        assert len(np.unique(np.asarray(image.convert("RGB")).reshape(-1, 3), axis=0)) > 10
    svg = draw(groups, tmp_path / "curves.svg", size=(640, 400), spread="std")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert (root.get("width"), root.get("height")) == ("460.8pt", "288pt")  # 72 per inch


@pytest.mark.slow
def test_rltrain_plot_writes_the_file_and_prints_each_group(
        runs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from PIL import Image

    out = tmp_path / "wall.png"
    process = subprocess.run(
        [sys.executable, "-m", "rltrain.cli", "plot", *map(str, runs.values()), "--out",
         str(out), "--x", "wall_time", "--size", "500x300"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.returncode == 0, process.stderr
    assert "agent.lr=0.001 (2 seeds): final evaluation return" in process.stdout
    assert f"wrote {out}" in process.stdout
    with Image.open(out) as image:
        assert image.size == (500, 300)


def test_a_folder_without_metrics_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"No metrics\.jsonl in"):
        learning_curves([tmp_path])


def _line(env_steps: int, value: float) -> bytes:
    return (json.dumps({"event": "evaluation", "env_steps": env_steps,
                        "eval/return_mean": value, "time/elapsed": 1.0}) + "\n").encode()


def test_a_metrics_tail_reads_each_whole_line_once_and_waits_for_a_line_being_written(
        tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []  # not written yet
    first, second, third = _line(100, 1.0), _line(200, 2.0), _line(300, 3.0)
    path.write_bytes(first + second[:10])  # the second line half written
    assert [row["env_steps"] for row in tail.read()] == [100]
    assert tail.read() == []
    with path.open("ab") as file:
        file.write(second[10:] + third)
    assert [row["env_steps"] for row in tail.read()] == [200, 300]
    assert read_rows(path) == [json.loads(line) for line in (first, second, third)]
    path.write_bytes(_line(50, 0.5))  # the run started again: a shorter file
    assert [row["env_steps"] for row in tail.read()] == [50]


@pytest.mark.parametrize(("line", "error"), [
    (b"not json\n", r"metrics\.jsonl:2 is not a JSON line"),
    (b'{"env_steps": "many"}\n', r"metrics\.jsonl:2 is not a metrics row"),
    (b"\xff\xfe\n", r"metrics\.jsonl:2 is not UTF-8 text"),
])
def test_a_metrics_tail_refuses_a_line_rltrain_did_not_write_naming_it(
        tmp_path: Path, line: bytes, error: str) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_line(100, 1.0) + line)
    with pytest.raises(ValueError, match=error):
        MetricsTail(path).read()

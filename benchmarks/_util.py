"""Helpers shared by the benchmark scripts: result files, tables and medians."""

from __future__ import annotations

import importlib
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rltrain.checkpoint.io import LocalFiles
from rltrain.checkpoint.manifest import read_manifest
from rltrain.observe import EvaluationEnd, Metrics, Subscriber

RESULTS = Path(__file__).parent / "results"

#: Config overrides that turn every built-in output off (TensorBoard, progress bar, console,
#: metrics.jsonl): checkpoints and summary.json are still written.
QUIET = ["trainer.logger=false", "trainer.enable_progress_bar=false",
         "trainer.enable_console=false", "trainer.enable_metrics_file=false"]


def machine() -> dict[str, Any]:
    """What the numbers were measured on, and the code: the commit of the tree this module is
    in, and whether that tree had changes not committed (None for both outside a git clone)."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "cpus": torch.multiprocessing.cpu_count(),
        **code_version(),
    }


def code_version(root: Path | None = None) -> dict[str, Any]:
    """``commit`` of the tree at ``root`` (default: the one holding the benchmarks) and
    ``uncommitted_changes``: whether its ``rltrain/`` or ``benchmarks/`` differ from that commit
    (result files in ``benchmarks/results/`` are outputs and do not count)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root or RESULTS.parent.parent,
                                  capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit, status = git("rev-parse", "HEAD"), git(
        "status", "--porcelain", "--", "rltrain", "benchmarks", ":(exclude)benchmarks/results")
    return {"commit": commit, "uncommitted_changes": None if status is None else bool(status)}


def record_call(run_dir: Path, from_env_steps: int) -> list[dict[str, Any]]:
    """Add this call of a resumable benchmark to ``run_dir/calls.json`` (the code it ran, from
    :func:`code_version`; when it started; the env steps it continued from) and return every
    call so far, for the results file: a run continued across commits says so. A file that is
    not such a list (not written here, or damaged) is started again."""
    path = run_dir / "calls.json"
    try:
        calls = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError):
        calls = []
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        calls = []
    calls.append({**code_version(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "from_env_steps": int(from_env_steps)})
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calls, indent=1) + "\n")
    return calls


def record_rltrain_call(run_dir: Path, resume: bool) -> list[dict[str, Any]]:
    """:func:`record_call` for an rltrain run, continuing (``resume``) from the env steps of
    the last checkpoint its manifest lists (0 for a fresh run)."""
    return record_call(run_dir, last_checkpoint_steps(run_dir / "checkpoints") if resume else 0)


def last_checkpoint_steps(folder: Path) -> int:
    """Env steps of the newest checkpoint that ``folder``'s manifest lists; 0 when none is."""
    manifest = read_manifest(LocalFiles(folder))
    entries = {entry.file: entry.env_steps for entry in manifest.checkpoints}
    return entries.get(manifest.last or "", 0)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus the machine description) to ``benchmarks/results/<name>.json``
    (``name`` may be a path of its own, with or without ``.json``)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name.removesuffix('.json')}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path


def median_range(values: list[float], fmt: str = "{:.0f}") -> str:
    """``median (min-max)`` of ``values``."""
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


class Curve(Subscriber):
    """Records each complete evaluation as (env steps, mean return), and prints it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.points: list[tuple[int, float]] = []

    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        if event.complete:
            self.points.append((event.env_steps, event.return_mean))
            print(f"{self.label}: {event.env_steps:,} env steps, mean evaluation return "
                  f"{event.return_mean:.1f}", flush=True)


class TimedCurve(Curve):
    """:class:`Curve` plus the seconds from the Start event to each evaluation's end."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.seconds: dict[int, float] = {}
        self.start = time.perf_counter()

    def on_start(self, event: Any, metrics: Metrics) -> None:
        self.start = time.perf_counter()

    def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
        if event.complete:
            self.seconds[event.env_steps] = time.perf_counter() - self.start
        super().on_evaluation_end(event, metrics)


def rltrain_curve(run_dir: Path) -> list[tuple[int, float]]:
    """Evaluations of a run from its ``metrics.jsonl`` (the last of each env step, as a resumed
    run may repeat one): a resumed run's whole curve, its evaluations before the resume too."""
    points: dict[int, float] = {}
    metrics = run_dir / "metrics.jsonl"
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        row = json.loads(line)
        if row.get("event") == "evaluation":
            points[int(row["env_steps"])] = float(row["eval/return_mean"])
    return sorted(points.items())


def first_reaching(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """Env steps of the first evaluation whose mean reaches ``threshold``."""
    return next((steps for steps, value in curve if value >= threshold), None)


def sb3_evaluator(model: Any, env: Any, seed: int, episodes: int) -> Callable[[], float]:
    """A greedy evaluation of a Stable-Baselines3 ``model`` on the Gymnasium ``env``: the mean
    return of ``episodes`` episodes of ``model.predict(deterministic=True)``, episode ``i``
    reset with ``seed + i``. rltrain's Evaluator resets its sub-env ``i`` with its evaluation
    seed + ``i`` at every evaluation, so with rltrain's evaluation seed (``derive_seeds(seed)
    .evaluation``) both libraries are scored from the same start states (for up to 10
    episodes, rltrain's sub-env count)."""
    import numpy as np

    def evaluate() -> float:
        returns = []
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + float(reward), bool(terminated or truncated)
            returns.append(total)
        return float(np.mean(returns))

    return evaluate


def require_sb3(script: str, instead: str = "", module: str = "stable_baselines3") -> None:
    """Exit with one line naming the extra to install when Stable-Baselines3 (or ``module``:
    ``sb3_contrib``) is missing (the benchmarks that run it beside rltrain call this before
    they start); ``instead``: how to run the benchmark without it, where it can."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        name = {"stable_baselines3": "Stable-Baselines3", "sb3_contrib": "sb3-contrib"}
        raise SystemExit(
            f"{script} runs {name.get(module, module)}, which is not installed: "
            "pip install 'rltrain[bench]' (pip install -e '.[bench]' in a clone; after torch, "
            "see pyproject.toml)" + (f"; or {instead}" if instead else "")) from None


def sb3_curve(evaluate: Callable[[], float], interval: int, label: str,
              stop_at: float | None = None) -> Any:
    """A Stable-Baselines3 callback that calls ``evaluate`` every ``interval`` env steps (at
    the first vector step reaching each multiple of it, in its ``_on_step``, after the env step
    and before a training round due at the same step) and records ``points`` (env steps, mean
    return) and ``seconds`` from the start of ``learn``; with ``stop_at``, training ends at
    the first evaluation reaching it."""
    from stable_baselines3.common.callbacks import BaseCallback

    class SB3Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.points: list[tuple[int, float]] = []
            self.seconds: dict[int, float] = {}
            self.start = time.perf_counter()

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            # at the first env step at or past each multiple of interval (several sub-envs
            # step num_envs env steps at a time)
            if self.num_timesteps // interval > len(self.points):
                self.points.append((self.num_timesteps, evaluate()))
                self.seconds[self.num_timesteps] = time.perf_counter() - self.start
                print(f"{label}: {self.num_timesteps:,} env steps, mean evaluation return "
                      f"{self.points[-1][1]:.1f}", flush=True)
                return stop_at is None or self.points[-1][1] < stop_at
            return True

    return SB3Curve()


class SB3Run:
    """Where a resumable Stable-Baselines3 run keeps what a rerun continues from, saved at each
    evaluation as one set: its model and replay buffer (off-policy algorithms), in files named
    by the env steps they were saved at, and its curve, whose file is replaced last and names
    the set a rerun loads (its last point's env steps). A run killed while saving (an Atari
    replay takes gigabytes) keeps the previous set whole: never a model of one evaluation
    beside the replay of another.

    Args:
        directory: The run's directory (made at the first save).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.curve = directory / "sb3_curve.json"

    def files(self, env_steps: int) -> tuple[Path, Path]:
        """The model and replay files of the set saved at ``env_steps``."""
        return (self.directory / f"sb3_model-{env_steps}.zip",
                self.directory / f"sb3_replay-{env_steps}.pkl")

    def load(self, algorithm: Any, env: Any) -> tuple[Any | None, list[tuple[int, float]]]:
        """The saved model of ``algorithm`` on ``env`` (None: nothing saved) and its curve."""
        if not self.curve.exists():
            return None, []
        curve = [(int(x), float(y)) for x, y in json.loads(self.curve.read_text())]
        model_file, replay = self.files(curve[-1][0])
        model = algorithm.load(model_file, env=env, device="cpu")
        if hasattr(model, "load_replay_buffer"):
            model.load_replay_buffer(replay)
        return model, curve

    def save(self, model: Any, curve: Sequence[tuple[int, float]]) -> None:
        """Save ``model`` (and its replay buffer) with the ``curve`` so far, which ends at the
        model's env steps; then delete the earlier sets and what a killed save left."""
        self.directory.mkdir(parents=True, exist_ok=True)
        kept = self.files(curve[-1][0])
        model.save(kept[0])
        if hasattr(model, "save_replay_buffer"):
            model.save_replay_buffer(kept[1])
        temporary = self.curve.with_suffix(".tmp.json")
        temporary.write_text(json.dumps(list(curve)))
        os.replace(temporary, self.curve)
        for pattern in ("sb3_model-*.zip", "sb3_replay-*.pkl"):
            for old in self.directory.glob(pattern):
                if old not in kept:
                    old.unlink()


def fmt(value: float | None, spec: str = "{:.1f}") -> str:
    """``value`` formatted, or ``-`` for None or NaN."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else spec.format(value)


def curve_text(curve: Sequence[tuple[int, float]]) -> str:
    """``5k:-500 10k:-120 ...``: env steps (thousands) and mean evaluation return."""
    return " ".join(f"{steps / 1000:g}k:{value:.0f}" for steps, value in curve)


def run_seeds(train: Callable[[int], dict[str, Any]], seeds: Sequence[int],
              jobs: int = 1) -> list[dict[str, Any]]:
    """``train(seed)`` for each seed, ``jobs`` at a time (in spawned processes when more than
    one); then each result printed."""
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(train, seeds, chunksize=1)
    else:
        results = [train(seed) for seed in seeds]
    for result in results:
        print(f"seed {result['seed']}: {result}", flush=True)
    return results


def report_seeds(args: Any, results: list[dict[str, Any]], results_name: str) -> None:
    """Print how many seeds reached ``args.threshold`` (with the env steps they took) and write
    the results file ``benchmarks/results/<results_name>.json``, as every learning benchmark
    ends."""
    reached = [r for r in results if r["threshold_env_steps"] is not None]
    print(f"reached {args.threshold:g}: {len(reached)}/{len(results)} seeds"
          + (f"; env steps {median_range([float(r['threshold_env_steps']) for r in reached])}"
             if reached else ""))
    path = write_results(results_name, {"args": vars(args), "runs": results})
    print(f"results: {path}")

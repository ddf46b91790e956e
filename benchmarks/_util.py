"""Helpers shared by the benchmark scripts: result files, tables and medians."""

from __future__ import annotations

import json
import multiprocessing
import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rltrain.events import EvaluationEnd, Metrics, Subscriber

RESULTS = Path(__file__).parent / "results"

#: Config overrides that turn every built-in output off (TensorBoard, progress bar, console,
#: metrics.jsonl): checkpoints and summary.json are still written.
QUIET = ["trainer.logger=false", "trainer.enable_progress_bar=false",
         "trainer.enable_console=false", "trainer.enable_metrics_file=false"]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
        "cpus": torch.multiprocessing.cpu_count(),
    }


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus the machine description) to ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
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

"""What the renderers cost per env step, measured two ways.

1. Replay: a real DQN CartPole-v1 run records its event stream; the stream is then replayed
   through an ``EventProcessor`` with no renderer and with all four (tqdm and console into
   os.devnull, TensorBoard and JSONL into a temporary folder), alternately ``--repeats`` times.
   The difference, per env step, is divided by the real run's time per env step. This isolates
   the renderers' own work from the machine's drift, which a whole-run comparison cannot.
2. The whole-run comparison (renderers all on vs all off) is in ``benchmarks.dqn_speed``.

    python -m benchmarks.renderer_overhead [--steps 6000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import torch

from benchmarks._util import median_range, write_results
from rltrain import DQN, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.observe import EventProcessor, EventRecorder, Subscriber
from rltrain.observe.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    TensorBoardRenderer,
    TqdmRenderer,
)


def replay(events: list[Any], renderers: bool) -> float:
    """Seconds to pass ``events`` through a processor with all renderers, or with none."""
    with tempfile.TemporaryDirectory() as run_dir, open(os.devnull, "w") as sink:
        subscribers: list[Subscriber] = [
            TqdmRenderer(file=sink), ConsoleRenderer(file=sink), TensorBoardRenderer(run_dir),
            JsonlRenderer(f"{run_dir}/metrics.jsonl")] if renderers else []
        processor = EventProcessor(subscribers)
        start = time.perf_counter()
        for event in events:
            processor.emit(event)
        processor.close()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    recorder = EventRecorder()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(num_steps=args.steps, callbacks=[recorder], run_dir=run_dir,
                          logger=False, enable_progress_bar=False, enable_console=False,
                          enable_metrics_file=False, gradient_clip_val=10.0,
                          strategy=OffPolicyStrategy(OffPolicyConfig()), eval_interval=2_000)
        start = time.perf_counter()
        trainer.fit("CartPole-v1", DQN())
        run_seconds = time.perf_counter() - start
    events = recorder.events
    per_step_us = 1e6 * run_seconds / args.steps
    off: list[float] = []
    on: list[float] = []
    for _ in range(args.repeats):
        off.append(replay(events, renderers=False))
        on.append(replay(events, renderers=True))
    cost_us = [1e6 * (b - a) / args.steps for a, b in zip(off, on, strict=True)]
    overhead = [100 * c / per_step_us for c in cost_us]
    print(f"events in the stream: {len(events):,} for {args.steps:,} env steps")
    print(f"real run: {per_step_us:.0f} µs per env step")
    print(f"renderers' cost: {median_range(cost_us, '{:.2f}')} µs per env step")
    print(f"overhead: {median_range(overhead, '{:.2f}')} % of the run's time per env step")
    path = write_results("renderer_overhead", {
        "args": vars(args), "events": len(events), "run_us_per_env_step": per_step_us,
        "renderer_us_per_env_step": cost_us, "overhead_percent": overhead,
        "replay_seconds_off": off, "replay_seconds_on": on,
        "median_overhead_percent": statistics.median(overhead)})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

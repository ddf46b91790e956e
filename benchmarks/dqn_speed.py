"""rltrain's DQN loop against a minimal hand-written loop: env steps per second, side by side.

Both train DQN on CartPole-v1 with the same hyperparameters (RL-Zoo's tuned settings, see
``handwritten_dqn.py``) and the same number of envs, for the same env steps, with no evaluation.
Each repeat runs the four loops (hand-written with plain and with fused Adam, rltrain without
renderers, rltrain with all renderers) one after the other in this process, in an order rotated
from repeat to repeat. Each call is timed whole (setup included), in wall-clock seconds and in
this process's CPU seconds. The machine's speed drifts by +-20% over minutes on shared virtual
machines, so ratios are computed within each repeat (runs seconds apart) and the table gives
the median (min-max) of those per-repeat ratios.

    python -m benchmarks.dqn_speed [--steps 20000] [--repeats 3] [--num-envs 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import torch

from benchmarks import handwritten_dqn
from benchmarks._util import median_range, table, write_results
from rltrain import DQN, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.observe.processor import Subscriber
from rltrain.observe.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    TensorBoardRenderer,
    TqdmRenderer,
)


def all_renderers(run_dir: str, sink: Any) -> list[Subscriber]:
    """Every renderer, drawing into ``sink`` (os.devnull): the terminal is not measured."""
    return [TqdmRenderer(file=sink), ConsoleRenderer(file=sink),
            TensorBoardRenderer(run_dir), JsonlRenderer(f"{run_dir}/metrics.jsonl")]


def rltrain_run(steps: int, num_envs: int, seed: int, renderers: bool) -> dict[str, float]:
    """One rltrain DQN run; returns env steps and gradient steps."""
    with tempfile.TemporaryDirectory() as run_dir, open(os.devnull, "w") as sink:
        trainer = Trainer(
            num_steps=steps,
            strategy=OffPolicyStrategy(OffPolicyConfig(num_envs=num_envs, seed=seed)),
            eval_interval=None, run_dir=run_dir, gradient_clip_val=10.0,
            # The built-in outputs off; all four renderers (drawing into os.devnull) as callbacks.
            logger=False, enable_progress_bar=False, enable_console=False,
            enable_metrics_file=False,
            callbacks=all_renderers(run_dir, sink) if renderers else (),
        )
        summary = trainer.fit("CartPole-v1", DQN()).summary
    return {"env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps}


def timed(run: Any, seed: int) -> dict[str, float]:
    """``run(seed)``'s result with its wall-clock and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = dict(run(seed))
    result["seconds"] = time.perf_counter() - wall
    result["cpu_seconds"] = time.process_time() - cpu
    return result


def paired_ratios(values: dict[str, list[float]], name: str, base: str) -> list[float]:
    """``values[name][i] / values[base][i]`` for each repeat ``i``."""
    return [a / b for a, b in zip(values[name], values[base], strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = {
        "hand-written loop": lambda seed: handwritten_dqn.train(
            num_steps=args.steps, num_envs=args.num_envs, seed=seed),
        "hand-written loop, fused Adam": lambda seed: handwritten_dqn.train(
            num_steps=args.steps, num_envs=args.num_envs, seed=seed, fused_adam=True),
        "rltrain, no renderers": lambda seed: rltrain_run(args.steps, args.num_envs, seed, False),
        "rltrain, all renderers": lambda seed: rltrain_run(args.steps, args.num_envs, seed, True),
    }
    sps: dict[str, list[float]] = {name: [] for name in variants}
    cpu_sps: dict[str, list[float]] = {name: [] for name in variants}
    gps: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            result = timed(variants[name], repeat)
            sps[name].append(result["env_steps"] / result["seconds"])
            cpu_sps[name].append(result["env_steps"] / result["cpu_seconds"])
            gps[name].append(result["gradient_steps"] / result["seconds"])
            print(f"repeat {repeat} {name}: {sps[name][-1]:.0f} env steps/s, "
                  f"{cpu_sps[name][-1]:.0f} per CPU second", flush=True)
    rows = [[name, median_range(sps[name]), median_range(cpu_sps[name]),
             median_range(gps[name])] + [
                 median_range(paired_ratios(sps, name, base), "{:.3f}")
                 for base in ("hand-written loop", "hand-written loop, fused Adam")]
            for name in variants]
    print(table(["loop", "env steps/s (wall)", "env steps per CPU s", "gradient steps/s",
                 "ratio to hand-written", "ratio to hand-written, fused Adam"], rows))
    for label, values in (("wall", sps), ("CPU", cpu_sps)):
        ratios = paired_ratios(values, "rltrain, all renderers", "rltrain, no renderers")
        print(f"renderers all on / all off ({label} time), per repeat: "
              f"{median_range(ratios, '{:.3f}')}")
    path = write_results("dqn_speed", {"args": vars(args), "env_steps_per_second": sps,
                                       "env_steps_per_cpu_second": cpu_sps,
                                       "gradient_steps_per_second": gps})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

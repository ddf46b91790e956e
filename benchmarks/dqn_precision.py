"""DQN on CartPole-v1 in float32 and in bfloat16 (or float16) autocast: does it learn, how fast?

Two measurements, the precisions alternated within each so that the machine's drift hits both:

1. Learning: per seed and precision, ``configs/dqn_cartpole.yaml`` until solved (mean greedy
   return >= 475 over 20 episodes) or 50,000 env steps.
2. Speed: ``--speed-steps`` env steps with the same settings but no evaluation and no early
   stop, ``--repeats`` times: env steps and gradient steps per second.

    python -m benchmarks.dqn_precision [--seeds 0 1 2] [--dtypes float32 bfloat16]
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import torch

from benchmarks._util import QUIET, median_range, table, write_results
from rltrain.config.schema import compose
from rltrain.trainer import build


def fit(overrides: list[str], run_dir: str) -> Any:
    """Train ``configs/dqn_cartpole.yaml`` with ``overrides``; returns the summary."""
    config = compose(["dqn_cartpole"], [*overrides, f"trainer.run_dir={run_dir}", *QUIET])
    return build(config).fit().summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--speed-steps", type=int, default=8_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    learning: list[dict[str, Any]] = []
    speed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for dtype in args.dtypes:
                s = fit([f"trainer.dtype={dtype}", f"strategy.seed={seed}",
                         f"trainer.num_steps={args.steps}"], f"{tmp}/{dtype}-{seed}")
                learning.append({"dtype": dtype, "seed": seed,
                                 "solved_at_env_steps": s.threshold_env_steps,
                                 "solved_after_seconds": s.threshold_seconds,
                                 "best_eval_return": s.best_eval_return,
                                 "final_eval_return": s.final_metrics.get("eval/return_mean")})
                print(f"learning: {learning[-1]}", flush=True)
        for repeat in range(args.repeats):
            for dtype in args.dtypes:
                s = fit([f"trainer.dtype={dtype}", f"trainer.num_steps={args.speed_steps}",
                         "trainer.eval_interval=null", "trainer.return_threshold=null"],
                        f"{tmp}/speed-{dtype}-{repeat}")
                speed.append({"dtype": dtype, "repeat": repeat,
                              "env_sps": s.env_steps / s.wall_time,
                              "gradient_sps": s.gradient_steps / s.wall_time})
                print(f"speed: {speed[-1]}", flush=True)
    rows = []
    for dtype in args.dtypes:
        runs = [r for r in learning if r["dtype"] == dtype]
        solved = [r for r in runs if r["solved_at_env_steps"] is not None]
        timed = [r for r in speed if r["dtype"] == dtype]
        rows.append([
            dtype, f"{len(solved)}/{len(runs)}",
            median_range([float(r["solved_at_env_steps"]) for r in solved]) if solved else "-",
            median_range([float(r["best_eval_return"]) for r in runs], "{:.1f}"),
            median_range([r["env_sps"] for r in timed]),
            median_range([r["gradient_sps"] for r in timed])])
    print(table(["dtype", "seeds solved", "env steps to solve", "best eval return",
                 "env steps/s", "gradient steps/s"], rows))
    path = write_results("dqn_precision", {"steps": args.steps, "speed_steps": args.speed_steps,
                                           "learning": learning, "speed": speed})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""PPO on CartPole-v1 (ppo_cartpole) in one process and data-parallel in two under torchrun:
throughput and time to solve.

Three variants, each seed running all of them in turn (order rotated by seed, so that the
machine's drift hits all alike), each run its own subprocess with a fresh run directory:

- ``a``: one process, ``python -m rltrain.cli fit ppo_cartpole``: 8 envs x 32 steps, minibatch
  256.
- ``b``: two processes, ``torchrun --standalone --nproc-per-node=2 -m rltrain.cli fit
  ppo_cartpole`` with the same per-rank settings: the global rollout doubles (2 x 8 x 32 = 512)
  and so does the global minibatch (512), with half the rollouts per env step.
- ``c``: as ``b`` with ``strategy.num_envs=4 strategy.batch_size=128``: the same global rollout
  (2 x 4 x 32 = 256) and global minibatch (256) as ``a``. (``batch_size`` must divide the
  per-rank rollout, 128, so the preset's 256 cannot stay.)

torchrun is started as ``python -m torch.distributed.run`` (what the ``torchrun`` script runs)
with this interpreter. Every run: same seed, ``trainer.num_steps`` global env steps
(``--num-steps``, 100,000 by default, the preset's), evaluation every 5,000 env steps of 20
greedy episodes, a stop at mean return 475; console, progress bar, TensorBoard and
metrics.jsonl off, one torch thread per process (``OMP_NUM_THREADS=1`` for all three).

Per run: wall seconds of the subprocess (start-up, rendezvous and exit included), env steps per
second (``env_steps / wall_time`` of summary.json: the training loop with its evaluations, so
a run whose policy is better, with evaluation episodes of up to 500 steps, reads slower),
env steps and seconds to 475 (``threshold_env_steps`` / ``threshold_seconds``) and the best
evaluation return. Per variant: mean env steps/s and its ratio to ``a``'s mean, the time to
solve relative to ``a`` (paired by seed, over the seeds both solved: median, min-max) and the
seeds solved within ``--num-steps``. On a machine with fewer than 3 cores the two ranks and the
rest of the system share them, so ``b`` and ``c`` measure contention as much as scaling.

    python -m benchmarks.distributed_ppo [--seeds 0 1 2] [--num-steps 100000] \
        [--variants a b c]
    python -m benchmarks.distributed_ppo --quick    # smoke: 4,096 steps, one seed, no file
    python -m benchmarks.distributed_ppo --throughput --results distributed_ppo_throughput
        # no evaluation: 50,000 env steps of training, env steps per second alone

Writes ``benchmarks/results/distributed_ppo.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._util import QUIET, fmt, median_range, table, write_results

CONFIG = "ppo_cartpole"
THRESHOLD = 475.0
EVAL_EPISODES = 20
EVAL_INTERVAL = 5_000
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
VARIANTS: dict[str, dict[str, Any]] = {
    "a": {"label": "1 process, 8 envs", "launcher": [sys.executable], "overrides": []},
    "b": {"label": "2 processes, 8 envs each (global rollout x2)", "launcher": TORCHRUN,
          "overrides": []},
    "c": {"label": "2 processes, 4 envs each (same global rollout)", "launcher": TORCHRUN,
          "overrides": ["strategy.num_envs=4", "strategy.batch_size=128"]},
}


def command(variant: str, seed: int, run_dir: Path, args: argparse.Namespace) -> list[str]:
    """The command line of one run."""
    return [*VARIANTS[variant]["launcher"], "-m", "rltrain.cli", "fit", CONFIG,
            f"strategy.seed={seed}", f"trainer.run_dir={run_dir}",
            f"trainer.num_steps={args.num_steps}",
            f"trainer.eval_interval={args.eval_interval or 'null'}",
            f"trainer.eval_episodes={EVAL_EPISODES}",
            f"trainer.return_threshold={THRESHOLD if args.eval_interval else 'null'}",
            "trainer.num_threads=1", *QUIET, *VARIANTS[variant]["overrides"]]


def run(variant: str, seed: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run as a subprocess in a fresh run directory; its measurements."""
    run_dir = root / f"{variant}_seed{seed}"
    cmd = command(variant, seed, run_dir, args)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    process = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise RuntimeError(f"variant {variant} seed {seed} exited {process.returncode}: "
                           f"{' '.join(cmd)}\n{process.stdout[-4000:]}{process.stderr[-8000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"variant": variant, "seed": seed, "command": cmd, "process_seconds": seconds,
            "env_steps": summary["env_steps"], "wall_time": summary["wall_time"],
            "sps": summary["env_steps"] / summary["wall_time"],
            "threshold_env_steps": summary["threshold_env_steps"],
            "threshold_seconds": summary["threshold_seconds"],
            "best_eval_return": summary["best_eval_return"],
            "stop_reason": summary["stop_reason"], "gradient_steps": summary["gradient_steps"]}


def rotated(seed: int, variants: list[str]) -> list[str]:
    shift = seed % len(variants)
    return variants[shift:] + variants[:shift]


def solved(run: dict[str, Any], budget: int) -> bool:
    return run["threshold_env_steps"] is not None and run["threshold_env_steps"] <= budget


def report(runs: list[dict[str, Any]], variants: list[str],
           args: argparse.Namespace) -> dict[str, Any]:
    """Print the per-run and per-variant tables; returns the per-variant summary."""
    print(f"rltrain PPO, {CONFIG}, budget {args.num_steps:,} env steps, " + (
        f"threshold {THRESHOLD:g}, {EVAL_EPISODES} greedy episodes every "
        f"{args.eval_interval:,} env steps" if args.eval_interval else
        "no evaluation (training throughput only)"))
    print(table(["variant", "seed", "process seconds", "env steps/s", "env steps to 475",
                 "seconds to 475", "best eval return"],
                [[r["variant"], str(r["seed"]), f"{r['process_seconds']:.1f}",
                  f"{r['sps']:.0f}",
                  "not reached" if r["threshold_env_steps"] is None
                  else f"{r['threshold_env_steps']:,}",
                  fmt(r["threshold_seconds"]), fmt(r["best_eval_return"])] for r in runs]))
    by_variant = {v: sorted((r for r in runs if r["variant"] == v), key=lambda r: r["seed"])
                  for v in variants}
    base = by_variant.get("a")
    base_sps = statistics.mean(r["sps"] for r in base) if base else None
    summary: dict[str, Any] = {}
    rows = []
    for v in variants:
        mean_sps = statistics.mean(r["sps"] for r in by_variant[v])
        time_ratios = ([r["threshold_seconds"] / b["threshold_seconds"]
                        for r, b in zip(by_variant[v], base, strict=True)
                        if r["threshold_seconds"] is not None
                        and b["threshold_seconds"] is not None] if base else [])
        n_solved = sum(solved(r, args.num_steps) for r in by_variant[v])
        summary[v] = {"label": VARIANTS[v]["label"], "mean_sps": mean_sps,
                      "sps_ratio_to_a": None if base_sps is None else mean_sps / base_sps,
                      "time_to_solve_ratios_to_a": time_ratios,
                      "seeds_solved": n_solved, "seeds": len(by_variant[v])}
        rows.append([v, VARIANTS[v]["label"], f"{mean_sps:.0f}",
                     "-" if base_sps is None else f"{mean_sps / base_sps:.2f}",
                     median_range(time_ratios, "{:.2f}") if time_ratios else "-",
                     f"{n_solved}/{len(by_variant[v])}"])
    print(table(["variant", "", "mean env steps/s", "env steps/s vs a",
                 "time to solve vs a (paired, median (min-max))",
                 f"seeds solved within {args.num_steps:,}"], rows))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-steps", type=int, default=100_000,
                        help="global env steps per run (default: the preset's 100,000)")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS),
                        default=sorted(VARIANTS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 4,096 env steps, evaluation every 2,048, the first "
                             "seed only; writes no results file")
    parser.add_argument("--throughput", action="store_true",
                        help="training throughput alone: no evaluation and no threshold, "
                             "--num-steps env steps (default then 50,000)")
    parser.add_argument("--results", default="distributed_ppo",
                        help="name of the results file in benchmarks/results/")
    args = parser.parse_args()
    args.eval_interval = None if args.throughput else EVAL_INTERVAL
    if args.throughput and "--num-steps" not in sys.argv:
        args.num_steps = 50_000
    if args.quick:
        args.num_steps, args.eval_interval, args.seeds = 4_096, 2_048, args.seeds[:1]
    variants = list(dict.fromkeys(args.variants))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for v in rotated(seed, variants):
                runs.append(run(v, seed, Path(tmp), args))
                r = runs[-1]
                reached = ("475 not reached" if r["threshold_env_steps"] is None else
                           f"475 at {r['threshold_env_steps']:,} env steps, "
                           f"{r['threshold_seconds']:.1f} s")
                print(f"{v} seed {seed}: {r['process_seconds']:.1f} s, {r['sps']:.0f} env "
                      f"steps/s, {reached}, best {fmt(r['best_eval_return'])}", flush=True)
    summary = report(runs, variants, args)
    if args.quick:
        print("--quick: no results file written")
        return
    path = write_results(args.results, {"args": vars(args), "runs": runs, "summary": summary})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

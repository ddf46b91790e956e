"""Does Dreamer learn Pendulum-v1? Learning curves per seed, from configs/dreamer_pendulum.yaml.

Each seed trains for ``--steps`` env steps with a greedy evaluation every ``--eval-interval``
env steps; the script prints the curve (env steps, mean evaluation return), the best return,
the wall time and the gradient steps per second, and whether the run reached ``--target``
(random policy: about -1,250; issue 6 asks for >= -400 within 50,000 env steps on 2 of 3
seeds). Extra ``key=value`` overrides apply to every seed (e.g. ``trainer.device=cuda``).

    python -m benchmarks.dreamer_pendulum [--seeds 0 1 2] [--steps 50000] [--jobs 3] \
        [key=value ...]

``--jobs N`` trains N seeds at once, each in its own spawned process with the config's
``trainer.num_threads`` (1 in the shipped config): on a 2-core machine, three one-thread seeds
side by side finish sooner than three seeds one after the other.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
from functools import partial
from typing import Any

from benchmarks._util import QUIET, Curve, table, write_results
from rltrain.config.schema import compose
from rltrain.trainer import build


def run(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed in ``run_root/seed<seed>``; returns its curve and timings."""
    run_dir = f"{run_root}/seed{seed}"
    config = compose(["dreamer_pendulum"], [
        f"strategy.seed={seed}", f"trainer.num_steps={args.steps}",
        f"trainer.eval_interval={args.eval_interval}", f"trainer.run_dir={run_dir}", *QUIET,
        *args.overrides])
    curve = Curve(f"seed {seed}")
    summary = build(config, callbacks=[curve]).fit().summary
    best = max((r for _, r in curve.points), default=None)
    return {"seed": seed, "curve": curve.points, "best_eval_return": best,
            "reached_target": best is not None and best >= args.target,
            "wall_time": summary.wall_time, "gradient_steps": summary.gradient_steps,
            "gradient_steps_per_second": summary.gradient_steps / summary.wall_time}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--eval-interval", type=int, default=5_000)
    parser.add_argument("--target", type=float, default=-400.0)
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--results", default="dreamer_pendulum",
                        help="name of the JSON file written to benchmarks/results/")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train = partial(run, args, tmp)
        if args.jobs > 1:
            with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
                results = pool.map(train, args.seeds, chunksize=1)
        else:
            results = [train(seed) for seed in args.seeds]
    for result in results:
        print(f"seed {result['seed']}: {result}", flush=True)
    rows = [[str(r["seed"]), " ".join(f"{s / 1000:g}k:{v:.0f}" for s, v in r["curve"]),
             "-" if r["best_eval_return"] is None else f"{r['best_eval_return']:.0f}",
             f"{r['wall_time']:.0f}", f"{r['gradient_steps_per_second']:.2f}"]
            for r in results]
    print(table(["seed", "curve (env steps: mean eval return)", "best", "wall time (s)",
                 "gradient steps/s"], rows))
    reached = sum(r["reached_target"] for r in results)
    print(f"reached {args.target:g} within {args.steps:,} env steps: {reached}/{len(results)}")
    path = write_results(args.results, {"args": vars(args), "runs": results})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

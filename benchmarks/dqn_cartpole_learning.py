"""Does DQN solve CartPole-v1 within 50,000 env steps? One run per seed.

Solved: a mean greedy evaluation return >= 475 over 20 episodes (evaluations every 2,500 env
steps). Each run stops when solved; the table gives the env steps and wall time it took.
Settings: ``configs/dqn_cartpole.yaml``, the default of ``rltrain fit`` (RL-Zoo's tuned
CartPole DQN, gradient clip 10), with every output but checkpoints and summary.json off.

    python -m benchmarks.dqn_cartpole_learning [--seeds 0 1 2] [--steps 50000]
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from benchmarks._util import QUIET, table, write_results
from rltrain.config.schema import compose
from rltrain.trainer import build


def run(seed: int, steps: int, run_dir: str) -> dict[str, float | int | None]:
    """Train one seed until solved or out of steps; returns its measurements."""
    config = compose(["dqn_cartpole"], [f"strategy.seed={seed}", f"trainer.num_steps={steps}",
                                        f"trainer.run_dir={run_dir}", *QUIET])
    assert config.trainer.return_threshold == 475.0
    summary = build(config).fit().summary
    return {
        "seed": seed,
        "solved_at_env_steps": summary.threshold_env_steps,
        "solved_after_seconds": summary.threshold_seconds,
        "best_eval_return": summary.best_eval_return,
        "final_eval_return": summary.final_metrics.get("eval/return_mean"),
        "env_steps": summary.env_steps,
        "gradient_steps": summary.gradient_steps,
        "wall_time": summary.wall_time,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=50_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            results.append(run(seed, args.steps, f"{tmp}/seed{seed}"))
            print(f"seed {seed}: {results[-1]}", flush=True)
    solved = sum(r["solved_at_env_steps"] is not None for r in results)
    rows = [[str(r["seed"]), str(r["solved_at_env_steps"] or "not solved"),
             f"{r['solved_after_seconds']:.1f}" if r["solved_after_seconds"] else "-",
             f"{r['best_eval_return']:.1f}", f"{r['wall_time']:.1f}"] for r in results]
    print(table(["seed", "env steps to solve", "seconds to solve", "best eval return",
                 "wall time (s)"], rows))
    print(f"solved (mean eval return >= 475 over 20 episodes) within {args.steps:,} env steps: "
          f"{solved}/{len(results)} seeds")
    path = write_results("dqn_cartpole_learning", {"steps": args.steps, "runs": results})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

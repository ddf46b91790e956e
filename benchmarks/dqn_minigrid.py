"""Does DQN with the CNN encoder learn MiniGrid-Empty-5x5-v0 within 20,000 env steps?

The shipped preset ``configs/dqn_minigrid.yaml`` (which imports minigrid and applies its
``ImgObsWrapper``: 7x7x3 uint8 image views) as it is, one run per seed, with every output but
checkpoints and summary.json off: 10 greedy episodes every 2,000 env steps. Reported per seed:
the first env step at which the mean greedy return reached 0.9 (the optimum is 0.955: the goal
in 5 steps; MiniGrid's reward is ``1 - 0.9 * steps / 100``), the best and final mean greedy
returns, and the replay buffer's bytes (uint8 images) beside what float32 storage would take.
Needs MiniGrid: ``pip install "rltrain[minigrid]"``.

    python -m benchmarks.dqn_minigrid [--seeds 0 1 2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
from typing import Any

import numpy as np
import torch

from benchmarks._util import QUIET, TimedCurve, first_reaching, fmt, run_seeds, table, write_results
from rltrain.config.schema import compose
from rltrain.envs.make import make_probe_env
from rltrain.trainer import build

CONFIG = "dqn_minigrid"
THRESHOLD = 0.9


def buffer_bytes(built: Any, capacity: int) -> dict[str, Any]:
    """The bytes of the replay buffer the run's agent makes, and of the same buffer with
    float32 observations (what every ``Box`` was stored as before)."""
    probe = make_probe_env(built.env)
    try:
        space = probe.observation_space
        buffer = built.agent.make_buffer(capacity, num_envs=1, observation_space=space,
                                         action_space=probe.action_space, seed=0,
                                         device=torch.device("cpu"))
    finally:
        probe.close()
    assert space.shape is not None and space.dtype is not None  # a Box
    observations = 2 * capacity * int(np.prod(space.shape))  # observation, next observation
    return {"capacity": capacity, "nbytes": buffer.nbytes,
            "observation_dtype": str(space.dtype),
            "float32_nbytes": buffer.nbytes + observations * (4 - space.dtype.itemsize)}


def run(seed: int, run_root: str) -> dict[str, Any]:
    """Train one seed of the preset; its curve and measurements."""
    torch.set_num_threads(1)
    config = compose([CONFIG], [f"strategy.seed={seed}", f"trainer.run_dir={run_root}/{seed}",
                                *QUIET])
    curve = TimedCurve(f"seed {seed}")
    built = build(config, callbacks=[curve])
    summary = built.fit().summary
    first = first_reaching(curve.points, THRESHOLD)
    return {
        "seed": seed,
        "first_env_steps_at_0.9": first,
        "seconds_to_0.9": curve.seconds.get(first) if first is not None else None,
        "best_eval_return": max(value for _, value in curve.points),
        "final_eval_return": curve.points[-1][1],
        "curve": curve.points,
        "env_steps": summary.env_steps,
        "gradient_steps": summary.gradient_steps,
        "wall_time": summary.wall_time,
        "buffer": buffer_bytes(built, int(config.strategy.buffer_size)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (processes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = run_seeds(functools.partial(run, run_root=tmp), args.seeds, args.jobs)
    rows = [[str(r["seed"]), fmt(r["first_env_steps_at_0.9"], "{:,}"),
             fmt(r["seconds_to_0.9"]), f"{r['best_eval_return']:.3f}",
             f"{r['final_eval_return']:.3f}", f"{r['wall_time']:.0f}"] for r in results]
    print(table(["seed", "env steps to 0.9", "seconds to 0.9", "best eval return",
                 "final eval return", "wall time (s)"], rows))
    reached = sum(r["first_env_steps_at_0.9"] is not None for r in results)
    print(f"mean greedy return >= {THRESHOLD} within 20,000 env steps: "
          f"{reached}/{len(results)} seeds")
    buffer = results[0]["buffer"]
    print(f"replay buffer ({buffer['capacity']:,} transitions, {buffer['observation_dtype']} "
          f"observations): {buffer['nbytes']:,} bytes; with float32 observations "
          f"{buffer['float32_nbytes']:,} ({buffer['float32_nbytes'] / buffer['nbytes']:.2f}x)")
    path = write_results("dqn_minigrid", {"config": CONFIG, "threshold": THRESHOLD,
                                          "runs": results})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

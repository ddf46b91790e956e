"""Where a DQN CartPole-v1 run spends its time: cProfile of rltrain's or SB3's training call.

The same work as ``compare_dqn``'s speed runs (RL-Zoo's hyperparameters, no evaluation, one
torch thread). The table groups the profile's own time (``tottime``) by what it is: matrix
products, the backward pass, the optimizer, gradient clipping, replay sampling, environment
steps, and the rest (Python around them), in microseconds per env step and per gradient step.

    python -m benchmarks.profile_dqn [--library rltrain|sb3|handwritten] [--steps 6000]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
from typing import Any

import torch

from benchmarks._util import require_sb3, table
from benchmarks.compare_dqn import RUNNERS

#: (group, substrings of ``file:function`` that belong to it), first match wins.
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("backward pass", ("run_backward",)),
    ("matrix products (forward)", ("_C._nn.linear", "addmm", "built-in method torch.relu",
                                   "huber_loss", "smooth_l1")),
    ("optimizer step", ("_fused_adam", "adam.py", "optimizer.py", "_foreach_add",
                        "_foreach_mul", "_foreach_addcmul", "_foreach_lerp")),
    ("gradient clipping", ("clip_grad", "_foreach_norm", "vector_norm", "optim.py:"
                           "clip_grad_norm")),
    ("replay sampling", ("replay.py", "buffers.py", "integers", "randint")),
    ("environment step", ("cartpole.py", "sync_vector_env", "dummy_vec_env", "time_limit",
                          "order_enforcing", "passive_env_checker", "common.py")),
]


#: What each library's run imports (the warm-up run imports the rest).
IMPORTS = {"rltrain": ("rltrain.config.schema", "rltrain.trainer"),
           "sb3": ("stable_baselines3", "stable_baselines3.common.callbacks"),
           "handwritten": ("benchmarks.handwritten_dqn",)}


def group_of(key: str) -> str:
    for name, patterns in GROUPS:
        if any(p in key for p in patterns):
            return name
    return "the rest (Python around them)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", choices=sorted(RUNNERS), default="rltrain")
    parser.add_argument("--steps", type=int, default=6_000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.library == "sb3":
        require_sb3("benchmarks.profile_dqn --library sb3")
    torch.set_num_threads(1)
    for module in IMPORTS[args.library]:  # imported before profiling: not the run's time
        importlib.import_module(module)
    RUNNERS[args.library](1, 1_100, False)  # a warm-up run does the lazy imports (optimizers)
    profiler = cProfile.Profile()
    profiler.enable()
    result: dict[str, Any] = RUNNERS[args.library](0, args.steps, False)
    profiler.disable()
    stats = pstats.Stats(profiler)
    totals: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, function), (_, _, tottime, _, _) in raw.items():
        key = f"{filename}:{line}:{function}"
        totals[group_of(key)] = totals.get(group_of(key), 0.0) + tottime
    env_steps, gradient_steps = result["env_steps"], result["gradient_steps"]
    rows = [[name, f"{seconds:.2f}", f"{1e6 * seconds / env_steps:.0f}",
             f"{1e6 * seconds / max(gradient_steps, 1):.0f}"]
            for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])]
    print(f"{args.library}: {env_steps:,} env steps, {gradient_steps:,} gradient steps in "
          f"{result['seconds']:.1f} s (under the profiler, which slows Python calls)")
    print(table(["group", "seconds", "µs per env step", "µs per gradient step"], rows))
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

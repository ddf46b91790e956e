"""Compiled against eager training (``trainer.compile``), alternated in one run.

Each repeat trains every (preset, mode) pair once, in an order rotated from repeat to repeat,
each an ``rltrain fit`` process of the preset for ``--steps`` env steps, no evaluation, no
outputs but ``summary.json``. From it: the fit's seconds, the seconds spent compiling
(``time/compile``), env steps and gradient steps per second over the whole fit and over the
fit without its compile (the steady state a long run approaches). The table gives medians
(min-max) and the ratio compiled / eager of the steady-state rates.

The first compile of a network on a machine fills inductor's cache; later runs reuse it, so
the first repeat's compile is the cold one (reported apart).

    python -m benchmarks.compile_speed [--presets dqn_cartpole ppo_cartpole sac_pendulum
        dreamer_pendulum] [--modes eager default] [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._util import QUIET, median_range, table, write_results

#: Env steps per fit and overrides that keep each preset's gradient step but shorten its
#: warm-up, so that every fit trains for most of its steps.
PRESETS: dict[str, tuple[int, list[str]]] = {
    "dqn_cartpole": (6000, ["strategy.warmup_steps=1000"]),
    "ppo_cartpole": (16384, []),
    "sac_pendulum": (1500, ["strategy.warmup_steps=500"]),
    "td3_pendulum": (1500, ["strategy.warmup_steps=500"]),
    "dreamer_pendulum": (600, ["strategy.warmup_steps=200"]),
    "ppo_atari": (8192, ["env.id=ALE/Breakout-v5"]),
}


def fit(preset: str, mode: str, steps: int, device: str, threads: int | None) -> dict[str, float]:
    """One fit of ``preset`` with ``trainer.compile`` set by ``mode`` (``eager``: off);
    its times and rates."""
    extra = PRESETS[preset][1]
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "rltrain.cli", "fit", preset, *extra, *QUIET,
                   f"trainer.num_steps={steps}", "trainer.eval_interval=null",
                   "trainer.return_threshold=null", f"trainer.device={device}",
                   f"trainer.compile={'false' if mode == 'eager' else mode}",
                   f"trainer.run_dir={run_dir}",
                   *([f"trainer.num_threads={threads}"] if threads else [])]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{preset} {mode}: {done.stderr.strip().splitlines()[-1:]}")
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    metrics = summary["final_metrics"]
    seconds, compile_seconds = metrics["time/elapsed"], metrics.get("time/compile", 0.0)
    steady = max(seconds - compile_seconds, 1e-9)
    return {"seconds": seconds, "compile": compile_seconds,
            "sps": metrics["time/env_steps"] / seconds,
            "sps_steady": metrics["time/env_steps"] / steady,
            "gsps_steady": metrics["time/gradient_steps"] / steady}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["dqn_cartpole", "ppo_cartpole",
                                                         "sac_pendulum", "dreamer_pendulum"])
    parser.add_argument("--modes", nargs="+", default=["eager", "default"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="trainer.num_threads (default: the preset's)")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help="multiply every preset's env steps (e.g. 4 on a GPU)")
    args = parser.parse_args()
    pairs = [(p, m) for p in args.presets for m in args.modes]
    results: dict[str, list[dict[str, float]]] = {f"{p} {m}": [] for p, m in pairs}
    for repeat in range(args.repeats):
        shift = repeat % len(pairs)
        for preset, mode in pairs[shift:] + pairs[:shift]:
            steps = int(PRESETS[preset][0] * args.steps_scale)
            row = fit(preset, mode, steps, args.device, args.threads)
            results[f"{preset} {mode}"].append(row)
            print(f"repeat {repeat}: {preset} {mode}: {row['sps_steady']:.0f} env steps/s "
                  f"steady, compile {row['compile']:.1f} s", flush=True)
    rows = []
    for preset in args.presets:
        eager = results.get(f"{preset} eager", [])
        for mode in args.modes:
            runs = results[f"{preset} {mode}"]
            ratio = (statistics.median(r["sps_steady"] / e["sps_steady"]
                                       for r, e in zip(runs, eager, strict=True))
                     if eager and mode != "eager" else None)
            rows.append([preset, mode, median_range([r["sps_steady"] for r in runs]),
                         median_range([r["gsps_steady"] for r in runs]),
                         median_range([r["sps"] for r in runs]),
                         f"{runs[0]['compile']:.1f} / " + median_range(
                             [r["compile"] for r in runs[1:]] or [runs[0]["compile"]]),
                         "" if ratio is None else f"{ratio:.2f}x"])
    print(table(["preset", "mode", "env steps/s (steady)", "grad steps/s (steady)",
                 "env steps/s (whole fit)", "compile s (first / later)", "steady vs eager"],
                rows))
    write_results(f"compile_speed_{args.device}", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()

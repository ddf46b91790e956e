"""The device rows: one prepared script for a GPU machine, under 10 minutes.

rltrain's DQN, PPO, SAC, TD3, Dreamer and PPO Atari presets eager, compiled
(``trainer.compile=true``) and compiled with CUDA graphs (``trainer.compile=reduce-overhead``),
env steps and gradient steps per second (:mod:`benchmarks.compile_speed`, alternated, one
repeat each by default), then Stable-Baselines3 on the same settings and device for DQN, PPO,
SAC and TD3. LeanRL's published H100 figures for comparison: PPO Atari 1,022 -> 6,809 fps
(eager -> compiled + CUDA graphs), SAC 127 -> 725, TD3 272 -> 936.

    python -m benchmarks.device_rows [--device cuda] [--repeats 1] [--steps-scale 2]

Needs ``pip install -e '.[test,bench]'`` (ale-py for PPO Atari, stable-baselines3); writes
``benchmarks/results/device_rows_<device>.json`` and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks import compile_speed
from benchmarks._util import median_range, table, write_results

PRESETS = ["dqn_cartpole", "ppo_cartpole", "sac_pendulum", "td3_pendulum", "dreamer_pendulum",
           "ppo_atari"]
MODES = ["eager", "default", "reduce-overhead"]

#: Stable-Baselines3 on each preset's settings (RL-Zoo's, as the presets are).
SB3: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "dqn_cartpole": ("DQN", "CartPole-v1", dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[256, 256])), 6000),
    "ppo_cartpole": ("PPO", "CartPole-v1", dict(
        n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8, ent_coef=0.0,
        learning_rate=1e-3, clip_range=0.2), 16384),
    "sac_pendulum": ("SAC", "Pendulum-v1", dict(learning_rate=1e-3, learning_starts=500), 1500),
    "td3_pendulum": ("TD3", "Pendulum-v1", dict(learning_rate=1e-3, learning_starts=500), 1500),
}


def sb3_rate(preset: str, device: str, scale: float) -> float:
    """Env steps per second of Stable-Baselines3 on ``preset``'s settings (setup excluded)."""
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env

    algo, env_id, kwargs, steps = SB3[preset]
    steps = int(steps * scale)
    env = make_vec_env(env_id, n_envs=8 if algo == "PPO" else 1, seed=0)
    model = getattr(stable_baselines3, algo)("MlpPolicy", env, device=device, seed=0, **kwargs)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--steps-scale", type=float, default=2.0)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--no-sb3", action="store_true")
    args = parser.parse_args()
    rows, results = [], {}
    for preset in args.presets:
        steps = int(compile_speed.PRESETS[preset][0] * args.steps_scale)
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode in MODES[repeat % 3:] + MODES[:repeat % 3]:
                try:
                    runs[mode].append(compile_speed.fit(preset, mode, steps, args.device, None))
                except RuntimeError as error:  # a mode this machine cannot run: say why
                    print(f"{preset} {mode}: {error}", flush=True)
        for mode, measured in runs.items():
            if measured:
                rows.append([preset, mode,
                             median_range([r["sps_steady"] for r in measured]),
                             median_range([r["gsps_steady"] for r in measured]),
                             f"{statistics.median(r['compile'] for r in measured):.1f}"])
        results[preset] = runs
        print(table(["preset", "mode", "env steps/s", "grad steps/s", "compile s"], rows[-3:]),
              flush=True)
    sb3 = {}
    if not args.no_sb3:
        for preset in (p for p in args.presets if p in SB3):
            sb3[preset] = sb3_rate(preset, args.device, args.steps_scale)
            rows.append([preset, "Stable-Baselines3", f"{sb3[preset]:.0f}", "", ""])
    print(table(["preset", "mode", "env steps/s (steady)", "grad steps/s (steady)",
                 "compile s"], rows))
    write_results(f"device_rows_{args.device}", {"args": vars(args), "rltrain": results,
                                                 "sb3": sb3})


if __name__ == "__main__":
    main()

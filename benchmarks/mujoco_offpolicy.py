"""SAC or TD3 on a MuJoCo env from its shipped RL-Zoo preset, per seed, optionally beside
Stable-Baselines3 on the same settings and seeds.

``--config`` names the preset (``sac_halfcheetah``, ``td3_halfcheetah``, ``td3_hopper``, ...);
``--steps`` cuts its budget (100,000 by default: 1M is 2-3 hours a seed on one CPU core). Each
seed trains with a greedy evaluation of ``--eval-episodes`` (10) episodes every
``--eval-interval`` env steps (10,000); per seed: the best and final evaluation return, the
curve, the env steps to the first evaluation reaching ``--threshold`` (3,000), the wall time
and env steps per second. Everything but checkpoints and summary.json is
off; one torch thread.

``--sb3`` trains Stable-Baselines3's SAC or TD3 instead, with the preset's settings translated
one for one (lr, buffer_size, batch_size, tau, gamma, learning_starts = warmup_steps,
train_freq = train_interval, gradient_steps = train_steps, net_arch = hidden_sizes; SAC's
ent_coef "auto" and target entropy, and gSDE's use_sde, sde_sample_freq and log_std_init;
TD3's policy_delay, target_policy_noise, target_noise_clip and NormalActionNoise of
exploration_noise: SB3's noise is on actions rescaled to [-1, 1], as rltrain's fractions of the
half-range are),
scored on the episodes rltrain's evaluations start from (episode i reset with rltrain's
evaluation seed + i).

    python -m benchmarks.mujoco_offpolicy --config td3_halfcheetah [--seeds 0 1 2] [--sb3] \
        [--steps 100000] [--jobs 1] [--run-dir DIR] [key=value ...]

``--run-dir`` keeps each seed's run in ``DIR/seed<S>`` and makes it resumable: run the same
command again after a stop and each seed continues from its last evaluation. rltrain checkpoints
at every evaluation and resumes exactly (its curve read back from ``metrics.jsonl``); SB3 saves
its model, its replay buffer and its curve at every evaluation and continues from them (its env
and its exploration noise restart there; ``wall_time`` is then that of the last call). Without
it the runs live in a temporary directory. Each call of a seed is recorded in
``DIR/seed<S>/calls.json`` and the results (its commit, start, and the env steps it continued from).

Writes ``benchmarks/results/mujoco_<config>.json`` (``_sb3`` appended with ``--sb3``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._util import (
    QUIET,
    SB3Run,
    TimedCurve,
    curve_text,
    first_reaching,
    fmt,
    record_call,
    record_rltrain_call,
    report_seeds,
    require_sb3,
    rltrain_curve,
    run_seeds,
    sb3_curve,
    sb3_evaluator,
    table,
)
from rltrain.config.schema import compose
from rltrain.runtime.seeding import derive_seeds
from rltrain.trainer import build


def overrides(args: argparse.Namespace, seed: int, run_dir: str) -> list[str]:
    """The config overrides of one seed's run."""
    return [f"strategy.seed={seed}", f"trainer.num_steps={args.steps}",
            f"trainer.eval_interval={args.eval_interval}",
            f"trainer.eval_episodes={args.eval_episodes}", "trainer.return_threshold=null",
            f"trainer.run_dir={run_dir}", "trainer.num_threads=1", *QUIET, *args.overrides]


def run_rltrain(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with rltrain (continuing its run in ``--run-dir`` if one is there)."""
    torch.set_num_threads(1)
    run_dir = Path(run_root) / f"seed{seed}"
    kept = ([f"trainer.checkpoint_interval={args.eval_interval}",
             "trainer.enable_metrics_file=true"] if args.run_dir is not None else [])
    config = compose([args.config], [*overrides(args, seed, str(run_dir)), *kept])
    resume = bool(kept) and (run_dir / "checkpoints" / "last.pt").exists()
    calls = record_rltrain_call(run_dir, resume) if kept else []
    curve = TimedCurve(f"rltrain seed {seed}")
    summary = build(config, callbacks=[curve]).fit(ckpt_path="last" if resume else None).summary
    points = rltrain_curve(run_dir) if kept else curve.points
    return {"library": "rltrain", "seed": seed, "curve": points,
            "threshold_env_steps": first_reaching(points, args.threshold),
            "best_eval_return": summary.best_eval_return,
            "final_eval_return": points[-1][1] if points else None,
            "env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "wall_time": summary.wall_time, **({"calls": calls} if calls else {})}


def sb3_settings(config: Any, action_scale: np.ndarray) -> tuple[str, dict[str, Any]]:
    """The Stable-Baselines3 class name and keyword arguments equal to ``config``'s."""
    strategy, agent = config.strategy, config.agent
    if strategy.num_envs != 1:
        raise ValueError("this comparison runs one sub-environment")
    common: dict[str, Any] = {
        "learning_rate": float(agent.lr), "buffer_size": int(strategy.buffer_size),
        "batch_size": int(strategy.batch_size), "tau": float(agent.tau),
        "gamma": float(agent.gamma), "learning_starts": int(strategy.warmup_steps),
        "train_freq": int(strategy.train_interval), "gradient_steps": int(strategy.train_steps),
        "policy_kwargs": {"net_arch": list(agent.hidden_sizes)},
    }
    if agent.name == "sac":
        if agent.alpha is not None or agent.alpha_init != 1.0 or agent.policy_delay != 1:
            raise ValueError("only the learned temperature from 1.0 is translated")
        sde = ({"use_sde": True, "sde_sample_freq": int(agent.sde_sample_freq),
                "policy_kwargs": {**common["policy_kwargs"],
                                  "log_std_init": float(agent.log_std_init)}}
               if agent.use_sde else {})
        return "SAC", {**common, "ent_coef": "auto",
                       "target_update_interval": int(agent.target_update_interval),
                       "target_entropy": ("auto" if agent.target_entropy is None
                                          else float(agent.target_entropy)), **sde}
    if agent.name != "td3" or agent.n_critics != 2:
        raise ValueError("this comparison translates SAC and TD3")
    from stable_baselines3.common.noise import NormalActionNoise

    # SB3's noise is on actions rescaled to [-1, 1]: rltrain's fractions of the half-range
    dim = action_scale.size
    noise = NormalActionNoise(np.zeros(dim), np.full(dim, float(agent.exploration_noise)))
    return "TD3", {**common, "policy_delay": int(agent.policy_delay),
                   "target_policy_noise": float(agent.target_policy_noise),
                   "target_noise_clip": float(agent.target_noise_clip), "action_noise": noise}


def run_sb3(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with Stable-Baselines3 on the same settings."""
    import gymnasium as gym
    import stable_baselines3

    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    env_id = str(config.env.id)
    env = gym.make(env_id)
    space = env.action_space
    assert isinstance(space, gym.spaces.Box)
    name, settings = sb3_settings(config, (space.high - space.low) / 2)
    algorithm = getattr(stable_baselines3, name)
    saved = SB3Run(Path(run_root) / f"seed{seed}")
    model, before = saved.load(algorithm, env)  # continue from the last evaluation
    if model is None:
        model = algorithm("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **settings)
    calls = (record_call(Path(run_root) / f"seed{seed}", model.num_timesteps)
             if args.run_dir is not None else [])
    score = sb3_evaluator(model, gym.make(env_id), derive_seeds(seed).evaluation,
                          args.eval_episodes)

    def evaluate() -> float:
        mean = score()
        if args.run_dir is not None:  # what a rerun continues from
            saved.save(model, [*callback.points, (model.num_timesteps, mean)])
        return mean

    callback = sb3_curve(evaluate, args.eval_interval, f"sb3 seed {seed}")
    callback.points = before  # evaluations before a resume count
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps - model.num_timesteps, callback=callback,
                reset_num_timesteps=False)
    curve = callback.points
    return {"library": "sb3", "seed": seed, "curve": curve,
            "threshold_env_steps": first_reaching(curve, args.threshold),
            "best_eval_return": max((v for _, v in curve), default=None),
            "final_eval_return": curve[-1][1] if curve else None,
            "env_steps": model.num_timesteps, "gradient_steps": model._n_updates,
            "wall_time": time.perf_counter() - start, **({"calls": calls} if calls else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a shipped preset or config file")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-interval", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=3_000.0,
                        help="the return whose first reaching is reported (default 3,000)")
    parser.add_argument("--sb3", action="store_true",
                        help="train Stable-Baselines3 on the same settings instead")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--results", help="results file name (default: mujoco_<config>)")
    parser.add_argument("--run-dir",
                        help="keep each seed's run in RUN_DIR/seed<S>, resumable (module "
                             "docstring); default: a temporary directory")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    if args.sb3:
        require_sb3("benchmarks.mujoco_offpolicy --sb3")
    results_name = args.results or f"mujoco_{args.config}" + ("_sb3" if args.sb3 else "")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.run_dir if args.run_dir is not None else tmp
        results = run_seeds(partial(run_sb3 if args.sb3 else run_rltrain, args, root),
                            args.seeds, args.jobs)
    rows = [[str(r["seed"]), fmt(r["best_eval_return"]), fmt(r["final_eval_return"]),
             f"{r['wall_time']:.0f}", f"{r['env_steps'] / r['wall_time']:.0f}",
             curve_text(r["curve"])] for r in results]
    print(f"{'Stable-Baselines3' if args.sb3 else 'rltrain'}, {args.config}, {args.steps:,} env "
          f"steps, {args.eval_episodes} greedy episodes per evaluation")
    print(table(["seed", "best eval return", "final eval return", "wall time (s)",
                 "env steps/s (with evaluations)", "curve (env steps: mean eval return)"],
                rows))
    short = [r["seed"] for r in results if r["env_steps"] < args.steps]
    if short:  # stopped part-way (a signal): not a result
        raise SystemExit(f"seeds {short} stopped before {args.steps:,} env steps; no results "
                         "written")
    report_seeds(args, results, results_name)


if __name__ == "__main__":
    main()

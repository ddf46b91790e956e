"""Does PPO learn? Learning curves per seed, from a shipped config (ppo_cartpole,
ppo_lunarlander, ppo_pendulum or ppo_acrobot), optionally beside Stable-Baselines3's PPO on the
same settings.

Each seed trains from the config (``--env cartpole|lunarlander|pendulum|acrobot`` or
``--config NAME``) with a greedy evaluation of ``--eval-episodes`` (20) episodes every
``--eval-interval`` env steps (the config's by default). A run stops at the first evaluation
whose mean reaches ``--threshold`` (CartPole 475, LunarLander 200, Pendulum -400, Acrobot -100
by default) unless ``--full`` is given, in which case it runs all ``--steps`` and the env steps
and seconds to the threshold are still reported. Per seed: env steps and seconds to the
threshold, best evaluation return, the wall time and the curve (env steps, mean evaluation
return). Everything but checkpoints and summary.json is off; one torch thread.

``--sb3`` trains Stable-Baselines3's PPO instead, with the settings translated one for one
from the same config (n_envs, n_steps, batch_size, n_epochs, linear learning-rate and clip-range
schedules, gamma, GAE lambda, coefficients, gradient clip, 64x64 tanh networks with orthogonal
init, ``VecNormalize`` for the observation and reward normalisation; Adam eps 1e-5 is SB3's
default) and the same evaluation: every ``eval_interval`` env steps,
``model.predict(deterministic=True)`` on raw observations (normalised by the run's
``VecNormalize`` statistics where it has them), on the episodes rltrain's evaluations start from
(episode i reset with rltrain's evaluation seed + i, as its Evaluator resets sub-env i).
Extra ``key=value`` overrides apply to the rltrain runs, and through the translation to SB3's
too.

    python -m benchmarks.ppo_learning --env cartpole [--seeds 0 1 2] [--sb3] [--full] \
        [--steps N] [--threshold R] [--jobs 1] [key=value ...]

Writes ``benchmarks/results/ppo_learning_<env>.json`` (``_sb3`` appended with ``--sb3``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from functools import partial
from typing import Any

import torch

from benchmarks._util import (
    QUIET,
    Curve,
    first_reaching,
    report_seeds,
    require_sb3,
    run_seeds,
    sb3_curve,
    sb3_evaluator,
    table,
)
from rltrain.config.schema import compose
from rltrain.observe import EvaluationEnd, Metrics, Subscriber
from rltrain.runtime.seeding import derive_seeds
from rltrain.trainer import build

CONFIGS = {"cartpole": "ppo_cartpole", "lunarlander": "ppo_lunarlander",
           "pendulum": "ppo_pendulum", "acrobot": "ppo_acrobot",
           "halfcheetah": "ppo_halfcheetah", "hopper": "ppo_hopper",
           "walker2d": "ppo_walker2d", "ant": "ppo_ant", "pendulum_gsde": "ppo_pendulum_gsde"}
# MuJoCo's: RL-Zoo's published 1M-step returns (HalfCheetah 5,819, Hopper 2,410), so --full
# reports the env steps and seconds to them.
THRESHOLDS = {"ppo_cartpole": 475.0, "ppo_lunarlander": 200.0, "ppo_pendulum": -400.0,
              "ppo_acrobot": -100.0, "ppo_halfcheetah": 5819.0, "ppo_hopper": 2410.0,
              "ppo_walker2d": 3000.0, "ppo_ant": 3000.0, "ppo_pendulum_gsde": -200.0}


def overrides(args: argparse.Namespace, seed: int, run_dir: str) -> list[str]:
    """The config overrides of one seed's run."""
    extra = [f"trainer.num_steps={args.steps}"] if args.steps is not None else []
    if args.eval_interval is not None:
        extra.append(f"trainer.eval_interval={args.eval_interval}")
    threshold = "null" if args.full else str(args.threshold)
    return [f"strategy.seed={seed}", f"trainer.eval_episodes={args.eval_episodes}",
            f"trainer.return_threshold={threshold}", f"trainer.run_dir={run_dir}", *extra,
            "trainer.num_threads=1", *QUIET, *args.overrides]


def run_rltrain(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with rltrain; returns its curve and timings."""
    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    curve = Curve(f"rltrain seed {seed}")
    seconds_at: dict[int, float] = {}
    start = [time.perf_counter()]

    class Clock(Subscriber):  # seconds from the Start event to each evaluation's end
        def on_start(self, event: Any, metrics: Metrics) -> None:
            start[0] = time.perf_counter()

        def on_evaluation_end(self, event: EvaluationEnd, metrics: Metrics) -> None:
            seconds_at[event.env_steps] = time.perf_counter() - start[0]

    summary = build(config, callbacks=[curve, Clock()]).fit().summary
    reached = first_reaching(curve.points, args.threshold)
    return {"library": "rltrain", "seed": seed, "curve": curve.points,
            "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else seconds_at[reached],
            "best_eval_return": summary.best_eval_return,
            "final_eval_return": curve.points[-1][1] if curve.points else None,
            "env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "wall_time": summary.wall_time}


def sb3_settings(config: Any) -> dict[str, Any]:
    """Stable-Baselines3 PPO keyword arguments (and VecNormalize flags) equal to ``config``."""
    strategy, agent = config.strategy, config.agent
    unsupported = {"shared_trunk": False}
    for key, default in unsupported.items():
        if agent.get(key, default) != default:
            raise ValueError(f"agent.{key} has no Stable-Baselines3 equivalent here")

    def schedule(value: float, anneal: bool) -> Any:
        return (lambda remaining: remaining * value) if anneal else value

    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[agent.get("activation", "tanh")]
    hidden = list(agent.get("hidden_sizes", [64, 64]))
    return {
        "n_envs": strategy.num_envs,
        "normalize_obs": bool(agent.get("normalize_observations", False)),
        "normalize_reward": bool(agent.get("normalize_rewards", False)),
        "clip_obs": float(agent.get("clip_observations", 10.0)),
        "clip_reward": float(agent.get("clip_rewards", 10.0)),
        "ppo": {
            "n_steps": strategy.n_steps, "batch_size": strategy.batch_size,
            "n_epochs": strategy.update_epochs,
            "learning_rate": schedule(float(agent.get("lr", 3e-4)),
                                      bool(agent.get("anneal_lr", False))),
            "clip_range": schedule(float(agent.get("clip_range", 0.2)),
                                   bool(agent.get("anneal_clip_range", False))),
            "clip_range_vf": agent.get("clip_range_vf", None),
            "gamma": float(agent.get("gamma", 0.99)),
            "gae_lambda": float(agent.get("gae_lambda", 0.95)),
            "ent_coef": float(agent.get("ent_coef", 0.0)),
            "vf_coef": float(agent.get("vf_coef", 0.5)),
            "max_grad_norm": float(agent.get("max_grad_norm", 0.5)),
            "normalize_advantage": bool(agent.get("normalize_advantage", True)),
            "target_kl": agent.get("target_kl", None),
            "use_sde": bool(agent.get("use_sde", False)),
            "sde_sample_freq": int(agent.get("sde_sample_freq", -1)),
            "policy_kwargs": {"net_arch": {"pi": hidden, "vf": hidden},
                              "activation_fn": activation,
                              "ortho_init": bool(agent.get("ortho_init", True)),
                              "log_std_init": float(agent.get("log_std_init", 0.0))},
        },
    }


def run_sb3(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with Stable-Baselines3's PPO on the same settings."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    settings = sb3_settings(config)
    env_id, num_steps = config.env.id, int(config.trainer.num_steps)
    eval_interval = int(config.trainer.eval_interval)
    envs = make_vec_env(env_id, n_envs=settings["n_envs"], seed=seed)
    if settings["normalize_obs"] or settings["normalize_reward"]:
        envs = VecNormalize(envs, norm_obs=settings["normalize_obs"],
                            norm_reward=settings["normalize_reward"],
                            clip_obs=settings["clip_obs"], clip_reward=settings["clip_reward"],
                            gamma=settings["ppo"]["gamma"])
    model = PPO("MlpPolicy", envs, seed=seed, device="cpu", verbose=0, **settings["ppo"])

    class Normalized:  # predict on raw observations, normalised as training normalises them
        @staticmethod
        def predict(obs: Any, deterministic: bool) -> Any:
            if isinstance(envs, VecNormalize):
                obs = envs.normalize_obs(obs)
            return model.predict(obs, deterministic=deterministic)

    # rltrain's evaluation start states (its evaluation seed + episode), so both libraries are
    # scored on the same episodes
    evaluate = sb3_evaluator(Normalized(), gym.make(env_id), derive_seeds(seed).evaluation,
                             args.eval_episodes)
    callback = sb3_curve(evaluate, eval_interval, f"sb3 seed {seed}",
                         stop_at=None if args.full else args.threshold)
    start = time.perf_counter()
    model.learn(total_timesteps=num_steps, callback=callback)
    wall_time = time.perf_counter() - start
    curve = callback.points
    reached = first_reaching(curve, args.threshold)
    return {"library": "sb3", "seed": seed, "curve": curve, "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else callback.seconds[reached],
            "best_eval_return": max((v for _, v in curve), default=None),
            "final_eval_return": curve[-1][1] if curve else None,
            "env_steps": model.num_timesteps, "gradient_steps": None,
            "wall_time": wall_time}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(CONFIGS), default="cartpole")
    parser.add_argument("--config", help="a config name or file (default: from --env)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="env steps per seed (default: the config's)")
    parser.add_argument("--eval-interval", type=int, help="default: the config's")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--threshold", type=float, help="default: by env (475, 200, -400, -100)")
    parser.add_argument("--full", action="store_true",
                        help="run all steps instead of stopping at the threshold")
    parser.add_argument("--sb3", action="store_true",
                        help="train Stable-Baselines3's PPO on the same settings instead")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--results", help="results file name (default: ppo_learning_<env>)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    if args.sb3:
        require_sb3("benchmarks.ppo_learning --sb3")
    args.config = args.config or CONFIGS[args.env]
    if args.threshold is None:
        args.threshold = THRESHOLDS.get(args.config, THRESHOLDS[CONFIGS[args.env]])
    name = args.config.removesuffix(".yaml").rsplit("/", 1)[-1].removeprefix("ppo_")
    results_name = args.results or f"ppo_learning_{name}" + ("_sb3" if args.sb3 else "")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = run_seeds(partial(run_sb3 if args.sb3 else run_rltrain, args, tmp),
                            args.seeds, args.jobs)
    rows = [[str(r["seed"]),
             "not reached" if r["threshold_env_steps"] is None else f"{r['threshold_env_steps']:,}",
             "-" if r["threshold_seconds"] is None else f"{r['threshold_seconds']:.1f}",
             "-" if r["best_eval_return"] is None else f"{r['best_eval_return']:.1f}",
             f"{r['wall_time']:.1f}",
             " ".join(f"{s / 1000:g}k:{v:.0f}" for s, v in r["curve"])] for r in results]
    library = "Stable-Baselines3" if args.sb3 else "rltrain"
    print(f"{library} PPO, {args.config}, threshold {args.threshold:g}, "
          f"{args.eval_episodes} greedy episodes per evaluation")
    print(table(["seed", "env steps to threshold", "seconds to threshold", "best eval return",
                 "wall time (s)", "curve (env steps: mean eval return)"], rows))
    report_seeds(args, results, results_name)


if __name__ == "__main__":
    main()

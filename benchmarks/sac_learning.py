"""Does SAC learn? Learning curves per seed from a SAC config, optionally beside
Stable-Baselines3's SAC on the same settings and seeds.

Each seed trains from the config (``--env pendulum``: the shipped ``sac_pendulum``;
``--env lunarlander``: the shipped ``sac_lunarlander``; or ``--config NAME_OR_FILE``) for all
its env steps, with a greedy evaluation of ``--eval-episodes`` (10) episodes every
``--eval-interval`` env steps (2,000 by default; the config's with ``--eval-interval 0``).
Per seed: the env steps and seconds to the first evaluation whose mean reaches ``--threshold``
(Pendulum -200, LunarLander 200 by default), the best and final evaluation return, the curve
(env steps: mean greedy return), the wall time, and the final temperature and entropy: rltrain's
``train/alpha`` and ``train/entropy`` (means over the last 100 gradient steps; the entropy
is ``-log pi`` of the sampled actions in the env's action units, and the temperature drives it
toward the target ``-|A|``). Everything but checkpoints and summary.json is off; one torch
thread.

``--sb3`` trains Stable-Baselines3's SAC instead, with the settings translated one for one from
the same config (lr, buffer_size, batch_size, tau, gamma, learning_starts = warmup_steps,
train_freq = train_interval, gradient_steps = train_steps, ent_coef "auto" (from alpha_init),
target_update_interval, net_arch = hidden_sizes) and the same evaluation: every
``eval_interval`` env steps, ``model.predict(deterministic=True)`` on episodes that start from
the states rltrain's evaluations start from (episode i reset with rltrain's evaluation seed + i,
as its Evaluator resets sub-env i; the same states for up to 10 episodes). Its temperature is
``exp(log_ent_coef)`` at the end, and its entropy is ``-log pi`` of the final actor's sampled
actions on 10 batches of 256 replayed observations. SB3 takes log-probabilities of the actions
rescaled to [-1, 1], so its target ``-|A|`` is in those units; the table gives both libraries'
entropy in the env's units (SB3's plus ``sum(log scale)``) beside each one's target in the same
units. Extra ``key=value`` overrides apply to the rltrain runs, and through the translation to
SB3's too.

    python -m benchmarks.sac_learning --env pendulum [--seeds 0 1 2] [--sb3] [--steps N] \
        [--threshold R] [--jobs 1] [key=value ...]

Writes ``benchmarks/results/sac_learning_<env>.json`` (``_sb3`` appended with ``--sb3``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from functools import partial
from typing import Any

import numpy as np
import torch

from benchmarks._util import (
    QUIET,
    TimedCurve,
    curve_text,
    first_reaching,
    fmt,
    report_seeds,
    require_sb3,
    run_seeds,
    sb3_curve,
    sb3_evaluator,
    table,
)
from rltrain.agents.sac import SAC, SACConfig
from rltrain.config.schema import compose
from rltrain.runtime.seeding import derive_seeds
from rltrain.trainer import build

CONFIGS = {"pendulum": "sac_pendulum", "lunarlander": "sac_lunarlander"}
THRESHOLDS = {"pendulum": -200.0, "lunarlander": 200.0}


def overrides(args: argparse.Namespace, seed: int, run_dir: str) -> list[str]:
    """The config overrides of one seed's run."""
    extra = [f"trainer.num_steps={args.steps}"] if args.steps is not None else []
    if args.eval_interval:
        extra.append(f"trainer.eval_interval={args.eval_interval}")
    return [f"strategy.seed={seed}", f"trainer.eval_episodes={args.eval_episodes}",
            "trainer.return_threshold=null", f"trainer.run_dir={run_dir}", *extra,
            "trainer.num_threads=1", *QUIET, *args.overrides]


def log_scale(env_id: str, kwargs: dict[str, Any]) -> float:
    """``sum(log((high - low) / 2))`` of the env's action space."""
    import gymnasium as gym

    env = gym.make(env_id, **kwargs)
    space = env.action_space
    env.close()
    assert isinstance(space, gym.spaces.Box)
    return float(np.log((space.high - space.low) / 2).sum())


def run_rltrain(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with rltrain; returns its curve, timings and final train metrics."""
    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    curve = TimedCurve(f"rltrain seed {seed}")
    built = build(config, callbacks=[curve])
    summary = built.fit().summary
    agent = built.agent
    assert isinstance(agent, SAC)
    action_dim = agent.actor.scale.numel()
    reached = first_reaching(curve.points, args.threshold)
    final = summary.final_metrics
    return {"library": "rltrain", "seed": seed, "curve": curve.points,
            "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else curve.seconds[reached],
            "best_eval_return": summary.best_eval_return,
            "final_eval_return": curve.points[-1][1] if curve.points else None,
            "alpha": final.get("train/alpha"), "entropy": final.get("train/entropy"),
            "entropy_target": float(agent.target_entropy),
            "action_dim": action_dim,
            "train_metrics": {k: v for k, v in final.items() if k.startswith("train/")},
            "env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "wall_time": summary.wall_time}


def sb3_settings(config: Any) -> dict[str, Any]:
    """Stable-Baselines3 SAC keyword arguments equal to ``config``'s settings."""
    strategy = config.strategy
    agent = SACConfig(**{k: v for k, v in config.agent.items() if k != "name"})
    if agent.policy_delay != 1:
        raise ValueError("agent.policy_delay has no Stable-Baselines3 SAC equivalent")
    if strategy.num_envs != 1:
        raise ValueError("this comparison runs one sub-environment")
    ent_coef: Any = agent.alpha if agent.alpha is not None else (
        "auto" if agent.alpha_init == 1.0 else f"auto_{agent.alpha_init}")
    return {
        "learning_rate": agent.lr, "buffer_size": int(strategy.buffer_size),
        "batch_size": int(strategy.batch_size), "tau": agent.tau, "gamma": agent.gamma,
        "learning_starts": int(strategy.warmup_steps), "train_freq": int(strategy.train_interval),
        "gradient_steps": int(strategy.train_steps), "ent_coef": ent_coef,
        "target_update_interval": agent.target_update_interval,
        "target_entropy": "auto" if agent.target_entropy is None else agent.target_entropy,
        "policy_kwargs": {"net_arch": list(agent.hidden_sizes), **sb3_gsde(agent)[1]},
        **sb3_gsde(agent)[0],
    }


def sb3_gsde(agent: SACConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """SB3's gSDE arguments and policy arguments equal to ``agent``'s (none without gSDE);
    SB3's SAC always learns the features, and draws uniform actions during warm-up."""
    if not agent.use_sde:
        return {}, {}
    if not (agent.sde_learn_features and agent.sde_full_std):
        raise ValueError("agent.sde_learn_features=false and agent.sde_full_std=false have no "
                         "Stable-Baselines3 SAC equivalent (its SAC learns the features, with "
                         "a full std)")
    return ({"use_sde": True, "sde_sample_freq": agent.sde_sample_freq,
             "use_sde_at_warmup": False},
            {"log_std_init": agent.log_std_init, "use_expln": agent.sde_expln})


def run_sb3(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with Stable-Baselines3's SAC on the same settings."""
    import gymnasium as gym
    from stable_baselines3 import SAC as SB3SAC

    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    settings = sb3_settings(config)
    env_id, num_steps = str(config.env.id), int(config.trainer.num_steps)
    kwargs = dict(config.env.kwargs or {})
    eval_interval = int(config.trainer.eval_interval)
    model = SB3SAC("MlpPolicy", gym.make(env_id, **kwargs), seed=seed, device="cpu", verbose=0,
                **settings)
    eval_env = gym.make(env_id, **kwargs)
    # rltrain's Evaluator resets sub-env i of its evaluation envs with seed + i at every
    # evaluation: the same start states here, so both libraries are scored on the same episodes.
    eval_seed = derive_seeds(seed).evaluation
    callback = sb3_curve(sb3_evaluator(model, eval_env, eval_seed, args.eval_episodes),
                         eval_interval, f"sb3 seed {seed}")
    start = time.perf_counter()
    model.learn(total_timesteps=num_steps, callback=callback)
    wall_time = time.perf_counter() - start
    curve, seconds_at = callback.points, callback.seconds
    # The final temperature, and the final actor's entropy on replayed observations.
    alpha = float(model.log_ent_coef.detach().exp()) if model.log_ent_coef is not None else None
    assert model.replay_buffer is not None
    with torch.no_grad():
        log_probs = [model.actor.action_log_prob(
            model.replay_buffer.sample(256).observations)[1] for _ in range(10)]
    entropy_unit = -float(torch.cat(log_probs).mean())
    shift = log_scale(env_id, kwargs)
    reached = first_reaching(curve, args.threshold)
    return {"library": "sb3", "seed": seed, "curve": curve, "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else seconds_at[reached],
            "best_eval_return": max((v for _, v in curve), default=None),
            "final_eval_return": curve[-1][1] if curve else None,
            "alpha": alpha, "entropy": entropy_unit + shift,
            "entropy_unit_box": entropy_unit, "entropy_target": float(model.target_entropy) + shift,
            "env_steps": model.num_timesteps, "gradient_steps": model._n_updates,
            "wall_time": wall_time}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(CONFIGS), default="pendulum")
    parser.add_argument("--config", help="a config name or file (default: from --env)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="env steps per seed (default: the config's)")
    parser.add_argument("--eval-interval", type=int, default=2_000,
                        help="env steps between evaluations (0: the config's)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threshold", type=float, help="default: by env (-200, 200)")
    parser.add_argument("--sb3", action="store_true",
                        help="train Stable-Baselines3's SAC on the same settings instead")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--results", help="results file name (default: sac_learning_<env>)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    if args.sb3:
        require_sb3("benchmarks.sac_learning --sb3")
    args.config = args.config or CONFIGS[args.env]
    if args.threshold is None:
        args.threshold = THRESHOLDS[args.env]
    results_name = args.results or f"sac_learning_{args.env}" + ("_sb3" if args.sb3 else "")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = run_seeds(partial(run_sb3 if args.sb3 else run_rltrain, args, tmp),
                            args.seeds, args.jobs)
    rows = [[str(r["seed"]),
             "not reached" if r["threshold_env_steps"] is None else f"{r['threshold_env_steps']:,}",
             fmt(r["threshold_seconds"]), fmt(r["best_eval_return"]),
             fmt(r["final_eval_return"]), fmt(r["alpha"], "{:.3f}"),
             f"{fmt(r['entropy'], '{:.2f}')} ({r['entropy_target']:.2f})",
             f"{r['wall_time']:.0f}",
             curve_text(r["curve"])] for r in results]
    library = "Stable-Baselines3" if args.sb3 else "rltrain"
    print(f"{library} SAC, {args.config}, threshold {args.threshold:g}, "
          f"{args.eval_episodes} greedy episodes per evaluation")
    print(table(["seed", "env steps to threshold", "seconds to threshold", "best eval return",
                 "final eval return", "final alpha", "final entropy (target)", "wall time (s)",
                 "curve (env steps: mean eval return)"], rows))
    report_seeds(args, results, results_name)


if __name__ == "__main__":
    main()

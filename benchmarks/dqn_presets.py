"""Do the shipped DQN presets learn? Learning curves per seed from a preset (``dqn_acrobot``,
``dqn_mountaincar``, ``qrdqn_cartpole``, ``c51_acrobot``, ``rainbow_cartpole``, ...), optionally
beside Stable-Baselines3's DQN (sb3-contrib's QR-DQN for a ``qrdqn`` preset) on the same
settings.

Each seed trains from the preset with no change but ``strategy.seed``, the run directory, the
built-in outputs off (checkpoints and summary.json are still written) and one torch thread: its
own ``num_steps``, its own evaluation (greedy, ``eval_episodes`` episodes every
``eval_interval`` env steps; 10 every 5,000 for Acrobot and MountainCar) and no return
threshold to stop at (the presets set none). Per seed: the env steps and seconds to the first
evaluation whose mean reaches ``--threshold`` (Acrobot-v1 -100, MountainCar-v0 -115,
LunarLander-v3 200 by default), the best and final evaluation return, the wall time and the
curve (env steps: mean greedy return).

``--sb3`` trains Stable-Baselines3's DQN instead, with the settings translated from the same
config: learning_rate = lr, buffer_size, batch_size, learning_starts = warmup_steps, train_freq
= train_interval, gradient_steps = train_steps (RL-Zoo's ``-1``, as many as the env steps of the
round, is the same number with one sub-env), gamma, tau, target_update_interval = the agent's
(in gradient steps) x train_interval / train_steps (SB3 counts env steps), exploration_fraction
= exploration_steps / num_steps, the initial and final epsilon, max_grad_norm =
trainer.gradient_clip_val, net_arch = hidden_sizes. A config SB3's DQN cannot express is
refused: double or dueling Q (SB3's DQN has neither), a Huber threshold other than 1 (SB3's
smooth L1), more than one sub-env, C51 (neither library has it), prioritized replay. For QR-DQN:
n_quantiles in ``policy_kwargs``, Adam with the preset's ``adam_eps``, ``max_grad_norm`` None
without gradient clipping, and ``n_steps`` = ``strategy.n_step``. SB3 is evaluated every
``eval_interval`` env steps with ``model.predict(deterministic=True)`` on episodes that start
from the states rltrain's evaluations start from (episode i reset with rltrain's evaluation seed
+ i). SB3 evaluates just before a training round due at the same env step, rltrain just after it
(one round: 4 gradient steps on Acrobot). Extra ``key=value`` overrides apply to the rltrain
runs, and through the translation to SB3's too.

    python -m benchmarks.dqn_presets --config dqn_acrobot [--seeds 0 1 2] [--sb3] \
        [--threshold R] [--jobs 1] [key=value ...]

Writes ``benchmarks/results/dqn_presets_<env>.json`` (``acrobot``, ``mountaincar``, ...;
``_sb3`` appended with ``--sb3``).
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
from rltrain.agents.qrdqn import QRDQNConfig
from rltrain.config.schema import compose
from rltrain.runtime.seeding import derive_seeds
from rltrain.settings.registry import AGENTS
from rltrain.trainer import build

#: The default threshold per preset: Acrobot-v1's reward_threshold; for MountainCar-v0 the
#: best evaluation issue 15 asks for (its reward_threshold is -110); LunarLander's.
THRESHOLDS = {"dqn_acrobot": -100.0, "dqn_mountaincar": -115.0, "dqn_lunarlander": 200.0,
              "dqn_cartpole": 475.0, "qrdqn_cartpole": 475.0, "qrdqn_acrobot": -100.0,
              "c51_cartpole": 475.0, "c51_acrobot": -100.0, "rainbow_cartpole": 475.0}


def overrides(args: argparse.Namespace, seed: int, run_dir: str) -> list[str]:
    """The config overrides of one seed's run: the seed, the run directory, quiet, one thread."""
    return [f"strategy.seed={seed}", f"trainer.run_dir={run_dir}", "trainer.num_threads=1",
            *QUIET, *args.overrides]


def run_rltrain(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with rltrain from the preset; returns its curve and timings."""
    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    curve = TimedCurve(f"rltrain seed {seed}")
    summary = build(config, callbacks=[curve]).fit().summary
    reached = first_reaching(curve.points, args.threshold)
    return {"library": "rltrain", "seed": seed, "curve": curve.points,
            "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else curve.seconds[reached],
            "best_eval_return": summary.best_eval_return,
            "final_eval_return": curve.points[-1][1] if curve.points else None,
            "env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "wall_time": summary.wall_time}


def sb3_settings(config: Any) -> dict[str, Any]:
    """Stable-Baselines3 DQN (sb3-contrib QR-DQN) keyword arguments equal to ``config``'s
    settings."""
    strategy, trainer = config.strategy, config.trainer
    name = str(config.agent.name)
    agent = AGENTS[name].config(**{k: v for k, v in config.agent.items() if k != "name"})
    for refused, why in [(name not in ("dqn", "qrdqn"), f"{name}: no SB3 equivalent"),
                         (strategy.prioritized, "strategy.prioritized: SB3 has no PER"),
                         (agent.double_q, "agent.double_q: SB3's DQN has no double Q"),
                         (agent.dueling, "agent.dueling: SB3's DQN has no dueling head"),
                         (agent.huber_delta != 1.0,
                          "agent.huber_delta: SB3's DQN uses smooth L1 with threshold 1"),
                         (strategy.num_envs != 1, "this comparison runs one sub-environment"),
                         (trainer.gradient_clip_algorithm != "norm",
                          "trainer.gradient_clip_algorithm: SB3 clips the norm")]:
        if refused:
            raise ValueError(f"No Stable-Baselines3 equivalent: {why}.")
    # rltrain counts the target interval in gradient steps, SB3 in env steps (its _on_step
    # runs once per env step, during collection).
    gradient_steps_per_env_step = strategy.train_steps / strategy.train_interval
    target_env_steps = agent.target_update_interval / gradient_steps_per_env_step
    if abs(target_env_steps - round(target_env_steps)) > 1e-9:
        raise ValueError(f"agent.target_update_interval {agent.target_update_interval} is "
                         f"{target_env_steps:g} env steps, not a whole number.")
    settings = {
        "learning_rate": agent.lr, "buffer_size": int(strategy.buffer_size),
        "learning_starts": int(strategy.warmup_steps), "batch_size": int(strategy.batch_size),
        "tau": agent.tau, "gamma": agent.gamma, "train_freq": int(strategy.train_interval),
        "gradient_steps": int(strategy.train_steps),
        "target_update_interval": round(target_env_steps),
        "exploration_fraction": agent.exploration_steps / int(trainer.num_steps),
        "exploration_initial_eps": agent.epsilon_start,
        "exploration_final_eps": agent.epsilon_end,
        "max_grad_norm": (float("inf") if trainer.gradient_clip_val is None
                          else float(trainer.gradient_clip_val)),
        "policy_kwargs": {"net_arch": list(agent.hidden_sizes)},
        "n_steps": int(strategy.n_step),
    }
    if isinstance(agent, QRDQNConfig):
        settings["policy_kwargs"].update(n_quantiles=agent.n_quantiles,
                                         optimizer_class=torch.optim.Adam,
                                         optimizer_kwargs={"eps": agent.adam_eps})
        if trainer.gradient_clip_val is None:
            settings["max_grad_norm"] = None
    return settings


def run_sb3(args: argparse.Namespace, run_root: str, seed: int) -> dict[str, Any]:
    """Train one seed with Stable-Baselines3's DQN on the same settings."""
    import gymnasium as gym
    from stable_baselines3 import DQN

    torch.set_num_threads(1)
    config = compose([args.config], overrides(args, seed, f"{run_root}/seed{seed}"))
    settings = sb3_settings(config)
    SB3DQN: Any = DQN
    if config.agent.name == "qrdqn":  # sb3-contrib's, imported only for it
        from sb3_contrib import QRDQN
        SB3DQN = QRDQN
    env_id, num_steps = str(config.env.id), int(config.trainer.num_steps)
    kwargs = dict(config.env.kwargs or {})
    model = SB3DQN("MlpPolicy", gym.make(env_id, **kwargs), seed=seed, device="cpu", verbose=0,
                   **settings)
    evaluate = sb3_evaluator(model, gym.make(env_id, **kwargs), derive_seeds(seed).evaluation,
                             int(config.trainer.eval_episodes))
    callback = sb3_curve(evaluate, int(config.trainer.eval_interval), f"sb3 seed {seed}")
    start = time.perf_counter()
    model.learn(total_timesteps=num_steps, callback=callback)
    wall_time = time.perf_counter() - start
    curve = callback.points
    reached = first_reaching(curve, args.threshold)
    return {"library": "sb3", "seed": seed, "curve": curve, "threshold_env_steps": reached,
            "threshold_seconds": None if reached is None else callback.seconds[reached],
            "best_eval_return": max((v for _, v in curve), default=None),
            "final_eval_return": curve[-1][1] if curve else None,
            "env_steps": model.num_timesteps, "gradient_steps": model._n_updates,
            "wall_time": wall_time, "settings": {k: v for k, v in settings.items()
                                                 if k != "policy_kwargs"},
            "policy_kwargs": {k: v for k, v in settings["policy_kwargs"].items()
                              if k != "optimizer_class"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="dqn_acrobot", help="a preset name or config file")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threshold", type=float,
                        help="default: by preset (-100 Acrobot, -115 MountainCar, 200 LunarLander)")
    parser.add_argument("--sb3", action="store_true",
                        help="train Stable-Baselines3's DQN on the same settings instead")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--results", help="results file name (default: dqn_presets_<env>)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    if args.sb3:
        require_sb3("benchmarks.dqn_presets --sb3")
    name = args.config.removesuffix(".yaml").rsplit("/", 1)[-1]
    if args.threshold is None:
        if name not in THRESHOLDS:
            parser.error(f"no default threshold for {args.config}; give --threshold")
        args.threshold = THRESHOLDS[name]
    results_name = args.results or (f"dqn_presets_{name.removeprefix('dqn_')}"
                                    + ("_sb3" if args.sb3 else ""))
    if args.sb3 and compose([args.config]).agent.name == "qrdqn":
        require_sb3("benchmarks.dqn_presets --sb3", module="sb3_contrib")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = run_seeds(partial(run_sb3 if args.sb3 else run_rltrain, args, tmp),
                            args.seeds, args.jobs)
    rows = [[str(r["seed"]),
             "not reached" if r["threshold_env_steps"] is None else f"{r['threshold_env_steps']:,}",
             fmt(r["threshold_seconds"]), fmt(r["best_eval_return"]),
             fmt(r["final_eval_return"]), f"{r['wall_time']:.0f}", curve_text(r["curve"])]
            for r in results]
    library = "Stable-Baselines3" if args.sb3 else "rltrain"
    print(f"{library}, {args.config}, threshold {args.threshold:g}")
    print(table(["seed", "env steps to threshold", "seconds to threshold", "best eval return",
                 "final eval return", "wall time (s)", "curve (env steps: mean eval return)"],
                rows))
    report_seeds(args, results, results_name)


if __name__ == "__main__":
    main()

"""Does PPO learn Atari? ``ppo_atari`` on one game for ``--steps`` env steps (1M), rltrain or
Stable-Baselines3 on the same settings, curves of whole-game greedy evaluations, and the random
policy's return beside them.

rltrain trains in a run directory (``--run-dir``; resumable: run the same command again and it
continues from the run's last checkpoint) with ``env.backend=envpool`` by default (``--backend
gymnasium`` for Gymnasium's async envs), evaluating 10 greedy whole games every
``--eval-interval`` (100,000) env steps on its evaluation pipeline (a lost life goes on with the
game, unclipped rewards). SB3 trains PPO ``CnnPolicy`` on ``make_atari_env`` (``AtariWrapper``
in ``SubprocVecEnv`` workers, 4 frames stacked) with the same settings
(``benchmarks.atari_common``), evaluated every ``--eval-interval`` env steps with
``predict(deterministic=True)`` on 10 whole games of its own pipeline, scored by its ``Monitor``
(unclipped, across lost lives, as SB3's ``evaluate_policy`` reads them); it saves its model at
each evaluation in ``--run-dir`` and a rerun continues from it (its rollout and env states
restart there; the learning rate keeps annealing over the whole budget), and keeps its training
statistics in ``RUN_DIR/sb3_log_from_<env steps>/progress.csv``, one per call. ``--random`` plays 10
games with uniformly random actions on rltrain's evaluation pipeline.

    python -m benchmarks.atari_ppo --library rltrain|sb3|random [--game ALE/Breakout-v5] \
        [--steps 1000000] [--seed 0] [--run-dir runs/atari-<library>] [key=value ...]

``key=value`` changes the preset for both libraries (SB3's side reads the same config).

``--preset dqn_atari`` trains the DQN preset instead, rltrain's or SB3's DQN on its settings
(one env, not in a worker process; its replay buffer saved beside its model at each evaluation,
so a rerun continues from there too).

Writes ``benchmarks/results/atari_<ppo|dqn>_<game>_<library>_seed<seed>.json`` (the library
``rltrain-gymnasium`` with ``--backend gymnasium``; ``--label`` names a group of its own), with
each call
of the run (its commit, start and the env steps it continued from: ``RUN_DIR/calls.json``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._util import (
    SB3Run,
    curve_text,
    record_call,
    record_rltrain_call,
    rltrain_curve,
    sb3_curve,
    write_results,
)
from benchmarks.atari_common import atari_config, sb3_atari_envs, sb3_dqn, sb3_ppo
from rltrain.config.schema import compose
from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import EnvSpec
from rltrain.trainer import build

EPISODES = 10


def train_rltrain(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    overrides = [f"env.backend={args.backend}", f"strategy.seed={args.seed}",
                 f"trainer.eval_interval={args.eval_interval}",
                 f"trainer.eval_episodes={EPISODES}", "trainer.enable_metrics_file=true",
                 f"trainer.checkpoint_interval={args.eval_interval}", *args.overrides]
    config = atari_config(args.game, args.steps, str(run_dir), overrides, args.preset)
    resume = (run_dir / "checkpoints" / "last.pt").exists()
    calls = record_rltrain_call(run_dir, resume)
    start = time.perf_counter()
    summary = build(config).fit(ckpt_path="last" if resume else None).summary
    return {"env_steps": summary.env_steps, "wall_time_this_call": time.perf_counter() - start,
            "curve": rltrain_curve(run_dir), "calls": calls}


def sb3_evaluate(model: Any, game: str, seed: int, sticky: float) -> float:
    """Mean score of 10 whole games, greedy, as SB3's ``evaluate_policy`` reads them: from the
    ``Monitor`` inside ``AtariWrapper`` (unclipped, across lost lives)."""
    envs = sb3_atari_envs(game, 1, seed, sticky, subprocess=False)
    returns: list[float] = []
    obs = envs.reset()
    while len(returns) < EPISODES:
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, _, infos = envs.step(actions)
        if "episode" in infos[0]:
            returns.append(float(infos[0]["episode"]["r"]))
    envs.close()
    return float(np.mean(returns))


def train_sb3(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    import stable_baselines3
    from stable_baselines3.common.logger import configure

    config = atari_config(args.game, args.steps, str(run_dir), args.overrides, args.preset)
    sticky = float(config.env.atari.repeat_action_probability)
    num_envs = int(config.strategy.num_envs)
    envs = sb3_atari_envs(args.game, num_envs, args.seed, sticky, subprocess=num_envs > 1)
    dqn = args.preset == "dqn_atari"
    saved = SB3Run(run_dir)
    model, before = saved.load(stable_baselines3.DQN if dqn else stable_baselines3.PPO, envs)
    if model is None:
        model = (sb3_dqn if dqn else sb3_ppo)(config, envs, seed=args.seed)
    calls = record_call(run_dir, model.num_timesteps)
    # SB3's training statistics (entropy, value loss, clip fraction, ...), a CSV file per call
    model.set_logger(configure(str(run_dir / f"sb3_log_from_{model.num_timesteps}"), ["csv"]))

    def evaluate() -> float:
        mean = sb3_evaluate(model, args.game, args.seed + 1_000, sticky)
        saved.save(model, [*callback.points, (model.num_timesteps, mean)])
        return mean

    callback = sb3_curve(evaluate, args.eval_interval, "sb3")
    callback.points = before  # evaluations before a resume count
    start = time.perf_counter()
    try:  # what is left of the budget: the learning rate anneals over all of it
        model.learn(total_timesteps=args.steps - model.num_timesteps, callback=callback,
                    reset_num_timesteps=False)
    finally:
        envs.close()
    return {"env_steps": model.num_timesteps, "wall_time_this_call": time.perf_counter() - start,
            "curve": callback.points, "calls": calls}


def random_return(game: str, seed: int) -> dict[str, Any]:
    """Mean score of uniformly random actions over whole games of rltrain's evaluation
    pipeline."""
    atari = AtariConfig(**compose(["ppo_atari"]).env.atari)
    env = EnvSpec(game, atari=atari, training=False)()
    env.action_space.seed(seed)
    returns = []
    for episode in range(EPISODES):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"returns": returns, "mean": float(np.mean(returns))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, choices=["rltrain", "sb3", "random"])
    parser.add_argument("--game", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-interval", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="envpool", choices=["envpool", "gymnasium"])
    parser.add_argument("--preset", default="ppo_atari", choices=["ppo_atari", "dqn_atari"],
                        help="the preset (SB3's side: its PPO or DQN on the same settings)")
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--label", default=None,
                        help="the library's name in the results file, for a group of runs of "
                        "its own (default: the library; rltrain-gymnasium with --backend "
                        "gymnasium)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="changes to the preset, for both libraries (agent.vf_coef=0.5)")
    args = parser.parse_args()
    name = args.game.removeprefix("ALE/").split("-")[0].lower()
    # rltrain on Gymnasium's envs is a group of its own (envpool's is the default)
    label = args.label or ("rltrain-gymnasium" if args.library == "rltrain"
                           and args.backend == "gymnasium" else args.library)
    algo = "" if args.preset == "ppo_atari" else "dqn-"  # PPO's folders kept their names
    run_dir = args.run_dir or Path("runs") / f"atari-{algo}{name}-{label}"
    if args.library == "random":
        result = random_return(args.game, args.seed)
        print(f"random policy on {args.game}: {result['mean']:.1f} over {EPISODES} games")
    else:
        result = (train_rltrain if args.library == "rltrain" else train_sb3)(args, run_dir)
        print(f"{args.library}, {args.preset} on {args.game}: {curve_text(result['curve'])}")
        if result["env_steps"] < args.steps:  # stopped part-way (a signal): no result yet
            raise SystemExit(f"stopped at {result['env_steps']:,} of {args.steps:,} env steps; "
                             "run the same command again to continue")
    write_results(f"atari_{args.preset.split('_')[0]}_{name}_{label}_seed{args.seed}",
                  {"args": {**vars(args), "run_dir": str(run_dir)}, **result})


if __name__ == "__main__":
    main()

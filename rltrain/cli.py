"""The ``rltrain`` command: ``rltrain fit`` trains, ``rltrain evaluate`` replays a trained agent."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import torch

from rltrain.agents.dqn import DQN
from rltrain.checkpoint import load_agent
from rltrain.config import RunConfig, load_run_config, save_run_config
from rltrain.envs import check_env_id
from rltrain.strategies.off_policy import OffPolicyStrategy
from rltrain.trainer import (
    RENDERERS,
    Trainer,
    check_spaces,
    default_run_dir,
    prepare_run_dir,
)

EXAMPLES = """\
examples:
  rltrain fit                                   # DQN on CartPole-v1 until solved (return >= 475)
  rltrain fit --steps 20000 --seed 3 --run-dir runs/cartpole-3
  rltrain fit --no-tqdm --no-tensorboard        # console lines and metrics.jsonl only
  rltrain evaluate runs/cartpole-3 --episodes 20
  tensorboard --logdir runs
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rltrain`` command."""
    parser = argparse.ArgumentParser(
        prog="rltrain", description="Train and evaluate reinforcement-learning agents.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    fit = commands.add_parser(
        "fit", help="train an agent (default: DQN on CartPole-v1 until solved)",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = RunConfig()
    fit.add_argument("--env", default=None, help=f"Gymnasium id (default: {defaults.env})")
    fit.add_argument("--steps", type=int, default=None,
                     help=f"total env steps to train for (default: {defaults.num_steps:,}; "
                          "with --resume, the run's own)")
    fit.add_argument("--seed", type=int, default=None,
                     help=f"seed of every random stream (default: {defaults.off_policy.seed})")
    fit.add_argument("--num-envs", type=int, default=None,
                     help="sub-environments stepped together (default: "
                          f"{defaults.off_policy.num_envs})")
    fit.add_argument("--device", default=None, help=f"default: {defaults.device}")
    fit.add_argument("--resume", default=None, metavar="last|best|PATH",
                     help="continue a run exactly from its last or best checkpoint (with "
                          "--run-dir) or from a checkpoint file; the run's config.yaml applies, "
                          "and only --steps and the output switches may change")
    fit.add_argument("--threads", type=int, default=defaults.threads,
                     help="torch threads (default: %(default)s; small MLPs are fastest with 1)")
    fit.add_argument("--run-dir", type=Path, default=None,
                     help="run directory (default: runs/<date>-<time>-dqn-<env>)")
    fit.add_argument("--target-return", type=float, default=None,
                     help="stop once the mean evaluation return reaches this (default: the "
                          "env's registered reward_threshold, 475 for CartPole-v1)")
    fit.add_argument("--overwrite", action="store_true",
                     help="replace the run already in --run-dir (its checkpoints and logs)")
    fit.add_argument("--no-early-stop", action="store_true",
                     help="train all --steps even after the target return is reached")
    for name in RENDERERS:
        fit.add_argument(f"--no-{name}", action="store_true", help=f"turn the {name} output off")

    evaluate = commands.add_parser(
        "evaluate", help="run greedy episodes of a trained agent",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    evaluate.add_argument("path", type=Path,
                          help="a run directory, or a checkpoint file inside one")
    evaluate.add_argument("--episodes", type=int, default=None,
                          help="episodes to run (default: the run's eval_episodes)")
    evaluate.add_argument("--seed", type=int, default=None,
                          help="reset seed (default: the run's evaluation seed, which "
                               "reproduces the run's evaluation returns)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rltrain`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "fit":
            return fit(args)
        return evaluate(args)
    except (ValueError, OSError) as error:
        print(f"rltrain: error: {error}", file=sys.stderr)
        return 2


def fit(args: argparse.Namespace) -> int:
    """``rltrain fit``: train, then print where the run is stored."""
    defaults = RunConfig()
    env = args.env or defaults.env
    check_env_id(env)
    threshold = args.target_return
    if threshold is None and not args.no_early_stop:
        threshold = gym.spec(env).reward_threshold
    if args.resume is not None:
        run_dir, config = resumed_config(args)
    else:
        config = RunConfig(
            env=env, num_steps=defaults.num_steps if args.steps is None else args.steps,
            device=args.device or defaults.device, threads=args.threads,
            return_threshold=None if args.no_early_stop else threshold,
            off_policy=dataclasses.replace(
                defaults.off_policy,
                seed=defaults.off_policy.seed if args.seed is None else args.seed,
                num_envs=args.num_envs or defaults.off_policy.num_envs),
        )
        run_dir = args.run_dir if args.run_dir is not None else default_run_dir("dqn",
                                                                                config.env)
    torch.set_num_threads(config.threads)
    agent = DQN(config.dqn)
    check_spaces(config.env, agent)
    prepare_run_dir(run_dir, resuming=args.resume is not None, overwrite=args.overwrite)
    save_run_config(config, run_dir / "config.yaml")
    trainer = Trainer(
        num_steps=config.num_steps,
        strategy=OffPolicyStrategy(config.off_policy),
        device=config.device,
        run_dir=run_dir,
        renderers=[name for name in RENDERERS if not getattr(args, f"no_{name}")],
        return_threshold=config.return_threshold,
        gradient_clip_val=config.gradient_clip_val,
        overwrite=args.overwrite,
    )
    result = trainer.fit(config.env, agent, ckpt_path=args.resume)
    summary = result.summary
    final = summary.final_metrics.get("eval/return_mean")
    print(f"run directory: {run_dir}")
    if final is not None:
        print(f"final evaluation return: {final:.2f}")
    return 0


def resumed_config(args: argparse.Namespace) -> tuple[Path, RunConfig]:
    """The run directory and saved config of ``--resume``, with ``--steps`` applied."""
    resume = Path(args.resume)
    if args.resume in ("last", "best"):
        if args.run_dir is None:
            raise ValueError(f"--resume {args.resume} needs --run-dir, the run to continue.")
        run_dir = Path(args.run_dir)
    else:
        run_dir = resume.parent.parent
    config = load_run_config(run_dir / "config.yaml")
    given = {"--env": (args.env, config.env), "--seed": (args.seed, config.off_policy.seed),
             "--num-envs": (args.num_envs, config.off_policy.num_envs),
             "--device": (args.device, config.device)}
    for flag, (value, saved) in given.items():
        if value is not None and value != saved:
            raise ValueError(
                f"{flag} {value} differs from the run being resumed ({saved}); a resumed run "
                "keeps its settings. Start a new run (another --run-dir) to change it.")
    if args.steps is not None:
        config.num_steps = args.steps
    return run_dir, config


def evaluate(args: argparse.Namespace) -> int:
    """``rltrain evaluate``: load a run's agent and print its evaluation metrics as JSON."""
    path: Path = args.path
    checkpoint = path / "checkpoints" / "last.pt" if path.is_dir() else path
    run_dir = path if path.is_dir() else path.parent.parent
    config = load_run_config(run_dir / "config.yaml")
    torch.set_num_threads(config.threads)
    agent = DQN(config.dqn)
    load_agent(agent, checkpoint, config.env)
    trainer = Trainer(strategy=OffPolicyStrategy(config.off_policy), renderers=())
    episodes = args.episodes if args.episodes is not None else config.off_policy.eval_episodes
    metrics = trainer.evaluate(config.env, agent, episodes=episodes, seed=args.seed)
    print(json.dumps({"checkpoint": str(checkpoint), **metrics}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

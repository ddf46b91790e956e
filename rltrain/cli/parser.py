"""The ``rltrain`` command line: its subcommands, options and the hint for other tools' flags."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXAMPLES = """\
examples:
  rltrain fit                        # DQN on CartPole-v1 until solved (configs/dqn_cartpole.yaml)
  rltrain fit configs/dqn_cartpole.yaml trainer.num_steps=20000 agent.lr=1e-3
  rltrain fit dqn_cartpole strategy.seed=3 trainer.run_dir=runs/cartpole-3
  rltrain fit dqn_cartpole trainer.dtype=bfloat16 --print-config
  rltrain fit --resume runs/cartpole-3 trainer.num_steps=80000   # continue a run exactly
  rltrain fit ppo_cartpole --seeds 0-9 --jobs 2 trainer.run_dir=runs/ppo-seeds
  rltrain evaluate runs/cartpole-3 --episodes 20
  rltrain list
  rltrain plot runs/cartpole-1 runs/cartpole-2 runs/cartpole-3 --out curves.png
  rltrain compare runs/dqn-seeds runs/ppo-seeds --out report.md --out report.png
  rltrain tune ppo_cartpole --trials 20 --study studies/ppo-cartpole --jobs 2
  tensorboard --logdir runs
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``rltrain`` command."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="rltrain", description="Train and evaluate reinforcement-learning agents.",
        epilog=EXAMPLES, formatter_class=formatter)
    parser.add_argument("--traceback", action="store_true",
                        help="on an error, show Python's traceback instead of one line")
    commands = parser.add_subparsers(dest="command", required=True)

    fit = commands.add_parser(
        "fit", help="train an agent from YAML configs and key=value overrides",
        description="Train an agent. Configs merge left to right onto the defaults, then the "
                    "key=value overrides apply (dotted keys: trainer.*, env.*, strategy.*, "
                    "agent.*). The whole config is saved as RUN_DIR/config.yaml, in every "
                    "checkpoint and as TensorBoard hyperparameters.",
        epilog=EXAMPLES, formatter_class=formatter)
    fit.add_argument("args", nargs="*", metavar="CONFIG.yaml | key=value",
                     help="config files (a shipped one by name, e.g. dqn_cartpole; default: "
                          "the preset tuned for the named env.id and agent, the agent's own "
                          "defaults for an env no preset is tuned for, or the agent's default "
                          "preset, e.g. ppo_cartpole for agent.name=ppo) and overrides such as "
                          "agent.lr=1e-3")
    fit.add_argument("--print-config", action="store_true",
                     help="print the composed, validated config and exit")
    fit.add_argument("--resume", default=None, metavar="RUN_DIR|CHECKPOINT|last|best",
                     help="continue a run exactly: a run directory (its last checkpoint), a "
                          "checkpoint file, or last/best of trainer.run_dir. The run's saved "
                          "config applies; overrides may change num_steps, logging, evaluation "
                          "and checkpoint settings")
    fit.add_argument("--seeds", default=None, metavar="SEEDS",
                     help="train one run per seed (0-9, 0,3,5) under trainer.run_dir, each in "
                          "its own process; --resume PARENT continues the unfinished ones")
    fit.add_argument("--jobs", type=int, default=1, metavar="N",
                     help="with --seeds: seeds trained at once (default 1)")
    add_launcher(fit, "with --seeds or --resume PARENT: where the seeds run")
    fit.add_argument("--no-preset", action="store_true",
                     help="without a config file, start from the agent's own defaults instead "
                          "of a shipped preset")
    fit.add_argument("--overwrite", action="store_true",
                     help="replace the run already in trainer.run_dir (its checkpoints and logs)")
    add_trust(fit)
    add_import(fit)

    evaluate = commands.add_parser(
        "evaluate", help="run greedy episodes of a trained agent",
        epilog=EXAMPLES, formatter_class=formatter)
    evaluate.add_argument("path", type=Path, metavar="RUN_DIR|CHECKPOINT",
                          help="a run directory (its last checkpoint) or a checkpoint file")
    evaluate.add_argument("--episodes", type=int, default=None,
                          help="episodes to run (default: the run's eval_episodes)")
    evaluate.add_argument("--seed", type=int, default=None,
                          help="reset seed (default: the run's evaluation seed, which "
                               "reproduces the run's evaluation returns)")
    evaluate.add_argument("overrides", nargs="*", metavar="key=value",
                          help="settings to change, e.g. env.kwargs.render_mode=rgb_array, or "
                               "the env of a run that could not record it "
                               "(env._target_=my_envs.make_env)")
    evaluate.add_argument("--checkpoint", choices=("last", "best"), default="last",
                          help="which checkpoint of a RUN_DIR to evaluate (default: last)")
    evaluate.add_argument("--video", type=Path, default=None, metavar="DIR",
                          help="record the episodes of evaluation sub-env 0 as MP4 files in "
                               "DIR (pip install 'rltrain[video]')")
    add_trust(evaluate)
    add_import(evaluate)

    export = commands.add_parser(
        "export", help="write a trained policy as a torch.export file that runs without rltrain",
        epilog=EXAMPLES, formatter_class=formatter)
    export.add_argument("path", type=Path, metavar="RUN_DIR|CHECKPOINT")
    export.add_argument("out", type=Path, metavar="OUT.pt2")
    export.add_argument("--checkpoint", choices=("last", "best"), default="last",
                        help="which checkpoint of a RUN_DIR to export (default: last)")
    add_trust(export)
    add_import(export)

    add_import(commands.add_parser("list", help="list agents, strategies and shipped configs",
                                   epilog=EXAMPLES, formatter_class=formatter))
    add_plot_parser(commands)
    add_compare_parser(commands)
    add_tune_parser(commands)
    return parser


def add_plot_parser(commands: Any) -> None:
    """The ``plot`` subcommand's options (:func:`plot`)."""
    plot_parser = commands.add_parser(
        "plot", help="draw learning curves of run directories (mean and spread over seeds)",
        description="Evaluation return against env steps or wall time, from each run's "
                    "metrics.jsonl; runs whose config.yaml differ only in strategy.seed and "
                    "trainer.run_dir are one group (mean line, spread band). Needs "
                    "pip install 'rltrain[plot]'.")
    plot_parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                             help="run directories, or folders of run directories")
    plot_parser.add_argument("--out", type=Path, default=Path("learning_curves.png"),
                             metavar="FILE", help="a .png, .svg or .pdf file (default: "
                                                  "learning_curves.png)")
    plot_parser.add_argument("--x", choices=("env_steps", "wall_time"), default="env_steps",
                             dest="axis", help="the x axis (default: env_steps)")
    plot_parser.add_argument("--spread", choices=("minmax", "std"), default="minmax",
                             help="the band around the mean: min-max over seeds or ± one "
                                  "standard deviation (default: minmax)")
    plot_parser.add_argument("--size", default="800x500", metavar="WxH",
                             help="image size in pixels (default: 800x500)")
    plot_parser.add_argument("--title", default=None, help="a title above the plot")


def add_compare_parser(commands: Any) -> None:
    """The ``compare`` subcommand's options (:mod:`rltrain.cli.compare`)."""
    compare = commands.add_parser(
        "compare", help="statistics over seeds: IQM with bootstrap CIs, probability of "
                        "improvement, performance profiles, steps and seconds to a threshold",
        description="Groups runs as plot does (configs that differ only in seed) and reports, "
                    "per group, the final and best returns' IQM, mean and median with 95%% "
                    "stratified-bootstrap CIs, the probability of improvement over each other "
                    "group, performance profiles, and env steps and seconds to the threshold "
                    "(runs that never reach it censored, Kaplan-Meier). Needs pip install "
                    "'rltrain[stats]' (and 'rltrain[plot]' for a figure).")
    compare.add_argument("runs", nargs="+", type=Path, metavar="RUN_OR_PARENT",
                         help="run directories, or folders of them (a --seeds parent)")
    compare.add_argument("--metric", choices=("final", "best"), default="final",
                         help="the return the improvement probabilities and profiles use: "
                              "each run's last or best evaluation (default: final)")
    compare.add_argument("--threshold", type=finite_float, default=None, metavar="R",
                         help="the return of 'steps to threshold' (default: the runs' shared "
                              "trainer.return_threshold)")
    compare.add_argument("--out", type=Path, action="append", default=[], metavar="FILE",
                         help="write the table (.md) or the figure (.png, .svg, .pdf); "
                              "repeatable")
    compare.add_argument("--reps", type=int, default=2_000,
                         help="bootstrap samples of each interval (default 2000)")
    compare.add_argument("--seed", type=int, default=0,
                         help="seed of the bootstrap samples (default 0)")
    compare.add_argument("--include-unfinished", action="store_true",
                         help="count runs that have not finished (running, killed, stopped by a "
                              "signal) at their last complete evaluation; without it they are "
                              "left out with a warning")


def add_launcher(parser: Any, what: str) -> None:
    """``--launcher``, ``--slurm KEY=VALUE`` and ``--wait`` (:mod:`rltrain.cli.launchers`)."""
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help=f"{what}: processes of this command (local, default) or Slurm jobs "
                             "submitted through submitit (pip install 'rltrain[cluster]')")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="a Slurm setting of the jobs: partition, time (minutes, default "
                             "1440), cpus_per_task, mem, gpus_per_node, account, qos, "
                             "constraint, exclude, nodelist, comment, setup")
    parser.add_argument("--wait", action="store_true",
                        help="with --launcher slurm: return once the jobs ended, not once "
                             "they are queued")


def add_tune_parser(commands: Any) -> None:
    """The ``tune`` subcommand's options (:mod:`rltrain.cli.tune`)."""
    tune = commands.add_parser(
        "tune", help="tune settings with Optuna: each trial an rltrain run, resumable",
        description="An Optuna study (TPE sampling, median pruning on the runs' evaluations) "
                    "stored in STUDY/study.db; each trial is an rltrain fit run in "
                    "STUDY/trial-NNNN. Run the same command again to continue a killed study: "
                    "interrupted trials resume from their last checkpoint. The best trial's "
                    "config is written to STUDY/best.yaml. Needs pip install "
                    "'rltrain[tune]'.")
    tune.add_argument("args", nargs="*", metavar="CONFIG.yaml | key=value",
                      help="the config and overrides every trial starts from (as for fit); "
                           "omit them to continue a study")
    tune.add_argument("--study", type=Path, required=True, metavar="DIR",
                      help="the study's folder (created, or continued)")
    tune.add_argument("--trials", type=int, default=None, metavar="N",
                      help="finished trials (completed or pruned) to reach, counting those "
                           "of earlier sessions (default 20, or the study's own)")
    tune.add_argument("--space", type=Path, default=None, metavar="SPACE.yaml",
                      help="the search space (default: CONFIG.space.yaml or space.yaml beside "
                           "the config, or the one shipped for the agent)")
    tune.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="trials run at once, each its own process (default 1)")
    tune.add_argument("--storage", default=None, metavar="URL",
                      help="where the trials are recorded, for workers on several machines: an "
                           "Optuna database URL (postgresql://USER:PASSWORD@HOST/DB) or "
                           "journal:PATH (a file on a shared filesystem); given to every "
                           "worker (default: STUDY/study.db, SQLite, for one machine)")
    tune.add_argument("--heartbeat", type=int, default=None, metavar="SECONDS",
                      help="a new study's heartbeat: a trial whose worker missed three is "
                           "taken over by another worker (default 10)")
    add_launcher(tune, "where the study's workers run")
    tune.add_argument("--workers", type=int, default=1, metavar="N",
                      help="with --launcher slurm: worker jobs submitted, each running "
                           "--jobs trials at once (default 1)")
    tune.add_argument("--objective", choices=("auc", "final", "best"), default=None,
                      help="what a trial maximises: the mean of its evaluation returns "
                           "(auc, default: rewards learning early), the last, or the best")
    tune.add_argument("--no-pruning", action="store_true",
                      help="run every trial to its end")
    tune.add_argument("--prune-after", type=int, default=5, metavar="N",
                      help="trials finished before the median pruner stops any (default 5)")
    add_trust(tune)
    add_import(tune)


#: Flags of the old command line and of other tools, and the override that says the same here
#: (docs/configs.md lists them).
FLAG_KEYS = {
    **dict.fromkeys(("--steps", "--num-steps", "--total-timesteps", "--n-timesteps",
                     "--timesteps"), "trainer.num_steps=N"),
    "--seed": "strategy.seed=S", "--env": "env.id=ID", "--env-id": "env.id=ID",
    "--algo": "agent.name=NAME", "--agent": "agent.name=NAME", "--lr": "agent.lr=LR",
    "--learning-rate": "agent.lr=LR", "--device": "trainer.device=D",
    **dict.fromkeys(("--run-dir", "--log-dir", "--logdir"), "trainer.run_dir=DIR"),
    "--num-envs": "strategy.num_envs=N", "--n-envs": "strategy.num_envs=N",
    "--batch-size": "strategy.batch_size=N", "--eval-episodes": "trainer.eval_episodes=N",
    "--threads": "trainer.num_threads=N", "--target-return": "trainer.return_threshold=R",
    "--no-early-stop": "trainer.return_threshold=null",
    "--no-tqdm": "trainer.enable_progress_bar=false",
    "--no-console": "trainer.enable_console=false", "--no-tensorboard": "trainer.logger=false",
    "--no-jsonl": "trainer.enable_metrics_file=false",
}


def add_trust(parser: argparse.ArgumentParser) -> None:
    """The ``--trust MODULE`` option of the commands that rebuild a stored run."""
    parser.add_argument(
        "--trust", action="append", default=[], metavar="MODULE",
        help="a module a stored config (a run's, a group's or a study's) may import and name "
             "any function of (repeatable; the current directory is searched for it); without "
             "it, a stored config may name only env, wrapper, agent and strategy classes of "
             "rltrain, Gymnasium and packages that register environments")


def add_import(parser: argparse.ArgumentParser) -> None:
    """The ``--import MODULE`` option: modules imported first, where agents and strategies of
    your own register themselves (:mod:`rltrain.settings.registry`)."""
    parser.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="a module to import first (repeatable; the current directory is searched): your "
             "own agents and strategies register themselves there, e.g. --import my_agents "
             "agent.name=my_agent; a stored config may then name its classes")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with a hint for flags other tools use (``--steps``: write
    ``trainer.num_steps=N``); configs and overrides may come before or after the flags."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    words = getattr(args, "args", getattr(args, "overrides", None))
    if words is not None:  # configs and key=value overrides anywhere, after flags too
        words += [word for word in unknown if not word.startswith("-")]
        unknown = [word for word in unknown if word.startswith("-")]
    if unknown:
        flag = unknown[0].partition("=")[0]
        key = FLAG_KEYS.get(flag)
        hint = (f" Settings are key=value overrides here: write {key}." if key else
                " Settings are key=value overrides (rltrain fit --print-config shows them).")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}.{hint}")
    return args


def finite_float(text: str) -> float:
    """A command-line number that is finite (a return threshold of nan or inf compares with
    nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number; got {text}")
    return value

"""The ``rltrain`` command: ``fit`` trains from configs, ``evaluate`` replays a trained agent,
``list`` shows what can be configured, ``plot`` draws learning curves."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint import Checkpointer, LoadedCheckpoint
from rltrain.config.presets import choose_preset
from rltrain.config.schema import (
    AGENTS,
    SHIPPED_CONFIGS,
    STRATEGIES,
    ConfigError,
    compose,
    literal_config,
    load_stored,
    parse_overrides,
    shipped_configs,
    validate,
)
from rltrain.config.targets import TRUSTED, Trust, within
from rltrain.envs.make import SubEnvError
from rltrain.errors import TrainingError
from rltrain.inference import export_policy
from rltrain.inference.policy import resolve as resolve_checkpoint
from rltrain.optim import ended_on_refused_loss
from rltrain.runtime.distributed import DistributedError, launched
from rltrain.runtime.seeding import derive_seeds
from rltrain.trainer import build

#: Exit statuses: bad input found before training (a config, an environment, a checkpoint, a
#: run directory), training that failed part-way, and an unexpected error (a bug).
EXIT_BAD_INPUT, EXIT_TRAINING_FAILED, EXIT_INTERNAL_ERROR = 2, 3, 1

EXAMPLES = """\
examples:
  rltrain fit                        # DQN on CartPole-v1 until solved (configs/dqn_cartpole.yaml)
  rltrain fit configs/dqn_cartpole.yaml trainer.num_steps=20000 agent.lr=1e-3
  rltrain fit dqn_cartpole strategy.seed=3 trainer.run_dir=runs/cartpole-3
  rltrain fit dqn_cartpole trainer.dtype=bfloat16 --print-config
  rltrain fit --resume runs/cartpole-3 trainer.num_steps=80000   # continue a run exactly
  rltrain evaluate runs/cartpole-3 --episodes 20
  rltrain list
  rltrain plot runs/cartpole-1 runs/cartpole-2 runs/cartpole-3 --out curves.png
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
    fit.add_argument("--no-preset", action="store_true",
                     help="without a config file, start from the agent's own defaults instead "
                          "of a shipped preset")
    fit.add_argument("--overwrite", action="store_true",
                     help="replace the run already in trainer.run_dir (its checkpoints and logs)")
    add_trust(fit)

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

    export = commands.add_parser(
        "export", help="write a trained policy as a torch.export file that runs without rltrain",
        epilog=EXAMPLES, formatter_class=formatter)
    export.add_argument("path", type=Path, metavar="RUN_DIR|CHECKPOINT")
    export.add_argument("out", type=Path, metavar="OUT.pt2")
    export.add_argument("--checkpoint", choices=("last", "best"), default="last",
                        help="which checkpoint of a RUN_DIR to export (default: last)")
    add_trust(export)

    commands.add_parser("list", help="list agents, strategies and shipped configs",
                        epilog=EXAMPLES, formatter_class=formatter)
    add_plot_parser(commands)
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
        help="a module whose functions a run directory's stored config may name (repeatable); "
             "without it, a stored config may name only env, wrapper, agent and strategy "
             "classes, from outside the run directory")


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rltrain`` console script; returns the exit status: 0, or
    :data:`EXIT_BAD_INPUT` (2), :data:`EXIT_TRAINING_FAILED` (3), :data:`EXIT_INTERNAL_ERROR`
    (1), each with a one-line message (``--traceback`` shows Python's traceback instead)."""
    args = parse_args(argv)
    try:
        with warnings_as_lines():
            return run_command(args)
    except Exception as error:
        if args.traceback:
            raise
        return report(error)
    except KeyboardInterrupt as abort:
        kept = str(abort)  # from fit: what the run leaves (Trainer._fit); else nothing ran
        say(f"rltrain: aborted (a second Ctrl-C); {kept}." if kept else "rltrain: aborted.")
        return 130


def run_command(args: argparse.Namespace) -> int:
    """The subcommand ``args`` names. Modules in the current directory can be named by import
    path (``env._target_=my_envs.Corridor``), as under ``python -m``; installed ones win."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    if args.command == "fit":
        return fit(args)
    if args.command == "evaluate":
        return evaluate(args)
    if args.command == "plot":
        return plot(args)
    if args.command == "export":
        return export_command(args)
    return list_registered()


def export_command(args: argparse.Namespace) -> int:
    """``rltrain export``: the run's policy as a ``torch.export`` file (docs/inference.md)."""
    out = export_policy(args.path, args.out, which=args.checkpoint, trust=args.trust)
    print(f"exported: {out}")
    return 0


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """Python warnings shown as ``rltrain: warning: ...`` lines on stderr, each once."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        say(f"rltrain: warning: {message}")

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


def say(line: str) -> None:
    """Write ``line`` and its newline to stderr in one call, so that the lines of processes
    sharing the stream (the ranks under ``torchrun``) never run into one another."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def report(error: Exception) -> int:
    """Print ``error`` as one message on stderr; returns the exit status it calls for."""
    who = rank_tag()
    if isinstance(error, TrainingError):
        say(f"rltrain: {who}training failed: {error}")
        return EXIT_TRAINING_FAILED
    if isinstance(error, SubEnvError):  # while evaluating: the environment's failure
        say(f"rltrain: {who}the environment failed: {error}")
        return EXIT_TRAINING_FAILED
    if isinstance(error, DistributedError):  # another rank's failure, which it reports
        say(f"rltrain: {who}stopped: {error}")
        return EXIT_TRAINING_FAILED
    if isinstance(error, (ValueError, OSError, MemoryError, ImportError)):
        say(f"rltrain: {who}error: {error}")
        return EXIT_BAD_INPUT
    say(f"rltrain: {who}internal error: {type(error).__name__}: {error}. This is a bug in "
        "rltrain or in code it called (an environment, an agent, a callback); rerun with "
        "rltrain --traceback ... to see where, and report it.")
    return EXIT_INTERNAL_ERROR


def rank_tag() -> str:
    """``"rank R/N: "`` under torchrun (each rank reports its own error, so the lines say whose
    they are), else nothing."""
    if not launched():
        return ""
    return f"rank {os.environ.get('RANK', '?')}/{os.environ.get('WORLD_SIZE', '?')}: "


def fit(args: argparse.Namespace) -> int:
    """``rltrain fit``: compose the config, train, then print where the run is stored."""
    files = [a for a in args.args if "=" not in a]
    overrides = [a for a in args.args if "=" in a]
    ckpt_path: str | LoadedCheckpoint | None = None
    if args.resume is not None:
        if files:
            raise ValueError("--resume continues a run with its own saved config; pass only "
                             f"key=value overrides, not {', '.join(files)}.")
        config, ckpt_path = resumed_config(args.resume, overrides)
        trust = stored_trust(Path(str(config.trainer.run_dir)), args.trust, overrides)
    else:
        if not files:
            choice = choose_preset(overrides, use_presets=not args.no_preset)
            files = choice.files
            print(f"# {choice.note}" if args.print_config else f"rltrain: {choice.note}")
        config, trust = compose(files, overrides), TRUSTED
    if args.overwrite:
        config.trainer.overwrite = True
    if args.print_config:
        print(OmegaConf.to_yaml(config), end="")
        return 0
    run = build(config, trust)
    summary = run.fit(ckpt_path=ckpt_path).summary
    refused = ended_on_refused_loss(summary.stop_reason)  # a failed run, on every rank
    if not run.trainer.distributed.is_main:  # under torchrun, rank 0 reports the run
        return EXIT_TRAINING_FAILED if refused else 0
    print(f"run directory: {run.trainer.last_run_dir}")
    final = summary.final_metrics.get("eval/return_mean")
    if final is not None:
        print(f"final evaluation return: {final:.2f}")
    if refused:
        say(f"rltrain: training stopped: {summary.stop_reason}")
        return EXIT_TRAINING_FAILED
    return 0


def resumed_config(resume: str, overrides: list[str]
                   ) -> tuple[DictConfig, str | LoadedCheckpoint]:
    """The saved config of the run ``--resume`` names, with ``overrides`` applied, and the
    checkpoint to resume from (``"last"``, ``"best"``, or a file already read for its config,
    so that the resume reads it once)."""
    ckpt_path: str | LoadedCheckpoint
    given = parse_overrides(overrides)
    path = Path(resume)
    if resume in ("last", "best"):
        run_dir = OmegaConf.select(given, "trainer.run_dir")
        if run_dir is None:
            raise ValueError(f"--resume {resume} needs trainer.run_dir=RUN_DIR, the run to "
                             "continue (or pass --resume RUN_DIR).")
        saved, ckpt_path = load_stored(Path(run_dir) / "config.yaml"), resume
    elif path.is_dir():
        saved, ckpt_path = load_stored(path / "config.yaml"), "last"
        saved.trainer.run_dir = str(path)
    elif path.is_file():
        ckpt_path = LoadedCheckpoint.read(path)
        saved = checkpoint_config(path, ckpt_path.state)
        if path.parent.name == "checkpoints":  # the run it belongs to, wherever it was moved
            saved.trainer.run_dir = str(path.parent.parent)
    else:
        raise FileNotFoundError(f"Nothing to resume at {path}: pass a run directory, a "
                                "checkpoint file, or last/best with trainer.run_dir=RUN_DIR.")
    with stored_config_errors(path if path.exists() else Path(str(given.trainer.run_dir))):
        config = validate(OmegaConf.merge(saved, given))
    check_stored_paths(saved, given, Path(str(config.trainer.run_dir)))
    return config, ckpt_path


@contextlib.contextmanager
def stored_config_errors(source: Path) -> Iterator[None]:
    """Name ``source`` (a run directory or a checkpoint) in a config error of its stored
    config, so that the message says which file is at fault."""
    try:
        yield
    except ConfigError as error:
        raise ConfigError(f"{source}: its stored config (or an override of it): {error}"
                          ) from None


def check_stored_paths(saved: DictConfig, given: DictConfig, run_dir: Path) -> None:
    """Refuse a stored config whose checkpoint or log folder lies outside its run directory
    unless the command line names that folder too: what a run directory says is untrusted, and
    must not make rltrain write elsewhere."""
    for key in ("trainer.checkpoint_dir", "trainer.logger"):
        stored = OmegaConf.select(saved, key)
        if not isinstance(stored, str) or OmegaConf.select(given, key) is not None:
            continue
        folder = Path(stored) if Path(stored).is_absolute() else Path.cwd() / stored
        if not within(folder, run_dir):
            raise ConfigError(
                f"The run's saved config sets {key}={stored}, outside the run directory "
                f"{run_dir}. A run directory's files are untrusted: confirm that folder on the "
                f"command line ({key}={stored}) or choose another.")


def checkpoint_config(checkpoint: Path, state: dict[str, Any] | None = None) -> DictConfig:
    """The run config stored in ``checkpoint`` (or, for older files, in its run directory);
    ``state``: what the file holds, when it was read already."""
    stored = (state if state is not None else Checkpointer.load(checkpoint)).get("config")
    if isinstance(stored, dict) and stored:
        return literal_config(stored)
    return load_stored(checkpoint.parent.parent / "config.yaml")


def evaluate(args: argparse.Namespace) -> int:
    """``rltrain evaluate``: load a run's agent and print its evaluation metrics as JSON."""
    confirmed = OmegaConf.select(parse_overrides(args.overrides), "trainer.checkpoint_dir")
    if confirmed is not None and args.path.is_dir():  # the user's word for a folder elsewhere
        checkpoint, run_dir = Checkpointer(Path(str(confirmed))).resolve(args.checkpoint), args.path
    else:
        checkpoint, run_dir = resolve_checkpoint(args.path, args.checkpoint)
    with stored_config_errors(checkpoint):
        config = with_overrides(checkpoint_config(checkpoint), args.overrides)
    seed, extra = args.seed, dict[str, Any]()
    if "unrecorded" in config.strategy:  # a strategy from a script: only its seed matters here
        extra["strategy"] = None
        seed = seed if seed is not None else derive_seeds(
            int(config.strategy.get("seed", 0))).evaluation
    run = build(config, stored_trust(run_dir, args.trust, args.overrides), logger=False,
                enable_progress_bar=False, enable_console=False, enable_metrics_file=False,
                **extra)
    metrics = run.evaluate(ckpt_path=checkpoint, episodes=args.episodes, seed=seed,
                           video_dir=args.video)
    print(json.dumps({"checkpoint": str(checkpoint), **metrics}, indent=2))
    return 0


def stored_trust(run_dir: Path, trusted: list[str], overrides: list[str]) -> Trust:
    """What a config read from ``run_dir`` may name: classes of the expected kind, plus any
    callable of the modules given by ``--trust`` or named in the command line's
    ``overrides`` (the user's own words)."""
    named = [module for value in _targets(OmegaConf.to_container(parse_overrides(overrides)))
             for module in [value.partition(":")[0] if ":" in value
                            else value.rpartition(".")[0]] if module]
    return Trust(stored_in=run_dir, modules=[*trusted, *named])


def _targets(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                yield value
            else:
                yield from _targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from _targets(value)


def with_overrides(stored: DictConfig, overrides: list[str]) -> DictConfig:
    """A stored config with the command line's ``overrides``; an ``env`` given there replaces
    a stored env that could not be recorded."""
    given = parse_overrides(overrides)
    if "env" in given and OmegaConf.select(stored, "env.unrecorded") is not None:
        stored.env = {}
    return validate(OmegaConf.merge(stored, given))


def plot(args: argparse.Namespace) -> int:
    """``rltrain plot``: draw the runs' learning curves (:mod:`rltrain.cli.plot`) and print each
    group with its final mean return."""
    from rltrain.cli.plot import plot_runs

    width, _, height = str(args.size).lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ValueError(f"--size must be WIDTHxHEIGHT in pixels, e.g. 800x500; got "
                         f"{args.size!r}.")
    groups = plot_runs(args.runs, args.out, axis=args.axis, spread=args.spread,
                       size=(int(width), int(height)), title=args.title)
    for group in groups:
        print(f"{group.label}: final evaluation return {group.mean[-1]:.2f} "
              f"(min {group.min[-1]:.2f}, max {group.max[-1]:.2f}) over "
              f"{', '.join(str(run) for run in group.runs)}")
    print(f"wrote {args.out}")
    return 0


def list_registered() -> int:
    """``rltrain list``: the agents, strategies and shipped configs a config can name."""
    print("agents (agent.name):")
    for name, entry in AGENTS.items():
        print(f"  {name:<12} {entry.summary} [{entry.config.__name__}]")
    print("strategies (strategy.name):")
    for name, entry in STRATEGIES.items():
        print(f"  {name:<12} {entry.summary} [{entry.config.__name__}]")
    print(f"shipped configs ({SHIPPED_CONFIGS}):")
    for name in shipped_configs():
        first = (SHIPPED_CONFIGS / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
        print(f"  {name:<12} {first.lstrip('# ')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

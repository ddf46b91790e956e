"""The ``rltrain`` command: ``fit`` trains from configs, ``evaluate`` replays a trained agent,
``list`` shows what can be configured, ``plot``, ``compare`` and ``tune`` run experiments
(:mod:`rltrain.cli.analysis`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint import Checkpointer, LoadedCheckpoint
from rltrain.cli.analysis import ANALYSES
from rltrain.cli.launchers import make_launcher
from rltrain.cli.parser import parse_args
from rltrain.cli.processes import confirmations
from rltrain.cli.seeds import MANIFEST, launch, parent_of, parse_seeds, resume_group
from rltrain.cli.stored_run import (
    STORED_FOLDERS,
    checkpoint_config,
    checkpoint_folder,
    resumed_config,
    stored_config_errors,
)
from rltrain.config.files import (
    SHIPPED_CONFIGS,
    parse_overrides,
    shipped_configs,
)
from rltrain.config.instantiate import named_modules
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose, validate, zoo_note
from rltrain.envs.errors import SubEnvError
from rltrain.errors import TrainingError
from rltrain.inference import export_policy
from rltrain.inference.policy import resolve as resolve_checkpoint
from rltrain.optim import ended_on_refused_loss
from rltrain.runtime.distributed import DistributedError, exit_process, launched
from rltrain.runtime.seeding import derive_seeds
from rltrain.settings.registry import AGENTS, STRATEGIES, load_plugins
from rltrain.settings.search_path import isolate
from rltrain.settings.targets import TRUSTED, Trust, import_modules
from rltrain.trainer import build
from rltrain.trainer.run_dir import not_started

#: Exit statuses: bad input found before training (a config, an environment, a checkpoint, a
#: run directory), training that failed part-way, and an unexpected error (a bug).
EXIT_BAD_INPUT, EXIT_TRAINING_FAILED, EXIT_INTERNAL_ERROR = 2, 3, 1

def console() -> None:
    """The ``rltrain`` console script and ``python -m rltrain.cli``: :func:`main`, then exit
    with its status (:func:`~rltrain.runtime.distributed.exit_process`: every file the run
    writes is closed by then)."""
    exit_process(main())


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
    """The subcommand ``args`` names. A module in the current directory can be named by import
    path on the command line or in the user's own config files (``env._target_=my_envs.Corridor``),
    and installed ones win; nothing read from a file reaches the current directory
    (:mod:`rltrain.settings.search_path`)."""
    isolate()
    import_modules(getattr(args, "imports", []), what="--import")
    if args.command == "fit":
        return fit(args)
    if args.command == "evaluate":
        return evaluate(args)
    if args.command in ANALYSES:
        return ANALYSES[args.command](args)
    if args.command == "export":
        return export_command(args)
    return list_registered()


def export_command(args: argparse.Namespace) -> int:
    """``rltrain export``: the run's policy as a ``torch.export`` file (docs/inference.md)."""
    out = export_policy(args.path, args.out, which=args.checkpoint,
                        trust=[*args.trust, *args.imports])
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
    if isinstance(error, TrainingError):  # its message starts "Training failed after ..."
        text = str(error)
        say(f"rltrain: {who}{text}" if text.startswith("Training failed")
            else f"rltrain: {who}training failed: {text}")
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
    if args.resume is not None and (Path(args.resume) / MANIFEST).is_file():
        per_seed = [o for o in overrides if o.startswith(("strategy.seed=", "trainer.run_dir="))]
        if files or args.seeds is not None or per_seed:
            raise ValueError(f"--resume {args.resume} continues a group of seeds as it was "
                             "recorded, each seed in its own run directory; pass only key=value "
                             "overrides of the other settings (and --trust, --import).")
        return resume_group(Path(args.resume), overrides,
                            confirmations(args.trust, args.imports),
                            make_launcher(args.launcher, args.slurm), wait_for=args.wait)
    if args.seeds is not None:
        return fit_seeds(args, files, overrides)
    if args.launcher != "local" or args.slurm or args.wait:
        raise ValueError("--launcher, --slurm and --wait run a group of seeds: give --seeds, "
                         "or --resume PARENT of a group.")
    if args.jobs != 1:
        raise ValueError(f"--jobs {args.jobs} runs that many seeds of a group at once: give "
                         "--seeds (e.g. --seeds 0-4). One run's cores are "
                         "trainer.num_threads=N.")
    if args.resume is not None:
        if files:
            raise ValueError("--resume continues a run with its own saved config; pass only "
                             f"key=value overrides, not {', '.join(files)}.")
        config, ckpt_path = resumed_config(args.resume, overrides)
        run_dir = Path(str(config.trainer.run_dir))
        trust = stored_trust(run_dir, [*args.trust, *args.imports], overrides)
        if ckpt_path == "last" and not_started(run_dir, checkpoint_folder(config)):
            print(f"rltrain: {run_dir} holds no checkpoint yet: its run starts from its "
                  "stored config")
            ckpt_path = None
    else:
        choice = None if files else choose_preset(overrides, use_presets=not args.no_preset)
        if choice is not None:
            files = choice.files
        config, trust = compose(files, overrides), TRUSTED
        notes = [choice.note] if choice is not None else []  # said once the config is valid
        notes += [zoo_note(name) for name in files if name.startswith("zoo:")]
        for note in notes:
            print(f"# {note}" if args.print_config else f"rltrain: {note}")
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
    last = summary.final_metrics.get("eval/return_mean")
    signalled = (summary.stop_reason or "").endswith("received")  # Ctrl-C, SIGTERM
    if last is not None:  # no evaluation runs at such a stop: the return is an earlier one's
        print(f"last evaluation return: {last:.2f} (from before the stop: a run stopped by "
              "a signal is not evaluated)" if signalled else
              f"final evaluation return: {last:.2f}")
    if refused:
        say(f"rltrain: training stopped: {summary.stop_reason}")
        return EXIT_TRAINING_FAILED
    return 0


def fit_seeds(args: argparse.Namespace, files: list[str], overrides: list[str]) -> int:
    """``rltrain fit ... --seeds SEEDS --jobs N``: the config checked here first, then one
    ``rltrain fit`` process per seed (:mod:`rltrain.cli.seeds`)."""
    if args.resume is not None or args.print_config or args.overwrite:
        raise ValueError("--seeds starts a group of runs: continue one with --resume PARENT "
                         "alone; --print-config and --overwrite apply to one run.")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1; got {args.jobs}.")
    chosen = parse_seeds(args.seeds)
    if not files:
        choice = choose_preset(overrides, use_presets=not args.no_preset)
        files = choice.files
        print(f"rltrain: {choice.note}")
    config = compose(files, overrides)
    parent = parent_of(config)
    folders = [o for o in overrides if o.startswith(tuple(f"{k}=" for k in STORED_FOLDERS))]
    launcher = make_launcher(args.launcher, args.slurm)
    return launch(config, chosen, args.jobs, parent,
                  confirmations(args.trust, args.imports, named_modules(config)), folders,
                  launcher, wait_for=args.wait)


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
    run = build(config, stored_trust(run_dir, [*args.trust, *args.imports], args.overrides),
                logger=False,
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
    named = named_modules(parse_overrides(overrides), every=True)
    return Trust(stored_in=run_dir, modules=[*trusted, *named])


def with_overrides(stored: DictConfig, overrides: list[str]) -> DictConfig:
    """A stored config with the command line's ``overrides``; an ``env`` given there replaces
    a stored env that could not be recorded."""
    given = parse_overrides(overrides)
    if "env" in given and OmegaConf.select(stored, "env.unrecorded") is not None:
        stored.env = {}
    return validate(OmegaConf.merge(stored, given))


def list_registered() -> int:
    """``rltrain list``: the agents, strategies and shipped configs a config can name."""
    load_plugins()
    print("agents (agent.name):")
    for name, entry in AGENTS.items():
        print(f"  {name:<12} {entry.summary} [{entry.config.__name__}]")
    print("strategies (strategy.name):")
    for name, entry in STRATEGIES.items():
        print(f"  {name:<12} {entry.summary} [{entry.config.__name__}]")
    print(f"shipped configs ({SHIPPED_CONFIGS}):")
    names = shipped_configs()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"  {name:<{width}} {first_sentence(SHIPPED_CONFIGS / f'{name}.yaml')}")
    return 0


def first_sentence(config: Path, width: int = 100) -> str:
    """A shipped config's leading comment (which runs over lines) up to its first full stop or
    semicolon outside brackets; when that is wider than ``width``, up to its first colon."""
    lines = []
    for line in config.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    text = ""
    for part in filter(None, lines):  # a dotted name wrapped after its dot joins unspaced
        wrapped = re.search(r"[A-Za-z_]\w+(\.[A-Za-z_]\w+)+\.$", text)
        text += part if wrapped else f" {part}"
    text = text.strip()
    sentence = _up_to(text, ".;")
    return sentence if len(sentence) <= width else _up_to(sentence, ":")


def _up_to(text: str, stops: str) -> str:
    """``text`` up to the first of ``stops`` outside brackets and before a space (or the end),
    ended with a full stop."""
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        if depth == 0 and char in stops and text[i + 1:i + 2] in ("", " "):
            return text[:i] + "."
    return text


if __name__ == "__main__":
    raise SystemExit(main())

"""``rltrain tune CONFIG --trials N --study DIR``: an Optuna study whose trials are rltrain runs.

- The study folder holds ``tune.json`` (the composed config, search space,
  objective), ``study.db`` (Optuna's SQLite storage), one run directory per trial
  (``trial-NNNN``, its output in ``trial-NNNN.log``) and ``best.yaml``, the best trial's config,
  which ``rltrain fit`` takes.
- Settings are sampled by TPE from the search space (:mod:`rltrain.cli.tune_space`); each trial
  is an ``rltrain fit`` process, ``--jobs`` at a time, with ``cores / jobs`` torch threads.
- While a trial runs, each of its evaluations is reported to Optuna (step: the evaluation's
  number, env steps over ``trainer.eval_interval``); the median pruner stops a trial whose
  best evaluation so far is below the median of the completed trials' at the same step, once
  ``--prune-after`` trials (default 5) have finished and after the first third of the run's
  evaluations (RL-Zoo's warm-up). A pruned trial is stopped
  with SIGINT: it saves a checkpoint and ends.
- The objective is maximised: ``auc`` (default) is the mean of the run's complete
  evaluations, a run that stopped early on ``trainer.return_threshold`` counting its final
  return again for each evaluation interval of the budget it did not reach, so solving sooner
  scores higher; ``final`` is the last evaluation, ``best`` the highest. An evaluation a stop
  request cut short is neither reported nor scored.
- Several workers may run one study: ``rltrain tune --study DIR`` started anywhere that sees the
  study folder (and, with ``--storage URL``, the shared database) joins it and takes the next
  trials, up to ``--trials`` in all. A worker runs until every trial is done, so that it can
  take over the trials of one that dies (:mod:`rltrain.cli.study_storage`): such a trial
  resumes its run directory from its last checkpoint, its reported evaluations kept; it
  restarts only when it died before its first checkpoint (a run of
  ``trainer.checkpoint_interval`` env steps, ``trainer.eval_interval`` when the config sets
  none). A worker stopped with Ctrl-C hands its trials back at once; running the command again
  continues the study.
- A trial whose own process is killed (the OOM killer, SIGKILL) resumes the same way at once,
  up to :data:`~rltrain.cli.tune_worker.MAX_RETRIES` times per command; one killed after it
  finished keeps its result.
  A trial that fails (an error, a refused config) is recorded failed.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from rltrain.cli.launchers import Launcher, make_launcher, wait
from rltrain.cli.processes import (
    RLTRAIN,
    confirmations,
)
from rltrain.cli.study_storage import (
    DEFAULT_STORAGE,
    Heartbeats,
    open_storage,
    shown,
    storage_url,
)
from rltrain.cli.tune_record import (
    MAX_HEARTBEAT,
    MAX_JOBS,
    MAX_TRIALS,
    RECORD,
    Setup,
    new_name,
    read_record,
    rewrite,
    write_new,
)
from rltrain.cli.tune_space import parse_space, read_space, space_path
from rltrain.cli.tune_worker import BEST, Tuner
from rltrain.config.instantiate import named_modules
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose, to_container
from rltrain.settings.targets import Trust


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError("rltrain tune needs Optuna: pip install 'rltrain[tune]'.") from error
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # rltrain keeps the heartbeats itself (Optuna warns when ask() is used with them), and uses
    # Optuna's experimental heartbeat and retry on purpose: neither is news to the user.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def tune_command(args: argparse.Namespace) -> int:
    """Start, join or continue the study in ``args.study`` (module docstring). Everything is
    checked before anything is written: a refused command leaves no study behind."""
    optuna = _optuna()
    study_dir: Path = args.study
    _refuse_links(study_dir)
    launcher = make_launcher(args.launcher, args.slurm)
    if launcher is not None and (args.storage is None or args.storage.startswith("sqlite")):
        raise ValueError("--launcher slurm runs workers on several nodes, which need a database "
                         "they share: --storage postgresql://... (or journal:PATH on a shared "
                         "filesystem).")
    if not 1 <= args.workers <= MAX_JOBS:
        raise ValueError(f"--workers must be in [1, {MAX_JOBS}]; got {args.workers}.")
    setup, named, continuing = _setup(args, study_dir)
    dimensions = parse_space(setup.space, f"search space of {study_dir}", setup.compose)
    url = storage_url(study_dir, args.storage)
    study_dir.mkdir(parents=True, exist_ok=True)
    study = _study(optuna, url, setup, continuing)
    if not continuing and not write_new(study_dir / RECORD, setup):
        print(f"rltrain: {study_dir} was started by another worker meanwhile; joining it",
              flush=True)
        return tune_command(args)
    if continuing:
        rewrite(study_dir / RECORD, setup)
    passthrough = confirmations(args.trust, args.imports, named)
    if launcher is not None:
        return submit_workers(launcher, args, study_dir, passthrough)
    trust = Trust(stored_in=study_dir, modules=[*args.trust, *args.imports, *named])
    heartbeats = Heartbeats(optuna, study, setup.heartbeat, study_dir)
    return Tuner(optuna, study, heartbeats, setup, dimensions, study_dir, passthrough,
                 trust).run()


def submit_workers(launcher: Launcher, args: argparse.Namespace, study_dir: Path,
                   passthrough: list[str]) -> int:
    """Submit ``--workers`` jobs, each an ``rltrain tune`` worker of the study (its output in
    ``STUDY/worker-K.log``); with ``--wait``, return once they ended."""
    folder = study_dir.absolute()
    command = [*RLTRAIN, "tune", *passthrough, "--study", str(folder), "--storage", args.storage]
    if args.jobs is not None:
        command += ["--jobs", str(args.jobs)]
    commands = {str(k): (command, folder / f"worker-{k}.log") for k in range(args.workers)}
    jobs = launcher.submit(commands, folder / "slurm", parallel=args.workers,
                           title="rltrain-tune")
    print(f"rltrain: {len(jobs)} workers of {study_dir} submitted as slurm jobs "
          f"{', '.join(jobs.values())}; their output: {study_dir}/worker-K.log", flush=True)
    if args.wait:
        wait(launcher, list(jobs.values()))
        print(f"rltrain: the workers ended; see the study with rltrain tune --study {study_dir} "
              "--storage URL", flush=True)
    return 0


def _study(optuna: Any, url: str, setup: Setup, continuing: bool) -> Any:
    """The Optuna study in the storage at ``url``: created for a new study, else loaded
    (refused when the storage does not hold it: a study folder's trials must never be
    numbered again from zero)."""
    try:  # Optuna's database is untrusted too: whatever it raises names it
        if continuing and setup.storage is None and not Path(url.removeprefix(
                "sqlite:///")).exists():
            raise KeyError(setup.name)
        storage = open_storage(optuna, url, setup.heartbeat)
        known = len(optuna.load_study(study_name=setup.name, storage=storage).trials) \
            if continuing else 0
        # One worker on one machine samples reproducibly; workers sharing a database each
        # their own sequence, seeded by the OS (a seed made from what the workers know, such
        # as their process ids, can coincide: two workers would sample the same settings).
        seed = known if setup.storage is None else None
        return optuna.create_study(
            study_name=setup.name, storage=storage, load_if_exists=True,
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=(optuna.pruners.MedianPruner(n_startup_trials=setup.prune_after,
                                                 n_warmup_steps=warmup_evaluations(setup))
                    if setup.pruning else optuna.pruners.NopPruner()))
    except KeyError:
        raise ValueError(f"{shown(url)} holds no study {setup.name!r}: give the --storage "
                         "this study was started with.") from None
    except Exception as error:
        raise ValueError(f"{shown(url)} is not a study database rltrain can read: "
                         f"{type(error).__name__}: {str(error).splitlines()[0][:200]}."
                         ) from None


def warmup_evaluations(setup: Setup) -> int:
    """The evaluations a trial makes before it can be pruned: a third of the run's (RL-Zoo's
    rule), at least one. Optuna counts steps from the first evaluation, numbered 1."""
    config = setup.compose({})
    return max(1, int(config.trainer.num_steps) // int(config.trainer.eval_interval) // 3)


def _refuse_links(study_dir: Path) -> None:
    for name in (DEFAULT_STORAGE, RECORD, BEST):
        if (study_dir / name).is_symlink():
            raise ValueError(f"{study_dir / name} is a symbolic link; rltrain never reads or "
                             "writes a study's files through a link. Remove it.")


def _setup(args: argparse.Namespace, study_dir: Path) -> tuple[Setup, list[str], bool]:
    """The study's setup, the modules its config names that the trials' runs may import (the
    command line's own, for a new study), and whether the study exists: read from
    ``tune.json`` when it does (refusing other settings), else composed from the command
    line."""
    files = [a for a in args.args if "=" not in a]
    overrides = [a for a in args.args if "=" in a]
    record = study_dir / RECORD
    named: list[str] = []
    continuing = record.exists()
    if continuing:
        setup = read_record(record)
        given: dict[str, tuple[Any, Any]] = {
            "--objective": (args.objective, setup.objective),
            "--no-pruning": (args.no_pruning or None, (not setup.pruning) or None),
            "--heartbeat": (args.heartbeat, setup.heartbeat)}
        if files or overrides:
            given["configs and overrides"] = (to_container(compose(files, overrides)),
                                              setup.config)
        if args.space is not None:
            given["--space"] = (read_space(args.space), setup.space)
        for what, (new, old) in given.items():
            if new not in (None, [], old):
                raise ValueError(f"{study_dir} is a study of other settings ({what}); run "
                                 f"rltrain tune --study {study_dir} alone to continue it, or "
                                 "name another --study.")
        _check_storage(setup, args.storage, study_dir)
    else:
        choice = None if files else choose_preset(overrides)
        if choice is not None:
            files = choice.files
        config = compose(files, overrides)  # said once the config is known to be valid
        if choice is not None:
            print(f"rltrain: {choice.note}")
        path = space_path(files, str(config.agent.name), args.space)
        print(f"rltrain: search space {path}")
        if config.trainer.eval_interval is None:
            raise ValueError("rltrain tune scores trials by their evaluations: set "
                             "trainer.eval_interval.")
        setup = Setup(to_container(config), read_space(path), args.objective or "auc",
                      not args.no_pruning, args.prune_after)
        if args.heartbeat is not None:
            setup.heartbeat = args.heartbeat
        if args.storage is not None:
            setup.storage, setup.name = shown(storage_url(study_dir, args.storage)), \
                new_name(study_dir)
        named = named_modules(config)
    setup.trials = args.trials if args.trials is not None else setup.trials
    setup.jobs = args.jobs if args.jobs is not None else setup.jobs
    if not (1 <= setup.trials <= MAX_TRIALS and 1 <= setup.jobs <= MAX_JOBS
            and 1 <= setup.heartbeat <= MAX_HEARTBEAT):
        raise ValueError(f"--trials must be in [1, {MAX_TRIALS:,}], --jobs in [1, {MAX_JOBS}] "
                         f"and --heartbeat in [1, {MAX_HEARTBEAT}]; got {setup.trials}, "
                         f"{setup.jobs} and {setup.heartbeat}.")
    return setup, named, continuing


def _check_storage(setup: Setup, given: str | None, study_dir: Path) -> None:
    """Refuse to continue a study without the storage it was started with (or with one when
    it was started in ``STUDY/study.db``)."""
    if setup.storage is not None and given is None:
        raise ValueError(f"{study_dir}'s trials are recorded in {setup.storage}: give "
                         "--storage URL (with its password) to join or continue it.")
    if setup.storage is None and given is not None:
        raise ValueError(f"{study_dir}'s trials are recorded in {study_dir / DEFAULT_STORAGE}; "
                         "continue it without --storage.")

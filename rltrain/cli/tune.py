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
  up to :data:`MAX_RETRIES` times per command; one killed after it finished keeps its result.
  A trial that fails (an error, a refused config) is recorded failed.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint.files import atomic_write_text
from rltrain.cli.launchers import Launcher, make_launcher, wait
from rltrain.cli.plot import MetricsTail, read_run
from rltrain.cli.processes import (
    RLTRAIN,
    Stops,
    confirmations,
    ended_on_signal,
    fit_command,
    has_checkpoint,
    last_line,
    open_log,
    start,
    summary,
)
from rltrain.cli.study_storage import (
    DEFAULT_STORAGE,
    Heartbeats,
    open_storage,
    run_number,
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
from rltrain.cli.tune_space import Dimension, check_params, parse_space, read_space, space_path
from rltrain.config.instantiate import make_agent, make_env, make_strategy, named_modules
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose, to_container
from rltrain.config.targets import Trust
from rltrain.trainer.run_dir import RunDirectoryLocked, prepare_run, refuse_if_locked

BEST = "best.yaml"
#: Sampled settings that in a row make invalid configs before the study is stopped.
MAX_INVALID = 20
#: Times one ``tune`` command resumes a trial whose process was killed (by a signal: the OOM
#: killer, SIGKILL) before it records the trial failed.
MAX_RETRIES = 3
#: A trial's user attribute marking one asked beyond ``--trials`` by two workers at once.
SURPLUS = "rltrain:surplus"


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError("rltrain tune needs Optuna: pip install 'rltrain[tune]'.") from error
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # rltrain keeps the heartbeats itself (Optuna warns when ask() is used with them) and uses
    # the retry callback's experimental arguments on purpose.
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
    heartbeats = Heartbeats(optuna, study, setup.heartbeat)
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
        # their own sequence (the same seed would sample the same settings in each).
        seed = known if setup.storage is None else known + os.getpid()
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
        if not files:
            choice = choose_preset(overrides)
            files = choice.files
            print(f"rltrain: {choice.note}")
        config = compose(files, overrides)
        path = space_path(files, str(config.agent.name), args.space)
        print(f"rltrain: search space {path}")
        if config.trainer.eval_interval is None:
            raise ValueError("rltrain tune scores trials by their evaluations: set "
                             "trainer.eval_interval.")
        setup = Setup(to_container(config), read_space(path), args.objective or "auc",
                      not args.no_pruning, args.prune_after, heartbeat=args.heartbeat or 10)
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


@dataclass(eq=False)
class Running:
    """A trial while its process runs."""

    trial: Any
    number: int
    run_dir: Path
    config: DictConfig
    process: Any = None
    log: IO[bytes] | None = None
    reported: set[int] = field(default_factory=set)
    pruned: bool = False
    lost: bool = False
    metrics: MetricsTail = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = MetricsTail(self.run_dir / "metrics.jsonl")


class Tuner:
    """A worker's loop: take trials, run them, report their evaluations, prune, record
    results, keep their heartbeats and take over those of dead workers."""

    def __init__(self, optuna: Any, study: Any, heartbeats: Heartbeats, setup: Setup,
                 dimensions: list[Dimension], study_dir: Path, passthrough: list[str],
                 trust: Trust) -> None:
        self.optuna, self.study, self.heartbeats, self.setup = optuna, study, heartbeats, setup
        self.dimensions, self.dir, self.passthrough = dimensions, study_dir, passthrough
        self.trust = trust
        self.running: list[Running] = []
        #: This worker's trials to start again (their process was killed), or to start once
        #: their run directory is free (taken over from a worker whose run still ends).
        self.again: list[tuple[float, Any]] = []
        self.retries: dict[int, int] = {}
        self.threads = max(1, (os.cpu_count() or 1) // setup.jobs)

    def run(self) -> int:
        """Run trials until the study's ``--trials`` are done, or Ctrl-C/SIGTERM; 130 when
        stopped."""
        invalid = 0
        with Stops(lambda: [r.process for r in self.running]) as stop:
            while True:
                self.heartbeats.beat([r.trial for r in self.running]
                                     + [trial for _, trial in self.again])
                self.heartbeats.take_over()
                while not stop.requested and len(self.running) < self.setup.jobs:
                    trial = self._next()
                    if trial is None:
                        break
                    started = self._start(trial)
                    invalid = 0 if started else invalid + 1
                    if invalid >= MAX_INVALID:
                        raise ValueError(f"{MAX_INVALID} sampled settings in a row made "
                                         "invalid configs: narrow the search space.")
                if not self.running and not self.again and (stop.requested
                                                            or not self._pending()):
                    break
                time.sleep(0.2 if self.running else 1.0)
                for running in list(self.running):
                    self._poll(running)
                    if running.process.poll() is not None:
                        self.running.remove(running)
                        self._finish(running, stopped=stop.requested)
        return self._report(stopped=stop.requested)

    def _next(self) -> Any:
        """The next trial for this worker: its own to start again, a trial queued again after
        its worker died, or a new one while the study has fewer than ``--trials``; ``None``
        when there is none now."""
        now = time.monotonic()
        for entry in self.again:
            if entry[0] <= now:
                self.again.remove(entry)
                return entry[1]
        states = self.optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        if not any(t.state == states.WAITING for t in trials) and \
                len(_by_run(trials)) >= self.setup.trials:
            return None
        trial = self.study.ask()
        frozen = self.study._storage.get_trial(trial._trial_id)
        self.heartbeats.beat([trial], now=True)
        if run_number(frozen) == frozen.number:  # a new trial: one too many when two workers
            ahead = self.study.get_trials(deepcopy=False)  # asked for the last one at once
            if len(_by_run([t for t in ahead if t.number <= frozen.number])) \
                    > self.setup.trials:
                trial.set_user_attr(SURPLUS, True)
                self.study.tell(trial, state=states.FAIL)
                return None
        return trial

    def _pending(self) -> bool:
        """Whether the study has trials still to run or running in other workers (which this
        one takes over if they die), or fewer trials than ``--trials``."""
        states = self.optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        return len(_by_run(trials)) < self.setup.trials or any(
            t.state in (states.RUNNING, states.WAITING) for t in trials)

    def _start(self, trial: Any) -> bool:
        frozen = self.study._storage.get_trial(trial._trial_id)
        number = run_number(frozen)
        run_dir = self.dir / f"trial-{number:04d}"
        params: dict[str, Any] = {}
        try:  # recorded or enqueued in the study's database (untrusted), or sampled
            params = dict(trial.params) or {d.key: d.suggest(trial) for d in self.dimensions}
            check_params(params, self.dimensions)
            config = self.setup.compose(params)
        except Exception as error:  # a sampled combination the config refuses
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            print(f"trial {number}: invalid settings: {str(error)[:300]}", flush=True)
            return False
        try:
            refuse_if_locked(run_dir)
        except RunDirectoryLocked:  # its previous worker's run still ends: later
            self.again.append((time.monotonic() + self.heartbeats.interval, trial))
            return True
        if summary(run_dir) and not ended_on_signal(run_dir):  # ended before it was recorded
            self._complete(trial, number, run_dir, config)
            return True
        config.trainer.num_threads = self._threads(config)
        config.trainer.checkpoint_interval = (config.trainer.checkpoint_interval
                                              or config.trainer.eval_interval)
        config.trainer.run_dir = str(run_dir)
        try:
            if not has_checkpoint(run_dir):
                prepare_run(run_dir, config)
            log = open_log(self.dir / f"{run_dir.name}.log")
        except (OSError, ValueError) as error:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            print(f"trial {number}: failed: {error}", flush=True)
            return True
        command, resume = fit_command(run_dir, ["trainer.enable_progress_bar=false"],
                                      self.passthrough)
        running = Running(trial, number, run_dir, config)
        running.reported = {int(step) for step in frozen.intermediate_values}
        running.log = log
        running.process = start(command, running.log)
        self.running.append(running)
        shown_params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in params.items())
        taken = "" if number == frozen.number else \
            f", taken over after its worker stopped, as Optuna trial {frozen.number}"
        print(f"trial {number}: {'resumed' if resume else 'started'} ({shown_params}){taken}",
              flush=True)
        return True

    def _threads(self, config: DictConfig) -> int:
        own = config.trainer.num_threads
        return min(own, self.threads) if isinstance(own, int) else self.threads

    def _poll(self, running: Running) -> None:
        """Report the run's new evaluations; stop it when the pruner says so, or when another
        worker took its trial over (this worker's heartbeats came too late)."""
        if running.pruned or running.lost:
            return
        rows = running.metrics.read()
        if not rows:
            return
        interval = int(running.config.trainer.eval_interval)
        try:
            for row in rows:
                if (row.get("event") != "evaluation" or row.get("eval/return_mean") is None
                        or row.get("complete") is False):  # cut short by a stop: not a score
                    continue
                step = round(float(row["env_steps"]) / interval)
                if step not in running.reported:
                    running.trial.report(float(row["eval/return_mean"]), step)
                    running.reported.add(step)
            if running.process.poll() is None and running.trial.should_prune():
                running.pruned = True
                running.process.send_signal(signal.SIGINT)  # it saves a checkpoint and ends
        except self.optuna.exceptions.UpdateFinishedTrialError:
            running.lost = True
            running.process.send_signal(signal.SIGINT)
            print(f"trial {running.run_dir.name}: taken over by another worker (this worker's "
                  "heartbeats came late); its run here stops with a checkpoint", flush=True)

    def _finish(self, running: Running, *, stopped: bool) -> None:
        assert running.log is not None
        running.log.close()
        if running.lost:
            return
        states = self.optuna.trial.TrialState
        number, code = running.number, running.process.returncode
        if running.pruned and (code != 0 or ended_on_signal(running.run_dir)):
            self.study.tell(running.trial, state=states.PRUNED)
            print(f"trial {number}: pruned at evaluation {max(running.reported)}", flush=True)
        elif not running.pruned and (ended_on_signal(running.run_dir) or (stopped and code)):
            self.heartbeats.hand_back(running.trial)
            print(f"trial {number}: stopped; it resumes when the study continues", flush=True)
        elif code == 0 or finished(running.run_dir):  # killed after it finished: kept
            self._complete(running.trial, number, running.run_dir, running.config)
        elif code < 0 and self.retries.get(number, 0) < MAX_RETRIES:  # OOM killer, SIGKILL
            self.retries[number] = self.retries.get(number, 0) + 1
            self.again.append((0.0, running.trial))
            print(f"trial {number}: its process was killed ({signal.Signals(-code).name}); it "
                  "resumes from its last checkpoint", flush=True)
        else:
            self.study.tell(running.trial, state=states.FAIL)
            log = self.dir / f"{running.run_dir.name}.log"
            print(f"trial {number}: failed (exit {code}): {last_line(log)}", flush=True)

    def _complete(self, trial: Any, number: int, run_dir: Path, config: DictConfig) -> None:
        """Record a finished trial's objective; write ``best.yaml`` when it is the best."""
        value = objective(run_dir, self.setup.objective, config)
        self.study.tell(trial, value)
        print(f"trial {number}: {self.setup.objective} {value:.2f}", flush=True)
        if self.study.best_trial.number == trial.number:
            self._write_best()

    def _write_best(self) -> None:
        best = self.study.best_trial
        config = self.setup.compose(best.params)
        config.trainer.run_dir = config.trainer.checkpoint_dir = None
        number = run_number(best)
        try:  # best.yaml is run as the user's own file: what the records say is checked first
            check_params(best.params, self.dimensions)
            for section, make in (("agent", make_agent), ("strategy", make_strategy),
                                  ("env", make_env)):
                make(config[section], self.trust)
        except ValueError as error:
            print(f"trial {number}: its config is refused as a stored config, so "
                  f"{BEST} is not written: {error}", flush=True)
            return
        atomic_write_text(self.dir / BEST, (
            f"# The best trial of the study in {self.dir}: trial {number}, "
            f"{self.setup.objective} {best.value:.2f}.\n#   rltrain fit {self.dir / BEST}\n"
            + OmegaConf.to_yaml(config)))

    def _report(self, *, stopped: bool) -> int:
        trials = _by_run(self.study.get_trials(deepcopy=False))
        counts: dict[str, int] = {}
        for trial in trials.values():
            counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
        taken = sum(t.number != n for n, t in trials.items())
        print("trials: " + ", ".join(f"{n} {k}" for k, n in counts.items())
              + (f" ({taken} taken over after their worker stopped)" if taken else ""),
              flush=True)
        if counts.get("complete"):
            best = self.study.best_trial
            print(f"best: trial {run_number(best)}, {self.setup.objective} {best.value:.2f}, "
                  f"{best.params}; its config: {self.dir / BEST} (rltrain fit "
                  f"{self.dir / BEST})", flush=True)
        if stopped:
            print(f"stopped; continue with rltrain tune --study {self.dir}", flush=True)
            return 130
        return 0


def _by_run(trials: list[Any]) -> dict[int, Any]:
    """The study's trials by run number (:func:`~rltrain.cli.study_storage.run_number`): the
    latest attempt of each; trials asked beyond ``--trials`` left out."""
    latest: dict[int, Any] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.user_attrs.get(SURPLUS) is not True:
            latest[run_number(trial)] = trial
    return latest


def finished(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` ended on its own (its summary written, its metrics'
    last segment ended other than by a signal)."""
    try:
        return bool(summary(run_dir)) and read_run(run_dir).finished
    except (OSError, ValueError):
        return False


def objective(run_dir: Path, kind: str, config: DictConfig) -> float:
    """The trial's score from its complete evaluations (module docstring): for ``auc``, the
    mean of its evaluations, the final return counted again for each evaluation interval of
    the budget a run that stopped early (its return threshold) did not reach."""
    run = read_run(run_dir)
    returns = run.returns  # one per env step, in order (a resume's last)
    if kind == "final":
        return float(returns[-1])
    if kind == "best":
        return float(returns.max())
    left = float(config.trainer.num_steps) - float(run.env_steps[-1])
    missing = max(0, round(left / float(config.trainer.eval_interval)))
    return float(np.mean([*returns, *[float(returns[-1])] * missing]))

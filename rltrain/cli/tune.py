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
- Running the command again continues the study (one ``tune`` per study at a time: a lock):
  a trial that was running when ``tune`` died resumes from its run directory's last checkpoint
  under its own trial number, with the evaluations it had reported; it restarts only when it
  died before its first checkpoint (a run of ``trainer.checkpoint_interval`` env steps,
  ``trainer.eval_interval`` when the config sets none). Trials count towards ``--trials`` once
  completed, pruned or failed.
- A trial whose own process is killed (the OOM killer, SIGKILL) resumes the same way at once,
  up to :data:`MAX_RETRIES` times per command; one killed after it finished keeps its result.
  A trial that fails (an error, a refused config) is recorded failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint.files import atomic_write_text
from rltrain.cli.plot import MetricsTail, read_run
from rltrain.cli.processes import (
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
from rltrain.cli.records import bounded_int, read_bounded, refuse_unknown_fields
from rltrain.cli.tune_space import (
    Dimension,
    Scalar,
    check_params,
    params_layer,
    parse_space,
    read_space,
    space_path,
)
from rltrain.config.files import literal_config
from rltrain.config.instantiate import make_agent, make_env, make_strategy, named_modules
from rltrain.config.presets import choose_preset
from rltrain.config.schema import compose, to_container, validate
from rltrain.config.targets import Trust
from rltrain.trainer.run_dir import prepare_run

RECORD, STORAGE, LOCK, BEST = "tune.json", "study.db", ".tune.lock", "best.yaml"
#: Sampled settings that in a row make invalid configs before the study is stopped.
MAX_INVALID = 20
#: Times one ``tune`` command resumes a trial whose process was killed (by a signal: the OOM
#: killer, SIGKILL) before it records the trial failed.
MAX_RETRIES = 3


@dataclass
class Setup:
    """What every trial of the study starts from (``tune.json``).

    Attributes:
        config: The study's composed config, as plain data (each trial's config is this with
            its sampled settings; never a command line to replay).
        space: The search space's mapping (:mod:`rltrain.cli.tune_space`).
    """

    config: dict[str, Any]
    space: dict[str, Any]
    objective: str = "auc"
    pruning: bool = True
    prune_after: int = 5
    trials: int = 20
    jobs: int = 1

    def compose(self, params: Mapping[str, Scalar]) -> DictConfig:
        """The trial's config: the study's config with the settings ``params`` (strings taken
        literally)."""
        return validate(OmegaConf.merge(literal_config(self.config), params_layer(params)))


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError("rltrain tune needs Optuna: pip install 'rltrain[tune]'.") from error
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def tune_command(args: argparse.Namespace) -> int:
    """Start or continue the study in ``args.study`` (module docstring). Everything is checked
    before anything is written: a refused command leaves no study behind."""
    optuna = _optuna()
    study_dir: Path = args.study
    continuing = (study_dir / RECORD).exists()
    setup, named = _setup(args, study_dir)
    dimensions = parse_space(setup.space, f"search space of {study_dir}", setup.compose)
    study_dir.mkdir(parents=True, exist_ok=True)
    with _locked(study_dir):
        if (study_dir / RECORD).exists() != continuing:
            raise ValueError(f"{study_dir} was started by another rltrain tune meanwhile; run "
                             "this command again to continue it.")
        atomic_write_text(study_dir / RECORD, json.dumps(
            {"format": FORMAT, **setup.__dict__}, indent=2) + "\n")
        storage = f"sqlite:///{os.path.abspath(study_dir / STORAGE)}"
        try:  # Optuna's database is untrusted too: whatever it raises names it
            known = len(optuna.load_study(study_name="rltrain", storage=storage).trials) \
                if (study_dir / STORAGE).exists() else 0
            study = optuna.create_study(
                study_name="rltrain", storage=storage, load_if_exists=True,
                direction="maximize", sampler=optuna.samplers.TPESampler(seed=known),
                pruner=(optuna.pruners.MedianPruner(n_startup_trials=setup.prune_after,
                                                     n_warmup_steps=warmup_evaluations(setup))
                        if setup.pruning else optuna.pruners.NopPruner()))
        except Exception as error:
            raise ValueError(f"{study_dir / STORAGE} is not a study database rltrain can "
                             f"read: {type(error).__name__}: {str(error).splitlines()[0][:200]}."
                             ) from None
        passthrough = confirmations(args.trust, args.imports, named)
        trust = Trust(stored_in=study_dir, modules=[*args.trust, *args.imports, *named])
        return Tuner(optuna, study, setup, dimensions, study_dir, passthrough, trust).run()


#: The record's format: 2 holds the composed config (1 held a command line to replay).
FORMAT = 2


def warmup_evaluations(setup: Setup) -> int:
    """The evaluations a trial makes before it can be pruned: a third of the run's (RL-Zoo's
    rule), at least one. Optuna counts steps from the first evaluation, numbered 1."""
    config = setup.compose({})
    return max(1, int(config.trainer.num_steps) // int(config.trainer.eval_interval) // 3)


@contextmanager
def _locked(study_dir: Path) -> Iterator[None]:
    """Hold the study's lock: one ``tune`` per study at a time."""
    import fcntl

    for name in (LOCK, STORAGE, RECORD):
        if (study_dir / name).is_symlink():
            raise ValueError(f"{study_dir / name} is a symbolic link; rltrain never reads or "
                             "writes a study's files through a link. Remove it.")
    fd = os.open(study_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{study_dir} is tuned by another rltrain tune now; wait for it "
                             "or stop it (Ctrl-C) first.") from None
        yield
    finally:
        os.close(fd)


def _setup(args: argparse.Namespace, study_dir: Path) -> tuple[Setup, list[str]]:
    """The study's setup, and the modules its config names that the trials' runs may import
    (the command line's own, for a new study): read from ``tune.json`` when continuing
    (refusing other configs), else composed from the command line."""
    files = [a for a in args.args if "=" not in a]
    overrides = [a for a in args.args if "=" in a]
    record = study_dir / RECORD
    named: list[str] = []
    if record.exists():
        setup = _read_record(record)
        given: dict[str, tuple[Any, Any]] = {
            "--objective": (args.objective, setup.objective),
            "--no-pruning": (args.no_pruning or None, (not setup.pruning) or None)}
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
                      not args.no_pruning, args.prune_after)
        named = named_modules(config)
    setup.trials = args.trials if args.trials is not None else setup.trials
    setup.jobs = args.jobs if args.jobs is not None else setup.jobs
    if not (1 <= setup.trials <= MAX_TRIALS and 1 <= setup.jobs <= MAX_JOBS):
        raise ValueError(f"--trials must be in [1, {MAX_TRIALS:,}] and --jobs in [1, "
                         f"{MAX_JOBS}]; got {setup.trials} and {setup.jobs}.")
    return setup, named


#: The most trials and jobs a study may have.
MAX_TRIALS, MAX_JOBS = 1_000_000, 1_024


def _read_record(path: Path) -> Setup:
    """``tune.json`` read as untrusted data: every field's type and bounds checked."""
    try:
        data = json.loads(read_bounded(path), parse_int=bounded_int)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"its format is not {FORMAT}" + (
                " (it was written by an earlier rltrain, whose records held a command line "
                "to replay, which rltrain no longer trusts: start a new study)"
                if isinstance(data, dict) and data.get("format") == 1 else ""))
        del data["format"]
        refuse_unknown_fields(data, set(Setup.__dataclass_fields__))
        setup = Setup(**data)
        checks = {
            "config": isinstance(setup.config, dict),
            "space": isinstance(setup.space, dict),
            "objective": setup.objective in ("auc", "final", "best"),
            "pruning": isinstance(setup.pruning, bool),
            "prune_after": type(setup.prune_after) is int and 0 <= setup.prune_after <= MAX_TRIALS,
            "trials": type(setup.trials) is int and 1 <= setup.trials <= MAX_TRIALS,
            "jobs": type(setup.jobs) is int and 1 <= setup.jobs <= MAX_JOBS}
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} of the wrong type or out of bounds")
        if setup.compose({}).trainer.eval_interval is None:
            raise ValueError("its config sets no trainer.eval_interval, which a study scores by")
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as error:
        raise ValueError(f"{path} is not a study rltrain wrote: {error}.") from None
    return setup


@dataclass(eq=False)
class Running:
    """A trial while its process runs."""

    trial: Any
    run_dir: Path
    config: DictConfig
    process: Any = None
    log: IO[bytes] | None = None
    reported: set[int] = field(default_factory=set)
    pruned: bool = False
    metrics: MetricsTail = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = MetricsTail(self.run_dir / "metrics.jsonl")


class Tuner:
    """The study's loop: start trials, report their evaluations, prune, record results."""

    def __init__(self, optuna: Any, study: Any, setup: Setup, dimensions: list[Dimension],
                 study_dir: Path, passthrough: list[str], trust: Trust) -> None:
        self.optuna, self.study, self.setup = optuna, study, setup
        self.dimensions, self.dir, self.passthrough = dimensions, study_dir, passthrough
        self.trust = trust
        self.running: list[Running] = []
        #: Trials to start again first: running when the study stopped, or whose process was
        #: killed (their runs resume from their checkpoints).
        self.stale: list[Any] = []
        self.retries: dict[int, int] = {}
        self.threads = max(1, (os.cpu_count() or 1) // setup.jobs)

    def finished(self) -> int:
        """Trials completed, pruned or failed."""
        states = self.optuna.trial.TrialState
        return len(self.study.get_trials(deepcopy=False, states=(
            states.COMPLETE, states.PRUNED, states.FAIL)))

    def run(self) -> int:
        """Run trials until ``--trials`` have finished, or Ctrl-C/SIGTERM; 130 when stopped."""
        states = self.optuna.trial.TrialState
        self.stale = [self.optuna.trial.Trial(self.study, frozen._trial_id)  # by id
                 for frozen in self.study.get_trials(deepcopy=False, states=(states.RUNNING,))]
        invalid = 0
        with Stops(lambda: [r.process for r in self.running]) as stop:
            while True:
                while not stop.requested and len(self.running) < self.setup.jobs and (
                        self.stale or self.finished() + len(self.running) < self.setup.trials):
                    trial = self.stale.pop(0) if self.stale else self.study.ask()
                    started = self._start(trial)
                    invalid = 0 if started else invalid + 1
                    if invalid >= MAX_INVALID:
                        raise ValueError(f"{MAX_INVALID} sampled settings in a row made "
                                         "invalid configs: narrow the search space.")
                if not self.running:
                    break
                time.sleep(0.2)
                for running in list(self.running):
                    self._poll(running)
                    if running.process.poll() is not None:
                        self.running.remove(running)
                        self._finish(running, stopped=stop.requested)
        return self._report(stopped=stop.requested)

    def _start(self, trial: Any) -> bool:
        run_dir = self.dir / f"trial-{trial.number:04d}"
        params: dict[str, Any] = {}
        try:  # recorded or enqueued in the study's database (untrusted), or sampled
            params = dict(trial.params) or {d.key: d.suggest(trial) for d in self.dimensions}
            check_params(params, self.dimensions)
            config = self.setup.compose(params)
        except Exception as error:  # a sampled combination the config refuses
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            print(f"trial {trial.number}: invalid settings: {str(error)[:300]}", flush=True)
            return False
        if summary(run_dir) and not ended_on_signal(run_dir):  # ended before it was recorded
            self._complete(trial, run_dir, config)
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
            print(f"trial {trial.number}: failed: {error}", flush=True)
            return True
        command, resume = fit_command(run_dir, ["trainer.enable_progress_bar=false"],
                                      self.passthrough)
        running = Running(trial, run_dir, config)
        running.reported = {int(step) for frozen in self.study.get_trials(deepcopy=False)
                            if frozen.number == trial.number
                            for step in frozen.intermediate_values}
        running.log = log
        running.process = start(command, running.log)
        self.running.append(running)
        shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in params.items())
        print(f"trial {trial.number}: {'resumed' if resume else 'started'} ({shown})",
              flush=True)
        return True

    def _threads(self, config: DictConfig) -> int:
        own = config.trainer.num_threads
        return min(own, self.threads) if isinstance(own, int) else self.threads

    def _poll(self, running: Running) -> None:
        """Report the run's new evaluations; stop it when the pruner says so."""
        if running.pruned:
            return
        rows = running.metrics.read()
        if not rows:
            return
        interval = int(running.config.trainer.eval_interval)
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
            running.process.send_signal(signal.SIGINT)  # the run saves a checkpoint and ends

    def _finish(self, running: Running, *, stopped: bool) -> None:
        assert running.log is not None
        running.log.close()
        states = self.optuna.trial.TrialState
        number, code = running.trial.number, running.process.returncode
        if running.pruned and (code != 0 or ended_on_signal(running.run_dir)):
            self.study.tell(running.trial, state=states.PRUNED)
            print(f"trial {number}: pruned at evaluation {max(running.reported)}", flush=True)
        elif not running.pruned and (ended_on_signal(running.run_dir) or (stopped and code)):
            print(f"trial {number}: stopped; it resumes when the study continues", flush=True)
        elif code == 0 or finished(running.run_dir):  # killed after it finished: kept
            self._complete(running.trial, running.run_dir, running.config)
        elif code < 0 and self.retries.get(number, 0) < MAX_RETRIES:  # OOM killer, SIGKILL
            self.retries[number] = self.retries.get(number, 0) + 1
            self.stale.append(running.trial)
            print(f"trial {number}: its process was killed ({signal.Signals(-code).name}); it "
                  "resumes from its last checkpoint", flush=True)
        else:
            self.study.tell(running.trial, state=states.FAIL)
            log = self.dir / f"{running.run_dir.name}.log"
            print(f"trial {number}: failed (exit {code}): {last_line(log)}", flush=True)

    def _complete(self, trial: Any, run_dir: Path, config: DictConfig) -> None:
        """Record a finished trial's objective; write ``best.yaml`` when it is the best."""
        value = objective(run_dir, self.setup.objective, config)
        self.study.tell(trial, value)
        print(f"trial {trial.number}: {self.setup.objective} {value:.2f}", flush=True)
        if self.study.best_trial.number == trial.number:
            self._write_best()

    def _write_best(self) -> None:
        best = self.study.best_trial
        config = self.setup.compose(best.params)
        config.trainer.run_dir = config.trainer.checkpoint_dir = None
        try:  # best.yaml is run as the user's own file: what the records say is checked first
            check_params(best.params, self.dimensions)
            for section, make in (("agent", make_agent), ("strategy", make_strategy),
                                  ("env", make_env)):
                make(config[section], self.trust)
        except ValueError as error:
            print(f"trial {best.number}: its config is refused as a stored config, so "
                  f"{BEST} is not written: {error}", flush=True)
            return
        atomic_write_text(self.dir / BEST, (
            f"# The best trial of the study in {self.dir}: trial {best.number}, "
            f"{self.setup.objective} {best.value:.2f}.\n#   rltrain fit {self.dir / BEST}\n"
            + OmegaConf.to_yaml(config)))

    def _report(self, *, stopped: bool) -> int:
        states = self.optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        counts = {s.name.lower(): sum(t.state == s for t in trials) for s in states}
        print("trials: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n), flush=True)
        if counts["complete"]:
            best = self.study.best_trial
            print(f"best: trial {best.number}, {self.setup.objective} {best.value:.2f}, "
                  f"{best.params}; its config: {self.dir / BEST} (rltrain fit "
                  f"{self.dir / BEST})", flush=True)
        if stopped:
            print(f"stopped; continue with rltrain tune --study {self.dir}", flush=True)
            return 130
        return 0


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

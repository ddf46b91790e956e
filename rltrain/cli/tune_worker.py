"""One worker of a study (:mod:`rltrain.cli.tune`): it takes trials, runs each as an ``rltrain
fit`` process, reports their evaluations to Optuna, prunes, records results and ``best.yaml``,
keeps its trials' heartbeats and takes over those of dead workers
(:mod:`rltrain.cli.study_storage`)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from rltrain.checkpoint.files import atomic_write_text
from rltrain.cli.metrics_file import MetricsTail
from rltrain.cli.plot import read_run
from rltrain.cli.processes import (
    Stops,
    ended_on_signal,
    fit_command,
    has_checkpoint,
    last_line,
    open_log,
    start,
    summary,
)
from rltrain.cli.study_storage import Heartbeats, run_number
from rltrain.cli.tune_record import Setup
from rltrain.cli.tune_space import Dimension, check_params
from rltrain.config.instantiate import make_agent, make_env, make_strategy
from rltrain.settings.targets import Trust
from rltrain.trainer.run_dir import RunDirectoryLocked, prepare_run, refuse_if_locked

#: The best trial's config, in the study folder.
BEST = "best.yaml"
#: Sampled settings that in a row make invalid configs before the study is stopped.
MAX_INVALID = 20
#: Times one ``tune`` command resumes a trial whose process was killed (by a signal: the OOM
#: killer, SIGKILL) before it records the trial failed.
MAX_RETRIES = 3
#: A trial's user attribute marking one asked beyond ``--trials`` by two workers at once.
SURPLUS = "rltrain:surplus"


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
        try:
            stopped = self._loop()
        finally:
            self.heartbeats.close()
        return self._report(stopped=stopped)

    def _loop(self) -> bool:
        """The worker's loop (:meth:`run`); whether a stop was requested."""
        invalid = 0
        with Stops(lambda: [r.process for r in self.running]) as stop:
            while True:
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
        return stop.requested

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
        if not self.heartbeats.claim(trial):
            return None
        if run_number(frozen) == frozen.number:  # a new trial: one too many when two workers
            ahead = self.study.get_trials(deepcopy=False)  # asked for the last one at once
            if len(_by_run([t for t in ahead if t.number <= frozen.number])) \
                    > self.setup.trials:
                trial.set_user_attr(SURPLUS, True)
                self._tell(trial, state=states.FAIL)
                return None
        return trial

    def _tell(self, trial: Any, value: float | None = None, **state: Any) -> bool:
        """Record ``trial``'s end (a value, or a ``state``) and stop its heartbeat; False when
        another worker took it over meanwhile (this worker was taken for dead)."""
        self.heartbeats.release(trial)
        try:
            self.study.tell(trial, value, **state)
        except (self.optuna.exceptions.UpdateFinishedTrialError, ValueError):
            # Optuna refuses to tell a trial that is no longer running with a ValueError (when
            # another worker failed it before) or this error (when it happened meanwhile).
            if self._running(trial):
                raise
            print(f"trial {trial.number}: taken over by another worker meanwhile; not recorded "
                  "here", flush=True)
            return False
        return True

    def _running(self, trial: Any) -> bool:
        """Whether ``trial`` is still running in the study (not failed by another worker)."""
        state = self.study._storage.get_trial(trial._trial_id).state
        return bool(state == self.optuna.trial.TrialState.RUNNING)

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
            self._tell(trial, state=self.optuna.trial.TrialState.FAIL)
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
            self._tell(trial, state=self.optuna.trial.TrialState.FAIL)
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
            print(f"trial {running.number}: taken over by another worker (this worker's "
                  "heartbeats came late); its run here stops with a checkpoint", flush=True)

    def _finish(self, running: Running, *, stopped: bool) -> None:
        assert running.log is not None
        running.log.close()
        if running.lost:
            self.heartbeats.release(running.trial)
            return
        states = self.optuna.trial.TrialState
        number, code = running.number, running.process.returncode
        if running.pruned and (code != 0 or ended_on_signal(running.run_dir)):
            self._tell(running.trial, state=states.PRUNED)
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
            self._tell(running.trial, state=states.FAIL)
            log = self.dir / f"{running.run_dir.name}.log"
            print(f"trial {number}: failed (exit {code}): {last_line(log)}", flush=True)

    def _complete(self, trial: Any, number: int, run_dir: Path, config: DictConfig) -> None:
        """Record a finished trial's objective; write ``best.yaml`` when it is the best."""
        value = objective(run_dir, self.setup.objective, config)
        if not self._tell(trial, value):
            return
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

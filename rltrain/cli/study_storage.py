"""Where a study's trials are recorded, and how the workers that share a study take over the
trials of a worker that died.

- ``rltrain tune --storage URL``: any Optuna RDB URL (``postgresql://user@host/db``, the
  reference for a cluster; ``mysql://...``; ``sqlite:///path``) or ``journal:PATH``, Optuna's
  journal file on a shared filesystem. Without it: ``STUDY/study.db`` (SQLite), for one machine.
- Every worker records a heartbeat for each trial it runs, every ``heartbeat`` seconds. A trial
  whose last heartbeat is older than :data:`GRACE` heartbeats (its worker was killed, preempted,
  or lost its node) is failed by the first worker that sees it, which is atomic in the storage:
  one worker wins. Optuna's retry callback then queues it again (its settings and reported
  evaluations kept) and the next worker to ask for a trial takes it, resuming the same run
  directory, ``STUDY/trial-NNNN`` (NNNN: the first attempt's number), from its last checkpoint.
  On an RDB the heartbeat is Optuna's own (the database's clock); on a journal file, which has
  none in Optuna, a trial attribute written with the workers' clocks.
- A worker marks each trial it asks for at once (:data:`BEATING`: the trial's own number, as
  Optuna copies a failed trial's attributes into the attempt it queues). A running trial seen
  unmarked twice, one heartbeat apart, was left by an earlier rltrain that kept no heartbeats
  (and held :data:`OLD_LOCK` while it tuned), or by a worker that died between asking for it and
  marking it: once that lock is free, it is queued again too. A trial a live worker has just
  asked for is marked within moments, so it is never taken for one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

#: File name of the default storage in the study folder.
DEFAULT_STORAGE = "study.db"
#: Heartbeats a trial may miss before another worker takes it over.
GRACE = 3
#: The trial attribute of a journal storage's heartbeat (seconds since the epoch).
JOURNAL_HEARTBEAT = "rltrain:heartbeat"
#: Times a trial is queued again after its worker died before it is left failed.
MAX_TAKEOVERS = 3
#: A trial's user attribute: its worker records heartbeats (an earlier rltrain recorded none).
#: Its value is the trial's number (``True`` from rltrain before 2026-12-07, trusted on first
#: attempts only: a queued attempt inherits the failed one's attributes).
BEATING = "rltrain:heartbeats"
#: The lock an earlier rltrain held in the study folder while it tuned (one ``tune`` per study).
OLD_LOCK = ".tune.lock"


def storage_url(study_dir: Path, given: str | None) -> str:
    """The study's storage: ``given`` (the command line's ``--storage``), else SQLite in
    ``study_dir``."""
    if given is None:
        return f"sqlite:///{os.path.abspath(study_dir / DEFAULT_STORAGE)}"
    if not given.startswith("journal:") and "://" not in given:
        raise ValueError(f"--storage {given!r} is neither a database URL (postgresql://USER@"
                         "HOST/DB, sqlite:///PATH) nor journal:PATH (a journal file on a shared "
                         "filesystem).")
    return given


def shown(url: str) -> str:
    """``url`` without its password, to print and record."""
    if url.startswith("journal:"):
        return url
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: say which kind it is, never its secrets
        return url.split("://", 1)[0] + "://..."


def open_storage(optuna: Any, url: str, heartbeat: int) -> Any:
    """Optuna's storage at ``url``; an RDB's records heartbeats every ``heartbeat`` seconds and
    queues a trial whose worker died again, up to :data:`MAX_TAKEOVERS` times."""
    if url.startswith("journal:"):
        backend = optuna.storages.journal.JournalFileBackend(url.removeprefix("journal:"))
        return optuna.storages.JournalStorage(backend)
    return optuna.storages.RDBStorage(
        url, engine_kwargs=None if url.startswith("sqlite") else {"pool_pre_ping": True},
        heartbeat_interval=heartbeat, grace_period=GRACE * heartbeat,
        heartbeat_stale_trial_callback=_retry(optuna, MAX_TAKEOVERS))


def _retry(optuna: Any, times: int | None) -> Any:
    """Optuna's callback that queues a failed trial again (its settings and reported
    evaluations kept), at most ``times`` times (``None``: always)."""
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or \
        optuna.storages.RetryFailedTrialCallback
    return retry(max_retry=times, inherit_intermediate_values=True)


class Heartbeats:
    """A worker's side of the heartbeat in ``study``: a thread records one every ``heartbeat``
    seconds for each trial the worker :meth:`claim` s (so that a worker busy for a while, starting
    a trial or checking a config, is not taken for dead), :meth:`take_over` fails the trials of
    workers that died, at most once per interval, and :meth:`hand_back` gives up one it stopped.
    Optuna's own heartbeat on an RDB (``native``); on a journal, the trial attribute
    :data:`JOURNAL_HEARTBEAT`. ``study_dir``: the study folder, where an earlier rltrain held
    :data:`OLD_LOCK` (``None``: no such trials are taken over)."""

    def __init__(self, optuna: Any, study: Any, heartbeat: int,
                 study_dir: Path | None = None) -> None:
        self.optuna, self.study, self.interval = optuna, study, heartbeat
        self.storage = study._storage
        self.native = bool(self.storage.get_heartbeat_interval()) \
            if hasattr(self.storage, "get_heartbeat_interval") else False
        self.old_lock = None if study_dir is None else study_dir / OLD_LOCK
        self._last_check = float("-inf")
        #: Running trials seen unmarked (:data:`BEATING`), with the first time seen (monotonic).
        self._unmarked: dict[int, float] = {}
        self._held: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rltrain-heartbeat",
                                        daemon=True)
        self._thread.start()

    def claim(self, trial: Any) -> bool:
        """Keep ``trial``'s heartbeat from now on (one is recorded at once) and mark it; False
        (nothing kept) when another worker failed it first: it is queued again for whichever
        worker asks next."""
        try:
            self._record(trial)
            with self._lock:
                self._held[trial._trial_id] = trial
            trial.set_user_attr(BEATING, trial.number)
        except self.optuna.exceptions.UpdateFinishedTrialError:
            self.release(trial)
            return False
        return True

    def release(self, trial: Any) -> None:
        """Stop ``trial``'s heartbeat (it finished, or was handed back)."""
        with self._lock:
            self._held.pop(trial._trial_id, None)

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._stopped.set()
        self._thread.join(timeout=self.interval + 5)

    def _beat(self) -> None:
        while not self._stopped.wait(self.interval):
            with self._lock:
                held = list(self._held.values())
            for trial in held:
                try:
                    self._record(trial)
                except Exception as error:  # the database away a moment: the next beat tries
                    print(f"rltrain: heartbeat not recorded ({type(error).__name__}); trying "
                          "again", file=sys.stderr, flush=True)

    def _record(self, trial: Any) -> None:
        if self.native:
            self.storage.record_heartbeat(trial._trial_id)
        else:
            self.storage.set_trial_system_attr(trial._trial_id, JOURNAL_HEARTBEAT, time.time())

    def take_over(self) -> None:
        """Fail the study's trials whose heartbeat is stale, so that Optuna's callback queues
        them again for whichever worker asks next (failing is atomic: one worker wins)."""
        if time.monotonic() - self._last_check < self.interval:
            return
        self._last_check = time.monotonic()
        self._take_over_unmarked()
        if self.native:
            self.optuna.storages.fail_stale_trials(self.study)
            return
        states = self.optuna.trial.TrialState
        for trial in self.study.get_trials(deepcopy=False, states=(states.RUNNING,)):
            if time.time() - _last_heartbeat(trial) > GRACE * self.interval:
                self._fail_and_queue(trial, MAX_TAKEOVERS)

    def _take_over_unmarked(self) -> None:
        """Queue again, at once, the running trials seen unmarked (an earlier rltrain's) since
        at least one heartbeat ago, once the lock that rltrain held is free."""
        states = self.optuna.trial.TrialState
        now = time.monotonic()  # before the read: a trial marked since is not handed back late
        unmarked = {t._trial_id: t for t in
                    self.study.get_trials(deepcopy=False, states=(states.RUNNING,))
                    if not marked(t)}
        self._unmarked = {i: self._unmarked.get(i, now) for i in unmarked}
        if self.old_lock is None or held(self.old_lock):
            return
        for i, trial in unmarked.items():
            if now - self._unmarked[i] >= self.interval:
                self.hand_back(trial)

    def hand_back(self, trial: Any) -> None:
        """Give up ``trial`` (its run stopped with a checkpoint): queued again at once for
        whichever worker asks next, whatever times it was before."""
        self.release(trial)
        self._fail_and_queue(trial, None)

    def _fail_and_queue(self, trial: Any, times: int | None) -> None:
        states = self.optuna.trial.TrialState
        try:
            won = self.storage.set_trial_state_values(trial._trial_id, state=states.FAIL)
        except self.optuna.exceptions.UpdateFinishedTrialError:
            return  # another worker failed it first
        if won:
            _retry(self.optuna, times)(self.study, self.storage.get_trial(trial._trial_id))


def held(path: Path) -> bool:
    """Whether a process holds ``path`` locked (``flock``); False when it does not exist."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def marked(trial: Any) -> bool:
    """Whether ``trial``'s worker marked it as one whose heartbeats it keeps (:data:`BEATING`)."""
    mark = trial.user_attrs.get(BEATING)
    if mark is True:  # an earlier rltrain's mark: its own only on a first attempt
        return "failed_trial" not in trial.system_attrs
    return type(mark) is int and mark == trial.number


def _last_heartbeat(trial: Any) -> float:
    """A journal trial's last heartbeat (seconds since the epoch): the later of the recorded one
    and its start (a queued attempt inherits the failed one's last heartbeat, and starts when
    a worker takes it); its start alone when the recorded value is not a number (the journal is
    untrusted)."""
    start = trial.datetime_start
    started = start.timestamp() if isinstance(start, datetime) else 0.0
    value = trial.system_attrs.get(JOURNAL_HEARTBEAT)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(float(value), started)
    return started


def run_number(trial: Any) -> int:
    """The number of the trial's run (``STUDY/trial-NNNN``): its first attempt's, when it is a
    trial queued again after its worker died, else its own."""
    first = trial.system_attrs.get("failed_trial")
    if type(first) is int and 0 <= first < trial.number:
        return first
    return int(trial.number)

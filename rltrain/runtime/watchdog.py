"""Deadlines on the main thread's environment calls, so that a hung env step cannot hang a
run for ever, and the way out when the main thread cannot run Python at all.

- :func:`watch_env_calls`: within it, an env call of the main thread that passes its deadline
  (``env_step_timeout``, or a stop signal's grace) gets :class:`EnvCallHung` raised inside it
  by SIGALRM (``signal.setitimer``): Python code and the C calls that return on a signal
  (``time.sleep``, waits on pipes, sockets and locks) are interrupted.
- its watchdog thread: when the main thread cannot run Python (a C call that retries on
  signals, such as ``os.system``), a call still running :data:`STUCK_MARGIN` seconds after
  its deadline, a stop signal unanswered that long after its grace, or two unanswered stop
  signals end the child processes (the env workers) and the process.

A C call that holds the GIL and never returns (some compiled extensions) stops every thread:
only SIGKILL ends it. Environments in worker processes (``vectorization="async"``) have none
of these limits: the main process waits on pipes, and ends the workers.
:func:`~rltrain.runtime.interrupt.stop_on_signals` (Ctrl-C and SIGTERM) runs within
:func:`watch_env_calls`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds an env step or reset in progress when a stop signal arrives may still take before
#: it is interrupted as hung.
STOP_GRACE = 5.0
#: Seconds past a missed deadline (or a stop signal's grace) after which an env call still
#: running is given up as uninterruptible, and the process ends.
STUCK_MARGIN = 2.0
#: Seconds two unanswered stop signals are given before the process ends.
SECOND_SIGNAL_MARGIN = 1.0
#: The exit status of a process ended for a call past its deadline (the CLI's "training
#: failed"); after unanswered stop signals it is 128 + the last signal's number.
EXIT_STUCK = 3


class EnvCallHung(BaseException):
    """An env step or reset did not return within its deadline: raised inside it by SIGALRM
    (main thread, within :func:`watch_env_calls`), or as it returns when it returned too late.
    A ``BaseException``, so that an environment's own ``except Exception`` cannot swallow it;
    the runner turns it into an :class:`~rltrain.envs.errors.EnvStepTimeout` naming the sub-env and
    the setting.

    Attributes:
        why: The deadline missed, in words: ``"env_step_timeout=0.5 s"`` or
            ``"5 s of SIGTERM"``.
        took: Seconds the call took, when it returned (late); None when it was interrupted.
        sub_envs: The sub-envs that had not answered, when known (async workers); else empty.
    """

    def __init__(self, why: str, *, took: float | None = None,
                 sub_envs: Sequence[int] = ()) -> None:
        super().__init__(why)
        self.why, self.took, self.sub_envs = why, took, list(sub_envs)


class EnvCallWatch:
    """The main thread's env call in progress, its deadline and the stop signals seen: one per
    process, :data:`WATCH` (signals and the real-time interval timer are the process's).

    Runners mark each env call with :meth:`begin` and :meth:`end` (a fraction of a microsecond
    without a deadline). Within :func:`watch_env_calls`, a call with a deadline arms
    ``signal.setitimer(ITIMER_REAL)``, and SIGALRM raises :class:`EnvCallHung` inside the call
    once the deadline has passed.
    """

    def __init__(self) -> None:
        #: Nesting of :func:`watch_env_calls` blocks (0: no alarm is installed).
        self.depth = 0
        #: An env call is in progress; ``calls`` counts those begun (tells one from the next).
        self.active, self.calls = False, 0
        self.timeout: float | None = None
        self.started = 0.0
        #: The call's deadline (``time.monotonic()``) and the reason for it, while armed.
        self.deadline: float | None = None
        self.why = ""
        #: The last stop signal's name and time, while :func:`stop_on_signals` runs.
        self.stop_signal: tuple[str, float] | None = None
        #: :func:`stop_on_signals`' handler while installed, and its runs per signal.
        self.stop_handler: Callable[[int, FrameType | None], None] | None = None
        self.answered: dict[int, int] = {}
        self.alarm_handler = self.on_alarm

    def begin(self, timeout: float | None) -> None:
        """An env call starts; it may run ``timeout`` seconds (None: no limit)."""
        self.active, self.timeout = True, timeout
        self.calls += 1
        if self.depth and (timeout is not None or self.stop_signal is not None):
            self.started = time.monotonic()
            self._arm()

    def end(self) -> None:
        """The env call returned (or raised)."""
        self.active = False
        if self.deadline is not None:
            self.deadline = None
            signal.setitimer(signal.ITIMER_REAL, 0)

    def answer(self, signum: int) -> None:
        """A stop signal's handler ran (the main thread runs Python)."""
        self.answered[signum] = self.answered.get(signum, 0) + 1

    def stop_signalled(self, name: str) -> None:
        """A stop was asked by the signal ``name``: the env call in progress (or the next)
        gets :data:`STOP_GRACE` seconds."""
        self.stop_signal = (name, time.monotonic())
        if self.active and self.depth:
            self._arm()

    def _arm(self) -> None:
        deadlines = []
        if self.timeout is not None:
            deadlines.append((self.started + self.timeout,
                              f"env_step_timeout={self.timeout:g} s"))
        if self.stop_signal is not None:
            name, at = self.stop_signal
            deadlines.append((max(at, self.started) + STOP_GRACE, f"{STOP_GRACE:g} s of {name}"))
        self.deadline, self.why = min(deadlines)
        signal.setitimer(signal.ITIMER_REAL, max(self.deadline - time.monotonic(), 1e-4))

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        """SIGALRM's handler: raise :class:`EnvCallHung` in the call past its deadline."""
        if not self.active or self.deadline is None:
            return
        left = self.deadline - time.monotonic()
        if left > 1e-3:  # the timer fired early: wait for the rest
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        raise EnvCallHung(self.why)


#: The process's env call watch (signals and the interval timer are per process).
WATCH = EnvCallWatch()


def call_within(timeout: float | None, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, an env step or reset, within its deadline.

    In the main thread within :func:`watch_env_calls`, the call is interrupted by
    :class:`EnvCallHung` once it has run ``timeout`` seconds (None: no limit), or
    :data:`STOP_GRACE` seconds after a stop signal. Elsewhere nothing can interrupt it: a call
    that returns later than ``timeout`` raises :class:`EnvCallHung` as it returns.
    """
    watch = WATCH if threading.get_ident() == threading.main_thread().ident else None
    started = time.monotonic() if timeout is not None else 0.0
    if watch is not None:
        watch.begin(timeout)
    try:
        result = call(*args, **kwargs)
    finally:
        if watch is not None:
            watch.end()
    took = time.monotonic() - started if timeout is not None else 0.0
    if timeout is not None and took > timeout:
        raise EnvCallHung(f"env_step_timeout={timeout:g} s", took=took)
    return result


class _Watchdog:
    """A thread that ends the process when its main thread cannot run Python: an env call
    still running :data:`STUCK_MARGIN` seconds after its deadline, a stop signal unanswered
    ``STOP_GRACE + STUCK_MARGIN`` seconds into the env call it arrived in, or two stop signals
    unanswered for :data:`SECOND_SIGNAL_MARGIN` seconds. It sees each signal arrive through
    ``signal.set_wakeup_fd``, and its handler's runs in ``watch.answered``."""

    def __init__(self, watch: EnvCallWatch) -> None:
        self.watch, self.base = watch, dict(watch.answered)
        self.reader, self.writer = socket.socketpair()
        self.writer.setblocking(False)
        self.reader.settimeout(0.25)
        #: Per stop signal: (arrival time, the env call in progress then or None), in order.
        self.arrivals: dict[int, list[tuple[float, int | None]]] = {}
        self.closing = False
        self.previous = signal.set_wakeup_fd(self.writer.fileno(), warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self.run, name="rltrain-env-watchdog",
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous)
        self.closing = True
        with contextlib.suppress(OSError):
            self.writer.send(b"\0")
        self.thread.join(timeout=5.0)
        self.reader.close()
        self.writer.close()

    def run(self) -> None:
        watch = self.watch
        while not self.closing:
            try:
                data = self.reader.recv(256)
            except TimeoutError:
                data = b""
            except OSError:
                return
            now = time.monotonic()
            for signum in data:
                if (signum in (signal.SIGINT, signal.SIGTERM) and watch.stop_handler is not None
                        and signal.getsignal(signum) is watch.stop_handler):
                    self.arrivals.setdefault(signum, []).append(
                        (now, watch.calls if watch.active else None))
            verdict = self.verdict(now)
            if verdict is not None and not self.closing:
                end_process(*verdict)

    def unanswered(self, signum: int) -> list[tuple[float, int | None]]:
        answered = self.watch.answered.get(signum, 0) - self.base.get(signum, 0)
        return self.arrivals.get(signum, [])[max(answered, 0):]

    def verdict(self, now: float) -> tuple[str, int] | None:
        """Why and with which status the process must end now; None while it need not."""
        watch = self.watch
        deadline, call = watch.deadline, watch.calls if watch.active else None
        if call is not None and deadline is not None and now - deadline >= STUCK_MARGIN:
            return (f"an environment call passed its deadline ({watch.why}) "
                    f"{now - deadline:.0f} s ago and could not be interrupted: the main "
                    "thread is stuck in a C call that ignores signals.", EXIT_STUCK)
        stops = sorted((at, during, signum) for signum in (signal.SIGINT, signal.SIGTERM)
                       for at, during in self.unanswered(signum))
        if len(stops) >= 2 and now - stops[-1][0] >= SECOND_SIGNAL_MARGIN:
            names = " and ".join(signal.Signals(signum).name for _, _, signum in stops)
            return (f"{names} went unanswered: the main thread is stuck in a C call that "
                    "ignores signals.", 128 + stops[-1][2])
        for at, during, signum in stops:
            if during is not None and during == call and now - at >= STOP_GRACE + STUCK_MARGIN:
                return (f"an environment call did not return within {now - at:.0f} s of "
                        f"{signal.Signals(signum).name}, and cannot be interrupted: the main "
                        "thread is stuck in a C call that ignores signals.", 128 + signum)
        return None


def end_processes(processes: Sequence[BaseProcess], wait: float = 0.0,
                  grace: float = 1.0) -> None:
    """End ``processes``: each has ``wait`` seconds to exit on its own, then SIGTERM, then
    SIGKILL for those alive ``grace`` seconds later."""
    end = time.monotonic() + wait
    for process in processes:
        process.join(max(end - time.monotonic(), 0.0))
    alive = [process for process in processes if process.is_alive()]
    for process in alive:
        with contextlib.suppress(Exception):
            process.terminate()
    end = time.monotonic() + grace
    for process in alive:
        process.join(max(end - time.monotonic(), 0.0))
        if process.is_alive():
            with contextlib.suppress(Exception):
                process.kill()
                process.join(grace)


def end_process(reason: str, status: int) -> None:
    """Say ``reason`` on stderr, end the child processes (``multiprocessing``'s: the env
    workers) and exit at once with ``status``: the watchdog's way out when the main thread
    cannot run Python."""
    with contextlib.suppress(OSError):
        os.write(2, (f"rltrain: {reason} Exiting now, without saving; the env worker "
                     "processes are ended.\n").encode())
    end_processes(multiprocessing.active_children())
    os._exit(status)


@contextlib.contextmanager
def watch_env_calls() -> Iterator[None]:
    """Within the block, the main thread's env calls (:func:`call_within`) that pass their
    deadline are interrupted (SIGALRM's handler and the interval timer are the block's), and a
    watchdog thread ends the process when the main thread is stuck in C code (module
    docstring). Nested blocks share the outermost's. Outside the main thread (or without
    ``signal.setitimer``) it does nothing: calls are checked as they return."""
    watch = WATCH
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        yield
        return
    if watch.depth:
        watch.depth += 1
        try:
            yield
        finally:
            watch.depth -= 1
        return
    previous = signal.signal(signal.SIGALRM, watch.alarm_handler)
    watch.depth = 1
    try:
        with contextlib.closing(_Watchdog(watch)):
            yield
    finally:
        watch.depth = 0
        watch.end()
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)


def exit_words(code: int) -> str:
    """A process's exit status in words: ``exit 3``, or ``killed by SIGTERM`` for ``-15``."""
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"

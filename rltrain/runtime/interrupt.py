"""A thread-safe stop request, checked by the training loop; Ctrl-C and SIGTERM as stop
requests (:func:`stop_on_signals`): the first asks for a graceful stop, and an env step or
reset in progress then has :data:`~rltrain.runtime.watchdog.STOP_GRACE` seconds to return before it
is interrupted (:mod:`rltrain.runtime.watchdog`); a second SIGINT aborts at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from rltrain.runtime.watchdog import WATCH, watch_env_calls


class Interrupter:
    """Ask a running training loop to stop, from any thread.

    The loop checks :meth:`stop_requested` at every env step, gradient step and evaluation step,
    finishes the step it is in and returns its result with the policy trained so far.

    Example:

        interrupter = Interrupter()
        threading.Timer(60.0, interrupter.stop, args=("time budget",)).start()
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        #: The request has ended a run (:meth:`end_run`): the next run starts without it.
        self._honoured = False

    def stop(self, reason: str = "stop requested") -> None:
        """Request a stop. The first reason given is kept; later calls change nothing until
        the request has ended a run, after which a call is a new request."""
        with self._lock:
            if self._reason is None or self._honoured:
                self._reason, self._honoured = reason, False
            self._event.set()

    def stop_requested(self) -> bool:
        """True once :meth:`stop` was called (and the request not cleared since)."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to the first :meth:`stop`, or None while no stop is requested."""
        with self._lock:
            return self._reason

    def reset(self) -> None:
        """Clear the request, whoever made it and whenever."""
        with self._lock:
            self._reason, self._honoured = None, False
            self._event.clear()

    def begin_run(self) -> None:
        """A run starts: clear the request that ended the previous run, and keep any other.

        A request made before the run began (a thread that called :meth:`stop` just after
        starting ``fit`` in another thread, a timer that fired early) ends this run at its
        first step; it is never dropped."""
        with self._lock:
            if self._honoured:
                self._reason, self._honoured = None, False
                self._event.clear()

    def end_run(self) -> None:
        """A run ended: a request standing now was this run's, and :meth:`begin_run` of the
        next one clears it (it still reads as requested until then)."""
        with self._lock:
            self._honoured = self._event.is_set()


@contextlib.contextmanager
def stop_on_signals(interrupter: Interrupter) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM request a stop instead of killing the process.

    The first SIGINT (Ctrl-C) or SIGTERM (a cluster's preemption notice) calls
    ``interrupter.stop``; the loop then finishes its step, saves and returns. An env step or
    reset in progress gets :data:`STOP_GRACE` seconds to return, then is interrupted as hung
    (the run fails as on an environment error, after an emergency checkpoint). A second SIGINT
    raises ``KeyboardInterrupt`` at once. The block runs within :func:`watch_env_calls` (its
    watchdog ends a process stuck in C code). The previous handlers are restored on exit.
    Signal handlers can only be installed from the main thread; elsewhere (a worker thread,
    some notebook kernels) the block runs with the handlers untouched.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum: int, frame: FrameType | None) -> None:
        WATCH.answer(signum)
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and interrupter.stop_requested():
            raise KeyboardInterrupt(f"second {name}: aborting without saving")
        interrupter.stop(f"{name} received")
        WATCH.stop_signalled(name)

    with watch_env_calls():
        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT,
                                                                      signal.SIGTERM)}
        WATCH.stop_handler = request_stop
        try:
            yield
        finally:
            WATCH.stop_handler, WATCH.stop_signal = None, None
            for sig, handler in previous.items():
                signal.signal(sig, handler)

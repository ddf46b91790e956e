"""A thread-safe stop request, checked by the training loop."""

from __future__ import annotations

import threading


class Interrupter:
    """Ask a running training loop to stop, from any thread.

    The loop checks :meth:`should_stop` at every env step, gradient step and evaluation step,
    finishes the step it is in and returns its result with the policy trained so far.

    Example::

        interrupter = Interrupter()
        threading.Timer(60.0, interrupter.stop, args=("time budget",)).start()
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None

    def stop(self, reason: str = "stop requested") -> None:
        """Request a stop. The first reason given is kept; later calls change nothing."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
            self._event.set()

    def should_stop(self) -> bool:
        """True once :meth:`stop` was called (and not :meth:`reset` since)."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to the first :meth:`stop`, or None while no stop is requested."""
        with self._lock:
            return self._reason

    def reset(self) -> None:
        """Clear the request, so the same interrupter can serve another run."""
        with self._lock:
            self._reason = None
            self._event.clear()

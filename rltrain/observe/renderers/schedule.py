"""When interval-based renderers write: every ``interval`` env steps, and once at the end."""

from __future__ import annotations

from rltrain.runtime.cadence import next_multiple
from rltrain.settings.base import Bounds, check_setting

#: Env steps between rows (``TrainerConfig.log_interval``).
LOG_INTERVAL = Bounds(ge=1, unit="env steps")


class LogSchedule:
    """Tracks an env-step interval for a renderer that writes rows (TensorBoard, JSONL).

    Args:
        interval: Env steps between rows (>= 1).
    """

    def __init__(self, interval: int) -> None:
        check_setting("log_interval", interval, LOG_INTERVAL)
        self.interval = interval
        self._next = interval
        self._last: int | None = None

    def start(self, env_steps: int) -> None:
        """A run starts (or resumes) at ``env_steps``; rows stay on multiples of the interval.
        A resumed run's first step was written by the run it continues: a run that resumes
        with nothing left to do writes no final row (its speed, ``time/sps``, would be 0)."""
        self._next = next_multiple(env_steps, self.interval)
        self._last = env_steps if env_steps > 0 else None

    def due(self, env_steps: int) -> bool:
        """True (and remembered as written) when ``env_steps`` reached the next interval."""
        if env_steps < self._next:
            return False
        self._next = next_multiple(env_steps, self.interval)
        self._last = env_steps
        return True

    def final_due(self, env_steps: int) -> bool:
        """True at the end unless a row was already written at ``env_steps``."""
        if self._last == env_steps:
            return False
        self._last = env_steps
        return True

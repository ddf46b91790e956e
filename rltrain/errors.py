"""Errors: the one a run raises when it fails while training (as opposed to bad input before
it), the check every config dataclass makes of its fields, and where a warning about the
user's input points (:func:`user_stacklevel`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def require(owner: str, checks: Iterable[tuple[bool, str]]) -> None:
    """Raise ``ValueError("<owner>: <message>")`` for the first check that is not ok: how the
    config dataclasses check their fields (``require("DQNConfig", [(lr > 0, "lr must be > 0;
    got ...")])``)."""
    for ok, message in checks:
        if not ok:
            raise ValueError(f"{owner}: {message}")


class TrainingError(RuntimeError):
    """Training failed part-way: an environment, the agent, a callback or the disk raised.

    The message names the phase (``collect``, ``train``, ``evaluate``, ``save``), the env step,
    the sub-env where known, the original error, and what was saved; the original error is the
    ``__cause__``.

    Attributes:
        phase: What the run was doing.
        env_steps: Env steps done when it failed.
        sub_env: The sub-environment that raised, when an environment did.
        checkpoint: The emergency checkpoint saved after the failure (None when none could be).
    """

    def __init__(self, message: str, *, phase: str, env_steps: int,
                 sub_env: int | None = None, checkpoint: Path | None = None) -> None:
        super().__init__(message)
        self.phase = phase
        self.env_steps = env_steps
        self.sub_env = sub_env
        self.checkpoint = checkpoint


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that names the first caller outside rltrain
    (the user's ``fit``, say), counted from the function that calls ``warnings.warn``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(PACKAGE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level

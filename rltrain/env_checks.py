"""What rltrain checks of a user's environment before a run writes anything.

:func:`time_limit` finds the episode cap an environment has, if any; :func:`warn_no_time_limit`
warns at ``fit`` when there is none (an episode that never terminates would never end).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym

PACKAGE = Path(__file__).resolve().parent

#: Attributes under which environments keep a step limit of their own, enforced inside
#: ``step`` rather than by a ``TimeLimit`` wrapper (MiniGrid's ``max_steps``, for instance).
OWN_LIMITS = ("max_steps", "max_episode_steps", "_max_episode_steps")


def layers(env: gym.Env[Any, Any]) -> Iterator[gym.Env[Any, Any]]:
    """``env`` and every environment it wraps, outermost first (the unwrapped one last)."""
    while True:
        yield env
        inner = getattr(env, "env", None) if isinstance(env, gym.Wrapper) else None
        if not isinstance(inner, gym.Env):
            return
        env = inner


def time_limit(env: gym.Env[Any, Any]) -> int | None:
    """The most env steps an episode of ``env`` lasts: a ``TimeLimit`` wrapper's, the
    registered ``max_episode_steps``, or a limit the environment keeps itself (one of
    :data:`OWN_LIMITS`, an int); None when there is none of these."""
    for layer in layers(env):
        if isinstance(layer, gym.wrappers.TimeLimit):
            return int(layer._max_episode_steps)
    spec = getattr(env, "spec", None)
    if spec is not None and spec.max_episode_steps is not None:
        return int(spec.max_episode_steps)
    for name in OWN_LIMITS:
        value = getattr(env.unwrapped, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def warn_no_time_limit(env: gym.Env[Any, Any], name: str,
                       eval_max_episode_steps: int | None) -> None:
    """Warn when ``env`` (called ``name``) has no time limit (:func:`time_limit`), saying what
    that does to training and evaluation, and how to give it one."""
    if time_limit(env) is not None:
        return
    evaluation = ("each evaluation episode runs until it terminates, forever if it never does "
                  "(eval_max_episode_steps=None)" if eval_max_episode_steps is None else
                  f"each evaluation episode runs until it terminates or reaches "
                  f"eval_max_episode_steps ({eval_max_episode_steps:,} env steps)")
    warnings.warn(
        f"The environment {name!r} has no time limit (no gymnasium.wrappers.TimeLimit, no "
        f"max_episode_steps in its spec): an episode that never terminates never ends, so "
        f"training would record no episode returns, and {evaluation}. Give it one: "
        f"gymnasium.wrappers.TimeLimit(env, max_episode_steps=...) in the callable that makes "
        f"it, or gymnasium.register(..., max_episode_steps=...).", UserWarning,
        stacklevel=user_stacklevel())


def check_env(env: gym.Env[Any, Any], name: str, *,
              eval_max_episode_steps: int | None) -> None:
    """Check the environment ``env`` (called ``name`` in messages) before a run writes
    anything: warn when it has no time limit."""
    warn_no_time_limit(env, name, eval_max_episode_steps)


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that names the first caller outside rltrain
    (the user's ``fit``), counted from the function that calls ``warnings.warn``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(PACKAGE):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level

"""MuJoCo's warnings as Python warnings (:class:`MujocoWarning`), shown once each, instead of
MuJoCo's own handling: a line on stderr and a line appended to ``MUJOCO_LOG.TXT`` in the
working directory, a file rltrain would otherwise leave in every folder a run starts from.
"""

from __future__ import annotations

import sys
import warnings

import gymnasium as gym

#: The module of Gymnasium's MuJoCo envs.
MUJOCO_ENVS = "gymnasium.envs.mujoco"


class MujocoWarning(Warning):
    """A warning MuJoCo raised (a deprecated model attribute, an unstable simulation, ...)."""


def route_mujoco_warnings(env_id: str | None) -> None:
    """Send MuJoCo's warnings to :func:`warnings.warn` in this process, before ``env_id`` is
    made, when it is one of Gymnasium's MuJoCo envs or MuJoCo is already imported; a handler
    someone else installed is left in place."""
    spec = gym.registry.get(env_id) if env_id is not None else None
    point = getattr(spec, "entry_point", None)
    ours = isinstance(point, str) and point.startswith(MUJOCO_ENVS)
    if not ours and "mujoco" not in sys.modules:
        return
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warn)


def _warn(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", MujocoWarning, stacklevel=2)

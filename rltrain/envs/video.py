"""Videos of evaluation episodes: sub-env 0 of the evaluation's vector env, made with
``render_mode="rgb_array"`` and recorded by Gymnasium's ``RecordVideo`` (which needs MoviePy;
imageio's FFmpeg writes the files: ``pip install 'rltrain[video]'``).

Only sub-env 0 is recorded, so the files of several sub-envs never overwrite each other; it
runs ``episodes // num_envs`` of an evaluation's episodes (the first of them when there are
more sub-envs than that), each written as ``<prefix>-episode-<k>.mp4`` with one frame for the
reset and one per env step.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import RecordVideo

from rltrain.envs.make import EnvInit, EnvSpec, env_factory, env_name

RENDER_MODE = "rgb_array"


def check_video_support() -> None:
    """Raise ``ImportError`` naming the extra when MoviePy (which RecordVideo requires) or
    imageio's FFmpeg (which writes the files) is missing."""
    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401
    except ImportError as error:
        raise ImportError(f"Recording videos needs MoviePy and imageio's FFmpeg ({error}): "
                          "pip install 'rltrain[video]' (in a clone of rltrain: "
                          "pip install -e '.[video]').") from error


def check_rendering(env: EnvInit) -> None:
    """Before a run or an evaluation that records videos writes anything: the video libraries
    are installed (:func:`check_video_support`) and ``env`` renders a frame (made with
    ``render_mode="rgb_array"``, reset, rendered once). Raises ``ImportError`` naming what to
    install (pygame for Gymnasium's classic-control envs) or ``ValueError``."""
    check_video_support()
    name = env_name(env)
    probe = _checked(rendering_env(env), name)
    try:
        probe.reset(seed=0)
        frame = probe.render()
    except (ImportError, gym.error.DependencyNotInstalled) as error:
        raise ImportError(
            f"Recording videos of {name!r} cannot render its frames ({error}). Install what "
            "it renders with: pip install 'rltrain[video]' (it has pygame for Gymnasium's "
            "classic-control envs; in a clone of rltrain: pip install -e '.[video]').") from None
    finally:
        probe.close()
    if frame is None or getattr(frame, "ndim", 0) != 3:
        raise ValueError(f"Cannot record a video of {name!r}: render() with render_mode="
                         f"{RENDER_MODE!r} returned {type(frame).__name__}, not an RGB frame "
                         "(height x width x 3).")


def rendering_env(env: EnvInit) -> Callable[[], gym.Env[Any, Any]]:
    """A callable making ``env`` with ``render_mode="rgb_array"``: a Gymnasium id or an
    :class:`~rltrain.envs.make.EnvSpec` gets it in its keyword arguments (an env class named by
    ``target`` must take ``render_mode``, as Gymnasium's do); a callable of your own cannot be
    changed, so it must make its env with that mode itself (checked when it is made)."""
    if isinstance(env, str):
        return EnvSpec(env, kwargs={"render_mode": RENDER_MODE})
    if isinstance(env, EnvSpec):
        return dataclasses.replace(env, kwargs={**env.kwargs, "render_mode": RENDER_MODE})
    return env_factory(env)


def _checked(factory: Callable[[], gym.Env[Any, Any]], name: str) -> gym.Env[Any, Any]:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # No screen: SDL (pygame's renderer) needs no video device for rgb_array frames, and
        # without this prints "error: XDG_RUNTIME_DIR is invalid" looking for one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = factory()
    except TypeError as error:
        if "render_mode" not in str(error):
            raise
        raise ValueError(f"Cannot record a video of {name!r}: it does not take "
                         f"render_mode={RENDER_MODE!r} ({error}).") from error
    if env.render_mode != RENDER_MODE:
        raise ValueError(
            f"Cannot record a video of {name!r}: its env was made with render_mode="
            f"{env.render_mode!r}, and a video needs {RENDER_MODE!r}. A callable of your own "
            f"must make its env with render_mode={RENDER_MODE!r} (or pass a Gymnasium id or an "
            "EnvSpec, whose render_mode rltrain sets).")
    return env


class EpisodeRecorder(RecordVideo):
    """``RecordVideo`` around one sub-env, recording only the episodes :meth:`plan` asks for:
    the next ``episodes`` episodes (from the next reset), as ``<prefix>-episode-<k>.mp4``."""

    def __init__(self, env: gym.Env[Any, Any], folder: str | Path) -> None:
        with warnings.catch_warnings():  # file names hold the env steps: nothing is replaced
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
            super().__init__(env, video_folder=str(folder), episode_trigger=self._due,
                             disable_logger=True)
        self._first, self._episodes = 0, 0

    def plan(self, prefix: str, episodes: int) -> None:
        """Record the next ``episodes`` episodes (0: none) under ``prefix``."""
        if self.recording:  # an episode cut short by a stop: written as it is
            self.stop_recording()
        self.name_prefix, self._first, self._episodes = prefix, self.episode_id + 1, episodes

    def _due(self, episode_id: int) -> bool:
        return 0 <= episode_id - self._first < self._episodes

    def stop_recording(self) -> None:
        """Write the recorded frames as ``<name>.mp4``, every one of them (MoviePy's writer,
        RecordVideo's own, drops the last frame of some lengths), and stop recording."""
        import imageio

        frames: list[Any] = list(self.recorded_frames)
        name = self._video_name
        self.recorded_frames, self.recording, self._video_name = [], False, None
        if frames:  # even sides for H.264 (an odd side is padded by one pixel)
            imageio.mimwrite(Path(self.video_folder) / f"{name}.mp4", frames,
                             fps=self.frames_per_sec, macro_block_size=2)

    def start_recording(self, video_name: str) -> None:
        """Name the file by the episode's place in the planned ones (``-episode-0`` first)."""
        super().start_recording(f"{self.name_prefix}-episode-{self.episode_id - self._first}")


def recorded_env(env: EnvInit, folder: str | Path,
                 wrap: Callable[[Callable[[], gym.Env[Any, Any]]], gym.Env[Any, Any]] | None
                 = None) -> Callable[[], EpisodeRecorder]:
    """A callable making ``env`` for rendering (:func:`rendering_env`), wrapped by ``wrap``
    (a function of the factory, e.g. a time limit) and recorded into ``folder``."""
    check_video_support()
    factory = functools.partial(_checked, rendering_env(env), env_name(env))
    return functools.partial(_recorder, factory, Path(folder), wrap)


def _recorder(factory: Callable[[], gym.Env[Any, Any]], folder: Path,
              wrap: Callable[[Callable[[], gym.Env[Any, Any]]], gym.Env[Any, Any]] | None
              ) -> EpisodeRecorder:
    return EpisodeRecorder(factory() if wrap is None else wrap(factory), folder)


def find_recorder(env: gym.Env[Any, Any]) -> EpisodeRecorder:
    """The :class:`EpisodeRecorder` among ``env``'s wrappers."""
    current: Any = env
    while not isinstance(current, EpisodeRecorder):
        if not isinstance(current, gym.Wrapper):
            raise ValueError("No EpisodeRecorder around this environment.")
        current = current.env
    return current

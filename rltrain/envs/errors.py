"""What goes wrong with environments: one that cannot be made (:class:`EnvError`), a
sub-environment that raised (:class:`SubEnvError`) or hung (:class:`EnvStepTimeout`)."""

from __future__ import annotations


class EnvError(ValueError):
    """An environment could not be made, or is not a Gymnasium environment."""


class SubEnvError(RuntimeError):
    """A sub-environment of a vector env raised; ``index`` names it.

    Rebuilt from itself by ``AsyncVectorEnv`` (which re-raises a worker's error as
    ``type(error)(error)``), so the index survives the trip from the worker process.
    """

    def __init__(self, message: str | BaseException, index: int | None = None) -> None:
        if isinstance(message, SubEnvError):
            index, message = message.index, str(message)
        super().__init__(str(message))
        self.index: int | None = index


class EnvStepTimeout(SubEnvError):
    """A sub-environment's step or reset did not return within ``env_step_timeout``, or within
    :data:`~rltrain.runtime.watchdog.STOP_GRACE` seconds of a stop signal; ``index`` names the
    (first) sub-env that did not, when known."""

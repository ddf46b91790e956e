"""Environment creation: Gymnasium ids or callables, vectorized, seeded and checked."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rltrain.targets import TRUSTED, Trust, import_modules, locate

Vectorization = Literal["sync", "async"]


@dataclass(frozen=True)
class EnvSpec:
    """An environment by Gymnasium id or by import path, with keyword arguments and wrappers.

    Instances are callables that make one environment, and pickle (for ``AsyncVectorEnv``) as
    long as the wrappers do (classes, ``functools.partial`` of classes and
    :class:`~rltrain.targets.Target` do; lambdas do not).

    Attributes:
        id: A registered Gymnasium id, e.g. ``"CartPole-v1"``, or Gymnasium's
            ``"module:EnvId"`` (the module is imported first; it registers the id).
        kwargs: Keyword arguments for ``gymnasium.make`` (or for ``target``). Default none.
        wrappers: Applied in order to the made environment, e.g.
            ``(gymnasium.wrappers.NormalizeReward,)``. Default none.
        imports: Modules imported before the env is made (packages that register their ids,
            e.g. ``("minigrid",)``). Default none.
        target: Instead of ``id``: the import path of an env class or of a function returning
            an env (``"my_envs.Corridor"``), called with ``kwargs``. Default None.
    """

    id: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: Sequence[Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]] = ()
    imports: Sequence[str] = ()
    target: str | None = None

    def __post_init__(self) -> None:
        if (self.id is None) == (self.target is None):
            raise ValueError("An EnvSpec names its environment by id or by target (an import "
                             f"path), exactly one; got id={self.id!r}, target={self.target!r}.")
        import_modules(self.imports)
        if self.id is not None:
            check_env_id(self.id)

    def __call__(self) -> gym.Env[Any, Any]:
        import_modules(self.imports)
        env: gym.Env[Any, Any]
        if self.target is not None:
            env = locate(self.target)(**dict(self.kwargs))
        else:
            assert self.id is not None
            env = gym.make(self.id, **dict(self.kwargs))
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


#: What a strategy accepts as an environment: an id, an :class:`EnvSpec`, or a callable making one.
EnvInit = Union[str, EnvSpec, Callable[[], gym.Env[Any, Any]]]


def check_env_id(env_id: str, trust: Trust = TRUSTED) -> None:
    """Raise ``ValueError`` naming the closest registered ids when ``env_id`` is not registered;
    a ``"module:EnvId"`` id imports its module first, as ``gymnasium.make`` does."""
    module, sep, name = env_id.rpartition(":")
    if sep:
        import_modules([module], trust, what="env.id")
        env_id = name
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"Unknown Gymnasium environment id {env_id!r}.{hint} Registered ids are listed by "
        "`python -c 'import gymnasium; gymnasium.pprint_registry()'`; an environment from another "
        "package needs that package imported (or pass a callable that makes the env)."
    )


def env_factory(env: EnvInit) -> Callable[[], gym.Env[Any, Any]]:
    """A callable that makes one environment from an id, an :class:`EnvSpec` or a callable."""
    if isinstance(env, str):
        return EnvSpec(env)
    if callable(env):
        return env
    raise TypeError(
        f"An environment must be a Gymnasium id, an EnvSpec or a callable returning a "
        f"gymnasium.Env; got {type(env).__name__}."
    )


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


def make_probe_env(env: EnvInit) -> gym.Env[Any, Any]:
    """One environment, made to check its spaces before training. A failure to make it is an
    :class:`EnvError` naming the environment and what to fix."""
    factory = env_factory(env)
    kwargs = dict(env.kwargs) if isinstance(env, EnvSpec) else {}
    what = f"{env_name(env)!r}" + (f" with kwargs {kwargs}" if kwargs else "")
    try:
        made = factory()
    except (ImportError, gym.error.DependencyNotInstalled) as error:
        raise EnvError(f"Cannot make the environment {what}: a package it needs is missing "
                       f"({error}). Install it, e.g. pip install 'gymnasium[box2d]' for Box2D "
                       "environments.") from error
    except TypeError as error:
        reason = str(error).split(" was raised from the environment creator")[0]
        raise EnvError(f"Cannot make the environment {what}: {reason}. Check its keyword "
                       "arguments (env.kwargs) against the environment's constructor.") from error
    except Exception as error:
        raise EnvError(f"Cannot make the environment {what}: {type(error).__name__}: "
                       f"{error}.") from error
    if not isinstance(made, gym.Env):
        raise EnvError(f"The environment callable {what} returned a {type(made).__name__}, "
                       "not a gymnasium.Env.")
    return made


class _SubEnv(gym.Wrapper[Any, Any, Any, Any]):
    """Sub-env ``index`` of a vector env: its own spaces seeded from the run's seed (not from
    OS entropy), and its failures raised as :class:`SubEnvError` naming it."""

    def __init__(self, env: gym.Env[Any, Any], index: int, seed: int) -> None:
        super().__init__(env)
        self.index = index
        env.action_space.seed(seed)
        env.observation_space.seed(seed)

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except Exception as error:
            raise self._failure("step", error) from error

    def reset(self, **kwargs: Any) -> Any:
        try:
            return self.env.reset(**kwargs)
        except Exception as error:
            raise self._failure("reset", error) from error

    def _failure(self, call: str, error: Exception) -> SubEnvError:
        return SubEnvError(f"sub-env {self.index} raised {type(error).__name__} in {call}(): "
                           f"{error}", self.index)


def _make_sub_env(factory: Callable[[], gym.Env[Any, Any]], index: int,
                  seed: int) -> gym.Env[Any, Any]:
    return _SubEnv(factory(), index, seed)


def env_name(env: EnvInit) -> str:
    """A short name for messages and logs: the id, or the callable's (or target's) name."""
    if isinstance(env, str):
        return env
    if isinstance(env, EnvSpec):
        return env.id if env.id is not None else str(env.target)
    if isinstance(env, functools.partial):
        return env_name(env.func)
    return str(getattr(env, "__name__", type(env).__name__))


def file_name(name: str) -> str:
    """``name`` (an env's, an agent's) as part of a folder name: the part after a ``module:``,
    anything but letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``; a lambda's is
    ``env``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name.rpartition(":")[2]).strip("._")
    return cleaned if cleaned and cleaned != "lambda" else "env"


def make_vector_env(
    env: EnvInit, *, num_envs: int, vectorization: Vectorization = "sync", seed: int,
    first_env: Callable[[], gym.Env[Any, Any]] | None = None,
) -> VectorEnv[Any, Any, Any]:
    """Make ``num_envs`` copies of ``env`` as one Gymnasium vector env, with seeded action space.

    The vector env autoresets in the same step (``AutoresetMode.SAME_STEP``): every step returns a
    real transition for every sub-env, and the true last observation of an ended episode is in
    ``info["final_obs"]``. Observations are reset with ``seed`` by the caller (the runner);
    sub-env ``i``'s own spaces are seeded with ``seed + i``, and its exceptions are
    :class:`SubEnvError` naming ``i``. ``first_env``: makes sub-env 0 instead of ``env`` (the
    evaluation's recorded copy, :mod:`rltrain.video`).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
    factory = env_factory(env)
    fns = [functools.partial(_make_sub_env, first_env if i == 0 and first_env is not None
                             else factory, i, seed + i) for i in range(num_envs)]
    envs: VectorEnv[Any, Any, Any]
    if vectorization == "sync":
        envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    elif vectorization == "async":
        envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        raise ValueError(f"vectorization must be 'sync' or 'async'; got {vectorization!r}.")
    envs.action_space.seed(seed)
    return envs

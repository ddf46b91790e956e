"""Environment creation: Gymnasium ids or callables, vectorized, seeded and checked."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from rltrain.envs.atari import AtariConfig, AtariPipeline, is_atari_id
from rltrain.envs.envpool import (
    EnvpoolVectorEnv,
    check_envpool_env,
    envpool_kwargs,
    sb3_starts,
)
from rltrain.envs.errors import EnvError, EnvStepTimeout, SubEnvError
from rltrain.envs.mujoco_log import route_mujoco_warnings
from rltrain.envs.sync import LeanSyncVectorEnv
from rltrain.envs.workers import WorkerVectorEnv, become_worker
from rltrain.runtime.watchdog import EnvCallHung
from rltrain.settings.module_finder import MODULE_NAME
from rltrain.settings.targets import INSTALLED, TRUSTED, Trust, import_modules, locate

Vectorization = Literal["sync", "async"]
Backend = Literal["gymnasium", "envpool"]


@dataclass(frozen=True)
class EnvSpec:
    """An environment by Gymnasium id or by import path, with keyword arguments and wrappers.

    Instances are callables that make one environment, and pickle (for ``AsyncVectorEnv``) as
    long as the wrappers do (classes, ``functools.partial`` of classes and
    :class:`~rltrain.settings.targets.Target` do; lambdas do not).

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
        atari: The standard Atari pipeline's settings (:mod:`rltrain.envs.atari`), applied
            before ``wrappers``; None: none. Default None.
        training: Whether the pipeline's training-only steps (episodic life, reward clipping)
            apply; :func:`evaluation_env` turns them off. Default True.
        backend: ``"gymnasium"`` or ``"envpool"`` (:mod:`rltrain.envs.envpool`: an id envpool
            knows, no Python wrappers). Default ``"gymnasium"``.
    """

    id: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: Sequence[Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]] = ()
    imports: Sequence[str] = ()
    target: str | None = None
    atari: AtariConfig | None = None
    training: bool = True
    backend: Backend = "gymnasium"

    def __post_init__(self) -> None:
        if (self.id is None) == (self.target is None):
            raise ValueError("An EnvSpec names its environment by id or by target (an import "
                             f"path), exactly one; got id={self.id!r}, target={self.target!r}.")
        if self.backend not in ("gymnasium", "envpool"):
            raise ValueError(f"backend must be 'gymnasium' or 'envpool'; got {self.backend!r}.")
        import_modules(self.imports, INSTALLED)  # checked when its config was read
        if self.id is not None:
            check_env_id(self.id)
            if self.atari is not None and not is_atari_id(self.id):
                raise ValueError(f"env.atari is the Atari pipeline, for ALE games "
                                 f"(ALE/Pong-v5, ...); {self.id} is not one. Drop env.atari "
                                 "(env.atari=null).")
        if self.backend == "envpool":
            check_envpool_env(self.id, tuple(self.wrappers), self.target, self.atari)

    def __call__(self) -> gym.Env[Any, Any]:
        import_modules(self.imports, INSTALLED)
        route_mujoco_warnings(self.id)
        env: gym.Env[Any, Any]
        pipeline = None if self.atari is None else AtariPipeline(self.atari, self.training)
        kwargs = {**dict(self.kwargs), **(pipeline.make_kwargs() if pipeline else {})}
        if self.target is not None:
            env = locate(self.target, trust=INSTALLED)(**kwargs)
        else:
            assert self.id is not None
            env = gym.make(self.id, **kwargs)
        if pipeline is not None:
            env = pipeline(env)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def evaluation_env(env: EnvInit) -> EnvInit:
    """The environment evaluations run on: ``env`` itself, or for an :class:`EnvSpec` its
    Gymnasium build without the training-only steps of its Atari pipeline (whole games in the
    game's own score), a lost life going on as the training backend goes on
    (``env.atari.life_noops``)."""
    if isinstance(env, EnvSpec) and (env.atari is not None or env.backend != "gymnasium"):
        atari = env.atari
        if atari is not None and atari.life_noops is None:  # lives restart as in training
            atari = dataclasses.replace(atari, life_noops=env.backend == "envpool")
        return dataclasses.replace(env, training=False, backend="gymnasium", atari=atari)
    return env


#: What a strategy accepts as an environment: an id, an :class:`EnvSpec`, or a callable making one.
EnvInit = Union[str, EnvSpec, Callable[[], gym.Env[Any, Any]]]


def check_env_id(env_id: str, trust: Trust = TRUSTED) -> None:
    """Raise ``ValueError`` naming the closest registered ids when ``env_id`` is not registered;
    a ``"module:EnvId"`` id imports its module first, as ``gymnasium.make`` does."""
    module, sep, name = env_id.rpartition(":")
    if sep and MODULE_NAME.fullmatch(module):
        import_modules([module], trust, what="env.id")
        env_id = name
    if env_id.startswith("ALE/") and env_id not in gym.registry:
        _register_ale(env_id)
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"Unknown Gymnasium environment id {env_id!r}.{hint} Registered ids are listed by "
        "`python -c 'import gymnasium; gymnasium.pprint_registry()'`; an environment from another "
        "package needs that package imported (or pass a callable that makes the env)."
    )


def _register_ale(env_id: str) -> None:
    """Register the ALE's games (``import ale_py``), or say which extra installs them."""
    try:
        import_modules(["ale_py"], INSTALLED)
    except ImportError as error:
        raise ValueError(f"{env_id} is an Atari game: it needs ale-py (pip install "
                         f"'rltrain[atari]'; {error}).") from error


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


def step_timeout_error(hung: EnvCallHung, call: str, num_envs: int,
                       env: str | None = None) -> EnvStepTimeout:
    """The error to raise for ``hung``, a ``call`` (``"step"`` or ``"reset"``) of a vector env
    of ``num_envs`` sub-envs (of the environment named ``env``) past its deadline."""
    sub_envs = hung.sub_envs or _sub_envs_in(hung)
    if not sub_envs and num_envs == 1:
        sub_envs = [0]
    who = (f"sub-env {sub_envs[0]}" if len(sub_envs) == 1 else
           f"sub-envs {', '.join(map(str, sub_envs))}" if sub_envs else "a sub-env")
    late = f" (it returned after {hung.took:.3g} s)" if hung.took is not None else ""
    fix = ("It hangs or is too slow: fix the environment, or raise trainer.env_step_timeout "
           "(None: no limit)." if hung.why.startswith("env_step_timeout") else
           "It hangs: fix the environment (trainer.env_step_timeout=<seconds> fails a hung "
           "step without a signal).")
    return EnvStepTimeout(f"{who}{f' of {env!r}' if env else ''} did not return from {call}() "
                          f"within {hung.why}{late}. {fix}", sub_envs[0] if sub_envs else None)


def _sub_envs_in(hung: EnvCallHung) -> list[int]:
    """The sub-env whose call ``hung`` interrupted, from its traceback (a sync vector env)."""
    found: list[int] = []
    traceback = hung.__traceback__
    while traceback is not None:
        owner = traceback.tb_frame.f_locals.get("self")
        if isinstance(owner, _SubEnv):
            found = [owner.index]
        traceback = traceback.tb_next
    return found


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

    #: The shape every observation must have: the ``Box`` space's when the sub-env was made
    #: (the vector env's storage is laid out for it), else None (checked by
    #: :func:`shape_mismatch`). A class default for sub-envs pickled before it existed.
    box_shape: tuple[int, ...] | None = None
    #: No state besides its construction's (:mod:`rltrain.envs.wrapper_state`).
    saved_attributes: ClassVar[dict[str, str]] = {}

    def __init__(self, env: gym.Env[Any, Any], index: int, seed: int) -> None:
        super().__init__(env)
        self.index = index
        env.action_space.seed(seed)
        env.observation_space.seed(seed)
        space = env.observation_space
        self.box_shape = space.shape if type(space) is gym.spaces.Box else None

    def rltrain_saved_state(self) -> dict[str, Any]:
        """This sub-env's state for a checkpoint, saved where it lives (an async vector env
        gets it from each worker with ``call``; :func:`~rltrain.envs.persistence.sub_env_state`)."""
        from rltrain.envs.persistence import piped, sub_env_state  # it builds on this module

        state: dict[str, Any] = piped(sub_env_state(self), torch.Tensor.numpy)
        return state  # NumPy crosses the pipe

    def rltrain_restore_state(self, key: str, states: list[Any]) -> str | None:
        """Take this sub-env's own of the saved ``states`` back (an async vector env sends
        every worker all of them with ``call``); returns why it was refused, or None."""
        from rltrain.envs.persistence import piped, restore_sub_env

        return restore_sub_env(self, key, piped(states[self.index], torch.from_numpy),
                               self.index)

    def step(self, action: Any) -> Any:
        try:
            result = self.env.step(action)
        except Exception as error:
            raise self._failure("step", error) from error
        self._check_shape("step", result[0])
        return result

    def reset(self, **kwargs: Any) -> Any:
        try:
            result = self.env.reset(**kwargs)
        except Exception as error:
            raise self._failure("reset", error) from error
        self._check_shape("reset", result[0])
        return result

    def _check_shape(self, call: str, observation: Any) -> None:
        """Refuse an observation of another shape than the space's (checked at the start of
        the run; an env may change it later), naming both shapes, before the vector env's
        concatenation fails on it with neither."""
        if self.box_shape is not None and getattr(observation, "shape", None) == self.box_shape:
            return  # the common case, every step: an array of the declared shape
        problem = shape_mismatch(self.observation_space, observation)
        if problem is not None:
            raise SubEnvError(
                f"sub-env {self.index} returned from {call}() {problem}. Return observations "
                "of the declared shape, or declare the shape they have.", self.index)

    def _failure(self, call: str, error: Exception) -> SubEnvError:
        return SubEnvError(f"sub-env {self.index} raised {type(error).__name__} in {call}(): "
                           f"{error}", self.index)


def shape_mismatch(space: gym.Space[Any], observation: Any, what: str = "an observation"
                   ) -> str | None:
    """How ``observation`` differs in shape from ``space`` (a ``Box``, or a ``Dict`` of them,
    key by key), in words; None when it does not (other spaces are not checked)."""
    if isinstance(space, gym.spaces.Box):
        shape = getattr(observation, "shape", None)
        if shape is None:
            shape = np.shape(observation)
        if tuple(shape) != space.shape:
            return f"{what} of shape {tuple(shape)}, but its observation space {space} has " \
                   f"shape {space.shape}"
    elif isinstance(space, gym.spaces.Dict) and isinstance(observation, Mapping):
        for key, subspace in space.spaces.items():
            if key in observation:
                problem = shape_mismatch(subspace, observation[key], f"{what}[{key!r}]")
                if problem is not None:
                    return problem
    return None


def _make_sub_env(factory: Callable[[], gym.Env[Any, Any]], index: int,
                  seed: int) -> gym.Env[Any, Any]:
    return _SubEnv(factory(), index, seed)


def _make_worker_env(factory: Callable[[], gym.Env[Any, Any]], index: int, seed: int, *,
                     parent: int, die_with_parent: bool) -> gym.Env[Any, Any]:
    """Sub-env ``index`` of an async vector env; made in its worker process (``parent`` is
    the main process), the worker is first set apart from the main process's signals."""
    if os.getpid() != parent:  # AsyncVectorEnv makes sub-env 0 in the main process too
        become_worker(parent, die_with_parent)
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
    evaluation's recorded copy, :mod:`rltrain.envs.video`). ``"async"`` makes a
    :class:`WorkerVectorEnv` (workers that leave signals to the main process, die with it on
    Linux when made from its main thread, and are ended by ``close`` even when hung). An
    :class:`EnvSpec` with ``backend="envpool"`` is an
    :class:`~rltrain.envs.envpool.EnvpoolVectorEnv` (envpool's threads; ``vectorization`` does
    not apply).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
    if isinstance(env, EnvSpec) and env.backend == "envpool":
        assert env.id is not None and first_env is None
        pool = EnvpoolVectorEnv(env.id, num_envs=num_envs, seed=seed,
                                starts=sb3_starts(env.id, env.atari),
                                **envpool_kwargs(env.atari), **dict(env.kwargs))
        pool.action_space.seed(seed)
        return pool
    factory = env_factory(env)
    makers = [first_env if i == 0 and first_env is not None else factory
              for i in range(num_envs)]
    envs: VectorEnv[Any, Any, Any]
    if vectorization == "sync":
        envs = LeanSyncVectorEnv([functools.partial(_make_sub_env, make, i, seed + i)
                                  for i, make in enumerate(makers)],
                                 autoreset_mode=AutoresetMode.SAME_STEP)
    elif vectorization == "async":
        main = threading.current_thread() is threading.main_thread()
        envs = WorkerVectorEnv([functools.partial(_make_worker_env, make, i, seed + i,
                                                  parent=os.getpid(), die_with_parent=main)
                                for i, make in enumerate(makers)],
                               autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        raise ValueError(f"vectorization must be 'sync' or 'async'; got {vectorization!r}.")
    envs.action_space.seed(seed)
    return envs

"""Environment creation: Gymnasium ids or callables, vectorized, seeded and checked."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

Vectorization = Literal["sync", "async"]


@dataclass(frozen=True)
class EnvSpec:
    """A Gymnasium environment by id, with keyword arguments and wrappers.

    Instances are callables that make one environment, and pickle (for ``AsyncVectorEnv``) as long
    as the wrappers do.

    Attributes:
        id: A registered Gymnasium id, e.g. ``"CartPole-v1"``.
        kwargs: Keyword arguments for ``gymnasium.make``. Default none.
        wrappers: Applied in order to the made environment, e.g.
            ``(gymnasium.wrappers.NormalizeReward,)``. Default none.
    """

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    wrappers: Sequence[Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]] = ()

    def __post_init__(self) -> None:
        check_env_id(self.id)

    def __call__(self) -> gym.Env[Any, Any]:
        env = gym.make(self.id, **dict(self.kwargs))
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


#: What a strategy accepts as an environment: an id, an :class:`EnvSpec`, or a callable making one.
EnvInit = Union[str, EnvSpec, Callable[[], gym.Env[Any, Any]]]


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` naming the closest registered ids when ``env_id`` is not registered."""
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


def env_name(env: EnvInit) -> str:
    """A short name for logs and run directories: the id, or the callable's name."""
    if isinstance(env, str):
        return env
    if isinstance(env, EnvSpec):
        return env.id
    return getattr(env, "__name__", type(env).__name__)


def make_vector_env(
    env: EnvInit, *, num_envs: int, vectorization: Vectorization = "sync", seed: int
) -> VectorEnv[Any, Any, Any]:
    """Make ``num_envs`` copies of ``env`` as one Gymnasium vector env, with seeded action space.

    The vector env autoresets in the same step (``AutoresetMode.SAME_STEP``): every step returns a
    real transition for every sub-env, and the true last observation of an ended episode is in
    ``info["final_obs"]``. Observations are reset with ``seed`` by the caller (the runner).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
    factory = env_factory(env)
    fns = [factory] * num_envs
    envs: VectorEnv[Any, Any, Any]
    if vectorization == "sync":
        envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    elif vectorization == "async":
        envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        raise ValueError(f"vectorization must be 'sync' or 'async'; got {vectorization!r}.")
    envs.action_space.seed(seed)
    return envs

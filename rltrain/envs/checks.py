"""What rltrain checks of a user's environment before a run writes anything.

:func:`check_env` runs on the Trainer's probe environment (one made before the run directory
is touched): the Gymnasium API the training loop relies on (``reset(seed=...)`` returning
``(observation, info)``, ``step`` returning five values), observations of the shape of their
space (one of another shape fails the vector env with numpy's "Output array is the wrong
shape"), and what silently degrades a run: observations that lose information when cast to
their space's dtype, a float64 Box of the user's own, a reset that ignores its seed, no time
limit. A failure is an :class:`~rltrain.envs.errors.EnvError` naming the environment, the check and
the fix; the rest are warnings. Gymnasium's own ``gymnasium.utils.env_checker.check_env`` goes
further (its messages name neither the environment nor rltrain's reason).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import pickle
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import data_equivalence

from rltrain.envs.errors import EnvError
from rltrain.errors import user_stacklevel
from rltrain.runtime.watchdog import EnvCallHung, call_within, watch_env_calls

#: Gymnasium's API, as the fixes quote it.
RESET_API = "reset(self, *, seed=None, options=None) -> (observation, info)"
STEP_API = "step(self, action) -> (observation, reward, terminated, truncated, info)"

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


def unpicklable_layer(env: gym.Env[Any, Any]) -> tuple[gym.Env[Any, Any], Exception] | None:
    """The innermost of ``env``'s layers (:func:`layers`) that cannot be pickled, with the
    error, or None when ``env`` pickles: the wrapper (or environment) that keeps a checkpoint
    from holding the environment's state."""
    for layer in reversed(list(layers(env))):  # innermost first: the first to fail is it
        try:
            pickle.dumps(layer)
        except Exception as error:
            return layer, error
    return None


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
        f"env.max_episode_steps=N on the command line (Trainer: "
        f"gymnasium.wrappers.TimeLimit(env, max_episode_steps=N) in the callable that makes "
        f"it, or gymnasium.register(..., max_episode_steps=N)).", UserWarning,
        stacklevel=user_stacklevel())


def check_env(env: gym.Env[Any, Any], name: str, *, seed: int = 0,
              eval_max_episode_steps: int | None, step_timeout: float | None = None) -> None:
    """Check the environment ``env`` (called ``name`` in messages) before a run writes
    anything: its spaces, ``reset(seed=seed)`` and one ``step`` of a sampled action, their
    observations against the observation space, that a reset with the same seed starts the
    same episode, and that it has a time limit. Raises :class:`~rltrain.envs.errors.EnvError` for
    what would fail the run, warns for what would degrade it. ``env`` is reset and stepped,
    each call within ``step_timeout`` seconds (the Trainer's ``env_step_timeout``; None, the
    default: no limit), interrupted past it in the main thread
    (:func:`~rltrain.runtime.watchdog.call_within`)."""
    check = Check(env, name, step_timeout)
    check.spaces()
    with watch_env_calls() if step_timeout is not None else contextlib.nullcontext():
        first = check.reset(seed)
        check.observation(first, "reset()")
        first = copy.deepcopy(first)  # some environments reuse their observation's buffer
        check.step_once()
        check.seeded_reset(seed, first)
    check.float64_box()
    warn_no_time_limit(env, name, eval_max_episode_steps)


class Check:
    """The checks of one environment ``env``, called ``name`` in every message; each of its
    calls may take ``timeout`` seconds (None: no limit)."""

    def __init__(self, env: gym.Env[Any, Any], name: str, timeout: float | None = None) -> None:
        self.env, self.name, self.timeout = env, name, timeout
        self.warned: set[str] = set()

    def fail(self, check: str, problem: str, fix: str) -> EnvError:
        return EnvError(f"The environment {self.name!r} fails the check of {check}: {problem}. "
                        f"{fix}")

    def warn(self, check: str, problem: str, fix: str) -> None:
        if check not in self.warned:  # once per check, however many observations show it
            self.warned.add(check)
            warnings.warn(f"The environment {self.name!r} fails the check of {check}: "
                          f"{problem}. {fix}", UserWarning, stacklevel=user_stacklevel())

    def hung(self, call: str, hung: EnvCallHung) -> EnvError:
        """The failure of a ``call`` (``"step"``, ``"reset"``) past the timeout."""
        late = f" (it returned after {hung.took:.3g} s)" if hung.took is not None else ""
        return self.fail(call, f"{call}() did not return within {hung.why}{late}",
                         f"Fix its {call}, or raise trainer.env_step_timeout (None: no limit).")

    def spaces(self) -> None:
        for attribute in ("observation_space", "action_space"):
            space = getattr(self.env, attribute, None)
            if not isinstance(space, gym.spaces.Space):
                raise self.fail("its spaces", f"its {attribute} is {space!r}, not a "
                                "gymnasium.spaces.Space",
                                f"Set self.{attribute} in its __init__ (e.g. "
                                "gymnasium.spaces.Box(low, high, shape, np.float32)).")

    def reset(self, seed: int) -> Any:
        """``reset(seed=seed)``'s observation, once its signature and result are checked."""
        parameters = inspect.signature(self.env.unwrapped.reset).parameters
        if "seed" not in parameters and not any(
                p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            raise self.fail("reset's signature", "its reset() takes no seed (the old Gym API)",
                            f"Gymnasium's is {RESET_API}: add the keywords and call "
                            "super().reset(seed=seed) first.")
        try:
            result = call_within(self.timeout, self.env.reset, seed=seed)
        except EnvCallHung as hung:
            raise self.hung("reset", hung) from hung
        except Exception as error:
            raise self.fail("reset", f"reset(seed={seed}) raised {type(error).__name__}: "
                            f"{error}", f"Fix its reset ({RESET_API}).") from error
        if not (isinstance(result, tuple) and len(result) == 2
                and isinstance(result[1], Mapping)):
            what = (f"a tuple of {len(result)}" if isinstance(result, tuple)
                    else f"a value of type {type(result).__name__}")
            raise self.fail("reset's result", f"reset() returned {what}, not (observation, "
                            "info) (the old Gym API returned the observation alone)",
                            f"Return observation, {{}}: Gymnasium's is {RESET_API}.")
        return result[0]

    def step_once(self) -> None:
        """One ``step`` of a sampled action: five values of the right types, the observation
        checked."""
        space = self.env.action_space
        space.seed(0)
        try:
            result = call_within(self.timeout, self.env.step, space.sample())
        except EnvCallHung as hung:
            raise self.hung("step", hung) from hung
        except Exception as error:
            raise self.fail("step", f"step(action) raised {type(error).__name__}: {error} "
                            f"(for an action sampled from {space})",
                            f"Fix its step ({STEP_API}).") from error
        if not (isinstance(result, tuple) and len(result) == 5):
            count = len(result) if isinstance(result, tuple) else None
            problem = (f"step() returned {count} values" if count is not None
                       else f"step() returned a value of type {type(result).__name__}, "
                       "not a tuple")
            old = (" (observation, reward, done, info): the old Gym API; split done into "
                   "terminated (the episode really ended) and truncated (a time limit cut it)"
                   if count == 4 else "")
            raise self.fail("step's result", problem + old, f"Gymnasium's is {STEP_API}.")
        observation, reward, terminated, truncated, info = result
        if not _is_number(reward):
            raise self.fail("step's reward", f"step() returned a reward of type "
                            f"{type(reward).__name__}, not a number",
                            "Return a float (or a NumPy scalar) as the reward.")
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(value, (bool, np.bool_)):
                raise self.fail("step's result", f"step() returned {flag}={value!r} (a "
                                f"{type(value).__name__}), not a bool",
                                f"Return True or False: Gymnasium's is {STEP_API}.")
        if not isinstance(info, Mapping):
            raise self.fail("step's result", f"step() returned info of type "
                            f"{type(info).__name__}, not a dict", "Return a dict (or {}).")
        self.observation(observation, "step()")

    def observation(self, observation: Any, where: str) -> None:
        """``observation`` (returned by ``where``) against the observation space."""
        check_in_space(self, observation, self.env.observation_space, where, "observation")

    def seeded_reset(self, seed: int, first: Any) -> None:
        """Warn when a second ``reset(seed=seed)`` starts another episode than the first."""
        spec = getattr(self.env, "spec", None)
        if spec is not None and spec.nondeterministic:
            return
        try:
            again, _ = call_within(self.timeout, self.env.reset, seed=seed)
        except EnvCallHung as hung:
            raise self.hung("reset", hung) from hung
        if not data_equivalence(first, again):
            self.warn("a seeded reset", f"reset(seed={seed}) twice gave two different "
                      "observations, so its reset ignores the seed: runs of the same seed "
                      "differ, evaluations of the same weights give different returns and a "
                      "resumed run is not an exact continuation",
                      "Call super().reset(seed=seed) first in its reset, and draw every "
                      "random number from self.np_random (not numpy.random or random).")

    def float64_box(self) -> None:
        """Warn when the user's own environment (one not registered with Gymnasium) declares
        float64 Box observations: rltrain learns in float32."""
        space = self.env.observation_space
        if (getattr(self.env, "spec", None) is None and isinstance(space, gym.spaces.Box)
                and space.dtype == np.float64):
            self.warn("observation dtypes", f"its observation_space is a float64 Box "
                      f"({space}), but rltrain's networks and replay storage are float32: "
                      "every observation is converted, and what float64 holds beyond float32's "
                      "precision is lost", "Declare dtype=np.float32 in its observation_space "
                      "(and return float32 observations), or wrap it: "
                      "gymnasium.wrappers.DtypeObservation(env, np.float32).")


def check_in_space(check: Check, value: Any, space: gym.Space[Any], where: str,
                   what: str) -> None:
    """Raise when ``value`` cannot be stored as ``space``'s (another shape, missing keys),
    warn when storing it changes it (a cast to another kind of dtype, bounds); ``what`` names
    it (``observation['image']``). Spaces other than Dict, Tuple, Box, Discrete, MultiDiscrete
    and MultiBinary are not checked."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(space.spaces):
            found = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise check.fail("observations", f"{where} returned an {what} of {found}, but the "
                             f"observation space is a Dict of {sorted(space.spaces)}",
                             "Return a dict with exactly the space's keys.")
        for key, subspace in space.spaces.items():
            check_in_space(check, value[key], subspace, where, f"{what}[{key!r}]")
    elif isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, tuple) or len(value) != len(space.spaces):
            raise check.fail("observations", f"{where} returned an {what} of type "
                             f"{type(value).__name__}, but the observation space is a Tuple "
                             f"of {len(space.spaces)}", "Return a tuple of the space's length.")
        for index, (item, subspace) in enumerate(zip(value, space.spaces, strict=True)):
            check_in_space(check, item, subspace, where, f"{what}[{index}]")
    elif isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                            gym.spaces.MultiBinary)):
        check_array(check, value, space, where, what)


def check_array(check: Check, value: Any, space: gym.Space[Any], where: str, what: str) -> None:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise check.fail("observations", f"{where} returned an {what} that is not an array "
                         f"({type(value).__name__}: {error})",
                         f"Return a NumPy array of the space's shape {space.shape}.") from None
    if array.shape != space.shape or array.dtype == object:
        raise check.fail("observations", f"{where} returned an {what} of shape "
                         f"{array.shape}, but the observation space {space} has shape "
                         f"{space.shape}", "Return observations of the declared shape, or "
                         "declare the shape they have (observation_space = gymnasium.spaces."
                         f"Box(low, high, shape={array.shape}, ...)).")
    dtype = space.dtype
    if dtype is not None and not np.can_cast(array.dtype, dtype, "same_kind"):
        cast = array.astype(dtype).reshape(-1)
        changed = np.flatnonzero(array.reshape(-1) != cast)
        i = int(changed[0]) if changed.size else 0
        check.warn("observation dtypes", f"{where} returned a {array.dtype} {what} for "
                   f"{space}, so it is cast to {dtype} (e.g. {array.reshape(-1)[i].item()!r} "
                   f"becomes {cast[i].item()!r})", f"Return {dtype} observations "
                   f"(np.asarray(obs, dtype=np.{dtype})), or declare the dtype they have.")
    elif not space.contains(array.astype(dtype)):
        check.warn("observation bounds", f"{where} returned an {what} outside {space} "
                   f"({np.array2string(array, threshold=8)})", "Return observations within "
                   "the declared bounds, or declare the bounds they have.")


def _is_number(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and np.issubdtype(value.dtype, np.number)
    return isinstance(value, (int, float, np.integer, np.floating))

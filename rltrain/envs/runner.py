"""Steps a vector environment with a policy and turns what it returns into transitions."""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv, VectorEnv

from rltrain.buffers.observations import map_obs, to_tensor
from rltrain.envs.make import step_timeout_error
from rltrain.envs.masking import MASK_KEY
from rltrain.envs.persistence import SavedEnvs, check_saved_runner, saved_spaces
from rltrain.envs.workers import call_vector_env
from rltrain.observe.events import EpisodeEnd
from rltrain.runtime.watchdog import EnvCallHung
from rltrain.types import ObsArrays, ObsTensors, PolicyState, PolicyStep, Progress, Transitions


class Policy(Protocol):
    """What the runner and the evaluator need of a policy (:class:`rltrain.agents.Policy` is
    one): actions for a batch of observations, and its recurrent state per sub-env."""

    def act(self, obs: ObsTensors, state: PolicyState, deterministic: bool) -> PolicyStep: ...

    def initial_state(self, num_envs: int) -> PolicyState: ...

    def reset_state(self, state: PolicyState, done: torch.Tensor) -> PolicyState: ...


class Runner:
    """Collects experience from a vector env made by :func:`~rltrain.envs.make.make_vector_env`.

    The runner owns the current observations, the policy's per-env recurrent state and each
    sub-env's running episode return and length. Each :meth:`step` advances ``progress``
    (``env_steps`` by ``num_envs`` times ``world_size``, ``vector_steps`` by one, ``episodes``
    by those that ended here).

    Args:
        envs: A vector env that autoresets in the same step.
        device: Where observations go for the policy (the inference device).
        progress: The run's counters.
        world_size: Processes stepping their envs in lockstep, each with ``num_envs``
            sub-envs: ``env_steps`` counts them all (a run's ``num_steps`` is global).
            Default 1.
        step_timeout: Seconds each step or reset of the vector env may take (the Trainer's
            ``env_step_timeout``); one that takes longer fails as an
            :class:`~rltrain.envs.errors.EnvStepTimeout` naming the sub-env. None: no limit. In the
            main thread (within :func:`~rltrain.runtime.watchdog.watch_env_calls`) a sync step is
            interrupted; in another thread only an async one is, and a sync one fails when it
            returns. Default None.
        env_name: The environment's name, for messages. Default None.

    Whatever ``step_timeout``, a call in progress in the main thread when a stop signal
    arrives is interrupted :data:`~rltrain.runtime.watchdog.STOP_GRACE` seconds later
    (:func:`~rltrain.runtime.interrupt.stop_on_signals`).
    """

    def __init__(self, envs: VectorEnv[Any, Any, Any], *, device: torch.device,
                 progress: Progress, world_size: int = 1, step_timeout: float | None = None,
                 env_name: str | None = None) -> None:
        self.envs = envs
        self.step_timeout, self.env_name = step_timeout, env_name
        if (step_timeout is not None and isinstance(envs, SyncVectorEnv)
                and threading.current_thread() is not threading.main_thread()):
            warnings.warn(
                f"env_step_timeout={step_timeout:g} s cannot interrupt a step of sync vector "
                "envs outside the main thread (signals reach the main thread only): a step "
                "that takes longer fails when it returns, and one that never returns hangs "
                "the run. Run fit in the main thread, or use vectorization='async' (each "
                "sub-env in a worker process).", stacklevel=2)
        self.num_envs = envs.num_envs
        self.env_steps_per_step = envs.num_envs * world_size
        self.device = device
        # One inference-mode context, entered at each act (a third of the cost of making one
        # per step); act is never re-entered, so one object serves every call.
        self.inference = torch.inference_mode()
        self.progress = progress
        #: The current observations: an array, or one per key of a ``Dict`` space.
        self.observations: ObsArrays = np.empty(0)
        self.policy_state: PolicyState = None
        self.seed = 0
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float64)
        # The vector step at which each sub-env's episode started: lengths are computed when an
        # episode ends instead of counted every step (each small NumPy op has a fixed cost:
        # docs/benchmarks.md, "Figures behind implementation choices").
        self.episode_starts = np.zeros(self.num_envs, dtype=np.int64)
        #: What the policy returned beside the actions of the pending step (``act``), handed
        #: to that step's transitions.
        self.policy_info: dict[str, torch.Tensor] = {}
        #: True once a step failed part-way: the sub-envs may have moved on from the runner's
        #: observations, so checkpoints leave them out (a resumed run resets them).
        self.envs_out_of_step = False
        self.saved_envs = SavedEnvs(envs)

    @property
    def episode_lengths(self) -> np.ndarray:
        """Each sub-env's running episode length in env steps."""
        return self.progress.vector_steps - self.episode_starts

    def reset(self, *, seed: int, policy: Policy | None = None) -> None:
        """Reset every sub-env (sub-env ``i`` gets seed ``seed + i``) and the episode statistics."""
        self.seed = seed
        self.observations, _ = self._call("reset", seed)
        self.episode_returns[:] = 0.0
        self.episode_starts[:] = self.progress.vector_steps
        self.policy_state = policy.initial_state(self.num_envs) if policy is not None else None

    def act(self, policy: Policy, *, deterministic: bool = False) -> np.ndarray:
        """The policy's actions for the current observations, as a numpy batch."""
        # On the CPU a float32 or uint8 batch is shared, not copied; floats reach the policy as
        # float32, images as uint8 (the encoder scales them).
        observations, device = self.observations, self.device
        obs = ({key: to_tensor(value, device) for key, value in observations.items()}
               if isinstance(observations, dict) else to_tensor(observations, device))
        with self.inference:
            actions, self.policy_state, info = policy.act(obs, self.policy_state, deterministic)
        # Outside inference mode, a clone is an ordinary tensor a training step may read.
        self.policy_info = {name: value.clone() for name, value in info.items()} if info else {}
        return actions.numpy() if actions.is_cpu else actions.cpu().numpy()

    def random_actions(self) -> np.ndarray:
        """Uniform random actions from the vector env's (seeded) action space: among the valid
        ones where the observations carry an ``action_mask`` (``rltrain.envs.masking``)."""
        self.policy_info = {}
        space, obs = self.envs.action_space, self.observations
        if (isinstance(obs, dict) and MASK_KEY in obs
                and isinstance(space, gym.spaces.MultiDiscrete)):
            masks = np.asarray(obs[MASK_KEY]).reshape(len(space.nvec), -1) > 0.5
            return np.asarray(space.sample(mask=tuple(m.astype(np.int8) for m in masks)))
        return np.asarray(space.sample())

    def step(self, actions: np.ndarray, policy: Policy | None = None
             ) -> tuple[Transitions, list[EpisodeEnd]]:
        """Step every sub-env once; returns the transitions and the episodes that ended.

        Pass the acting ``policy`` when it keeps a recurrent state, so that the state of a
        sub-env whose episode ended is reset.
        """
        obs = self.observations
        try:
            next_obs, rewards, terminated, truncated, infos = self._call("step", actions)
        except BaseException:
            self.envs_out_of_step = True
            raise
        if not (_finite(rewards) and _finite(next_obs)):
            self.envs_out_of_step = True
            self._raise_non_finite(next_obs, rewards)
        self.observations = next_obs
        progress = self.progress
        progress.vector_steps += 1
        progress.env_steps += self.env_steps_per_step
        self.episode_returns += rewards
        episodes: list[EpisodeEnd] = []
        # SAME_STEP autoreset adds "_final_obs" to the infos exactly when an episode ended:
        # next_obs then already holds the new episodes' first observations, and the true last
        # observations (needed to bootstrap truncations) are in infos["final_obs"].
        if "_final_obs" in infos:
            done = infos["_final_obs"]
            next_obs = map_obs(np.copy, next_obs)
            for i in np.flatnonzero(done):
                _set_row(next_obs, int(i), infos["final_obs"][i])
                episodes.append(EpisodeEnd(
                    env_steps=progress.env_steps,
                    env_index=int(i),
                    episode_return=float(self.episode_returns[i]),
                    episode_length=int(progress.vector_steps - self.episode_starts[i]),
                    terminated=bool(terminated[i]),
                ))
            progress.episodes += len(episodes)
            self.episode_returns[done] = 0.0
            self.episode_starts[done] = progress.vector_steps
            if policy is not None and self.policy_state is not None:
                self.policy_state = policy.reset_state(self.policy_state, torch.as_tensor(done))
        transitions = Transitions(obs, actions, rewards, next_obs, terminated, truncated,
                                  self.policy_info)
        self.policy_info = {}
        return transitions, episodes

    def _call(self, call: str, argument: Any) -> Any:
        """``envs.step(argument)`` or ``envs.reset(seed=argument)`` within
        :attr:`step_timeout` and the grace after a stop signal; a call past its deadline is an
        :class:`~rltrain.envs.errors.EnvStepTimeout` naming the sub-envs that did not return."""
        try:
            return call_vector_env(self.envs, call, argument, self.step_timeout)
        except EnvCallHung as hung:
            raise step_timeout_error(hung, call, self.num_envs, self.env_name) from hung

    def _raise_non_finite(self, observations: ObsArrays, rewards: np.ndarray) -> None:
        what = "reward" if not np.isfinite(rewards).all() else "observation"
        if isinstance(observations, dict):
            key = next(k for k, v in observations.items() if not _finite(v))
            what, observations = f"observation ({key!r})", observations[key]
        values = rewards if what == "reward" else observations
        env_index = int(np.flatnonzero(~np.isfinite(values.reshape(self.num_envs, -1)).all(1))[0])
        raise FloatingPointError(
            f"Sub-env {env_index} returned a non-finite {what} ({_non_finite(values[env_index])})"
            f" at env step {self.progress.env_steps + self.env_steps_per_step:,} (vector step "
            f"{self.progress.vector_steps + 1:,}). Training on it would corrupt the networks; "
            "fix the environment, or clip/normalise with a wrapper (e.g. "
            "gymnasium.wrappers.ClipReward, NormalizeObservation)."
        )

    def state_dict(self) -> dict[str, Any]:
        """Current observations, episode statistics, policy state, the sub-environments
        themselves wherever they can be saved (:class:`~rltrain.envs.persistence.SavedEnvs`:
        as checked data or pickled, from sync and async vector envs) and the action space's
        generator, so that a resumed run steps exactly as this one would have."""
        state: dict[str, Any] = {
            "observations": map_obs(lambda a: torch.from_numpy(np.array(a)),
                                    self.observations),
            "episode_returns": torch.from_numpy(self.episode_returns.copy()),
            "episode_starts": torch.from_numpy(self.episode_starts.copy()),
            "policy_state": self.policy_state,
            "action_space_rng": self.envs.action_space.np_random.bit_generator.state,
            "spaces": saved_spaces(self.envs.single_observation_space,
                                   self.envs.single_action_space, self.num_envs),
            "envs": None,
        }
        if not self.envs_out_of_step:
            state.update(self.saved_envs.state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output. Environments that could not be saved
        (envpool's, unpicklable envs) are reset instead, seeded from the reset seed and the
        vector step, with a warning."""
        check_saved_runner(state, self.envs.single_observation_space,
                           self.envs.single_action_space, self.num_envs)
        if self.saved_envs.restore(state):
            self._restore_episodes(state)
            return
        warnings.warn(
            "The environments' state is not in this checkpoint (envpool's, unpicklable envs "
            "and EzPickle envs such as Box2D cannot be saved, nor envs that failed part-way "
            "through a step; MuJoCo's and the ALE's are saved inside Gymnasium's standard "
            "wrappers and the Atari pipeline's only): they were reset with a new seed, so the "
            "episodes running at the checkpoint restart and the resumed run is not an exact "
            "continuation.",
            stacklevel=2)
        self.observations, _ = self._call("reset", self.seed + self.progress.vector_steps)
        self.episode_returns[:] = 0.0
        self.episode_starts[:] = self.progress.vector_steps
        self.envs.action_space.np_random.bit_generator.state = state["action_space_rng"]

    def _restore_episodes(self, state: dict[str, Any]) -> None:
        """The observations, episode statistics, policy state and action-space generator of
        restored sub-envs."""
        self.observations = map_obs(lambda t: t.numpy().copy(), state["observations"])
        self.episode_returns[:] = state["episode_returns"].numpy()
        self.episode_starts[:] = state["episode_starts"].numpy()
        self.policy_state = state["policy_state"]
        self.envs.action_space.np_random.bit_generator.state = state["action_space_rng"]


#: Arrays of at most this many elements are checked for NaN and infinity as Python floats:
#: cheaper than a NumPy reduction at that size (about 0.3 µs against 0.9 µs for one
#: CartPole observation; docs/benchmarks.md, "Figures behind implementation choices").
SMALL_ARRAY = 64


def _finite(observations: ObsArrays) -> bool:
    """True when no float value (of any key) is NaN or infinite."""
    if isinstance(observations, dict):
        return all(_finite(value) for value in observations.values())
    if observations.dtype.kind != "f":
        return True
    if observations.size <= SMALL_ARRAY:
        return all(map(math.isfinite, observations.ravel().tolist()))
    return bool(np.isfinite(observations).all())


def _non_finite(row: Any) -> str:
    """A sub-env's value in an error message: whole when small, else where it is not finite
    (an observation of hundreds of values printed whole hides the one that is NaN)."""
    row = np.asarray(row)
    if row.size <= 8:
        return str(row)
    bad = np.flatnonzero(~np.isfinite(row.reshape(-1)))
    where = tuple(int(i) for i in np.unravel_index(bad[0], row.shape))
    return (f"{len(bad)} of its {row.size} values, the first at index "
            f"{where[0] if len(where) == 1 else where}: {row.reshape(-1)[bad[0]]}")


def _set_row(observations: ObsArrays, row: int, value: Any) -> None:
    """``observations[row] = value``, key by key for a dict of arrays."""
    if isinstance(observations, dict):
        for key, array in observations.items():
            array[row] = value[key]
    else:
        observations[row] = value

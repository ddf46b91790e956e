"""Steps a vector environment with a policy and turns what it returns into transitions."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rltrain.agents.base import Policy, PolicyState
from rltrain.components import Progress
from rltrain.events.events import EpisodeEnd


class Transitions(NamedTuple):
    """One vector step's transitions, one row per sub-env (numpy, as the env returned them).

    ``next_observations`` holds the real last observation where an episode ended, so a truncated
    episode can bootstrap from it; ``terminated`` and ``truncated`` stay apart.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class Runner:
    """Collects experience from a vector env made by :func:`~rltrain.envs.make_vector_env`.

    The runner owns the current observations, the policy's per-env recurrent state and each
    sub-env's running episode return and length. Each :meth:`step` advances ``progress``
    (``env_steps`` by ``num_envs``, ``vector_steps`` by one, ``episodes`` by those that ended).

    Args:
        envs: A vector env that autoresets in the same step.
        device: Where observations go for the policy (the inference device).
        progress: The run's counters.
    """

    def __init__(self, envs: VectorEnv[Any, Any, Any], *, device: torch.device,
                 progress: Progress) -> None:
        self.envs = envs
        self.num_envs = envs.num_envs
        self.device = device
        self.progress = progress
        self.observations: np.ndarray = np.empty(0)
        self.policy_state: PolicyState = None
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float64)
        # The vector step at which each sub-env's episode started: lengths are computed when an
        # episode ends instead of counted every step (each small NumPy op costs 1-3 µs here).
        self.episode_starts = np.zeros(self.num_envs, dtype=np.int64)
        self._zero_copy = device.type == "cpu"

    @property
    def episode_lengths(self) -> np.ndarray:
        """Each sub-env's running episode length in env steps."""
        return self.progress.vector_steps - self.episode_starts

    def reset(self, *, seed: int, policy: Policy | None = None) -> None:
        """Reset every sub-env (sub-env ``i`` gets seed ``seed + i``) and the episode statistics."""
        self.observations, _ = self.envs.reset(seed=seed)
        self.episode_returns[:] = 0.0
        self.episode_starts[:] = self.progress.vector_steps
        self.policy_state = policy.initial_state(self.num_envs) if policy is not None else None

    def act(self, policy: Policy, *, deterministic: bool = False) -> np.ndarray:
        """The policy's actions for the current observations, as a numpy batch."""
        observations = self.observations
        if self._zero_copy and observations.dtype == np.float32:
            obs = torch.from_numpy(observations)  # shares memory: no copy, no conversion
        else:
            obs = torch.as_tensor(observations, device=self.device, dtype=torch.float32)
        with torch.inference_mode():
            actions, self.policy_state, _ = policy.act(obs, self.policy_state, deterministic)
        return actions.cpu().numpy()

    def random_actions(self) -> np.ndarray:
        """Uniform random actions from the vector env's (seeded) action space."""
        return np.asarray(self.envs.action_space.sample())

    def step(self, actions: np.ndarray, policy: Policy | None = None
             ) -> tuple[Transitions, list[EpisodeEnd]]:
        """Step every sub-env once; returns the transitions and the episodes that ended.

        Pass the acting ``policy`` when it keeps a recurrent state, so that the state of a
        sub-env whose episode ended is reset.
        """
        obs = self.observations
        next_obs, rewards, terminated, truncated, infos = self.envs.step(actions)
        self.observations = next_obs
        progress = self.progress
        progress.vector_steps += 1
        progress.env_steps += self.num_envs
        self.episode_returns += rewards
        episodes: list[EpisodeEnd] = []
        # SAME_STEP autoreset adds "_final_obs" to the infos exactly when an episode ended:
        # next_obs then already holds the new episodes' first observations, and the true last
        # observations (needed to bootstrap truncations) are in infos["final_obs"].
        if "_final_obs" in infos:
            done = infos["_final_obs"]
            next_obs = next_obs.copy()
            for i in np.flatnonzero(done):
                next_obs[i] = infos["final_obs"][i]
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
        transitions = Transitions(obs, actions, rewards, next_obs, terminated, truncated)
        return transitions, episodes

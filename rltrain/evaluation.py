"""Greedy evaluation episodes on a separate, seeded vector environment."""

from __future__ import annotations

import numpy as np
import torch

from rltrain.agents.base import Policy
from rltrain.envs import EnvInit, make_vector_env
from rltrain.events.events import EvaluationEnd, EvaluationStart
from rltrain.events.processor import EventProcessor
from rltrain.interrupt import Interrupter
from rltrain.runner import Runner
from rltrain.types import Progress


class Evaluator:
    """Runs ``episodes`` deterministic episodes, several sub-envs at a time.

    Every evaluation resets the sub-envs with the same ``seed``, so two evaluations of the same
    weights give the same returns (and a saved policy can be re-evaluated to the same number).
    Sub-env ``i`` runs ``(episodes + i) // num_envs`` episodes, fixed in advance, so short
    episodes are not over-represented (as Stable-Baselines3's ``evaluate_policy``).

    Args:
        env: The environment to evaluate on.
        episodes: Episodes per evaluation (>= 1).
        seed: Reset seed of every evaluation.
        device: Where the policy acts.
        num_envs: Sub-envs stepped together. Default: ``min(episodes, 10)``.
    """

    def __init__(self, env: EnvInit, *, episodes: int, seed: int, device: torch.device,
                 num_envs: int | None = None) -> None:
        if episodes < 1:
            raise ValueError(f"Evaluation needs >= 1 episode; got eval_episodes={episodes}.")
        self.episodes = episodes
        self.seed = seed
        num_envs = min(episodes, 10) if num_envs is None else num_envs
        self.envs = make_vector_env(env, num_envs=num_envs, seed=seed)
        self.runner = Runner(self.envs, device=device, progress=Progress())
        self.targets = np.array([(episodes + i) // num_envs for i in range(num_envs)])

    def run(self, policy: Policy, *, env_steps: int, events: EventProcessor,
            interrupter: Interrupter | None = None) -> EvaluationEnd:
        """Evaluate ``policy``, emitting EvaluationStart and EvaluationEnd; stops on request."""
        events.emit(EvaluationStart(env_steps=env_steps, episodes=self.episodes))
        runner = self.runner
        runner.reset(seed=self.seed, policy=policy)
        counts = np.zeros_like(self.targets)
        returns: list[float] = []
        lengths: list[int] = []
        complete = True
        while (counts < self.targets).any():
            if interrupter is not None and interrupter.should_stop():
                complete = False
                break
            _, episodes = runner.step(runner.act(policy, deterministic=True), policy)
            for episode in episodes:
                if counts[episode.env_index] < self.targets[episode.env_index]:
                    counts[episode.env_index] += 1
                    returns.append(episode.episode_return)
                    lengths.append(episode.episode_length)
        result = EvaluationEnd(env_steps=env_steps, returns=tuple(returns),
                               lengths=tuple(lengths), complete=complete)
        events.emit(result)
        return result

    def close(self) -> None:
        """Close the evaluation environments."""
        self.envs.close()

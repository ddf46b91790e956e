"""Invalid-action masking for discrete actions (Huang and Ontañón 2022, "A Closer Look at
Invalid Action Masking in Policy Gradient Algorithms", arXiv:2006.14171; sb3-contrib's
MaskablePPO).

The mask travels in the observation: a ``Dict`` observation space with an ``action_mask`` key,
a 0/1 vector of one entry per action (1: valid). Stored with the rest of the observation, it is
there when acting, in replayed next observations (DQN's max over valid actions) and in rollout
minibatches (PPO's log-probabilities and entropy), and it resumes with them. An env that gives
its mask in ``info["action_mask"]`` instead is wrapped by
:class:`~rltrain.envs.masking.InfoActionMask`, which moves it into the observation.
"""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import torch

from rltrain.agents.base import SpaceError
from rltrain.types import ObsTensors

#: The observation key holding the action mask.
MASK_KEY = "action_mask"
#: The logit given to an invalid action: its probability underflows to 0 while entropies and
#: log-probabilities stay finite (an infinite logit would make ``0 * log 0`` a NaN).
MASKED_LOGIT = -1e8


def mask_space(observation_space: gym.Space[Any]) -> gym.Space[Any] | None:
    """The ``action_mask`` part of a ``Dict`` observation space, or None."""
    if isinstance(observation_space, gym.spaces.Dict):
        return observation_space.spaces.get(MASK_KEY)
    return None


def check_mask_space(agent: str, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any]) -> None:
    """Refuse an ``action_mask`` that is not one 0/1 entry per action of a ``Discrete`` action
    space, naming what it is."""
    space = mask_space(observation_space)
    if space is None:
        return
    n = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None
    shape = getattr(space, "shape", None)
    if (n is None or not isinstance(space, gym.spaces.MultiBinary | gym.spaces.Box)
            or shape != (n,)):
        raise SpaceError(
            f"{agent}: the observation's '{MASK_KEY}' must be a MultiBinary({n}) or Box of "
            f"shape ({n},) (one 0/1 entry per action of a Discrete({n}) action space); got "
            f"{space} for {action_space}.")


def action_mask(obs: ObsTensors) -> torch.Tensor | None:
    """The valid actions of a batch of observations, boolean ``[B, actions]``; None when the
    observations carry no mask."""
    if isinstance(obs, dict) and MASK_KEY in obs:
        return obs[MASK_KEY].reshape(obs[MASK_KEY].shape[0], -1) > 0.5
    return None


def masked_values(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``values`` ``[B, actions, ...]`` with invalid actions at ``-inf`` (for a max or argmax
    over valid actions); as they are without a mask. A row with no valid action is left as it
    is (the env broke its promise; acting still picks an action)."""
    if mask is None:
        return values
    mask = mask | ~mask.any(dim=1, keepdim=True)
    shape = (*mask.shape, *(1,) * (values.dim() - 2))
    return values.masked_fill(~mask.view(shape), float("-inf"))


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Logits with invalid actions at :data:`MASKED_LOGIT` (probability 0)."""
    if mask is None:
        return logits
    mask = mask | ~mask.any(dim=1, keepdim=True)
    return logits.masked_fill(~mask, MASKED_LOGIT)


def random_valid_actions(mask: torch.Tensor | None, rows: int, num_actions: int,
                         device: torch.device) -> torch.Tensor:
    """A uniformly random valid action per row (any action without a mask), ``[rows]``."""
    if mask is None:
        return torch.randint(num_actions, (rows,), device=device)
    weights = (mask | ~mask.any(dim=1, keepdim=True)).float()
    return torch.multinomial(weights, 1).squeeze(1)


def epsilon_greedy(greedy: torch.Tensor, mask: torch.Tensor | None, epsilon: float,
            num_actions: int) -> torch.Tensor:
    """Epsilon-greedy over ``greedy`` actions ``[B]``: each row, on its own coin from Python's
    generator (seeded and saved by the run), takes a uniformly random valid action with
    probability ``epsilon`` (drawn from Python's generator too without a mask: no torch call
    for a step where no row explores)."""
    coins = [random.random() < epsilon for _ in range(len(greedy))]
    if mask is None:  # the few exploring rows drawn from Python's generator too
        if not any(coins):
            return greedy
        rows = [i for i, coin in enumerate(coins) if coin]
        actions = greedy.clone()
        actions[rows] = torch.tensor([random.randrange(num_actions) for _ in rows],
                                     device=greedy.device, dtype=greedy.dtype)
        return actions
    randoms = random_valid_actions(mask, len(greedy), num_actions, greedy.device)
    return torch.where(torch.tensor(coins, device=greedy.device), randoms, greedy)

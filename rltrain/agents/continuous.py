"""What the off-policy agents for continuous actions (SAC, TD3, DDPG) share: their refusals,
their default schedule and their action bounds."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rltrain.agents.base import SpaceError, require_bounded
from rltrain.agents.nn.encoders import check_observation_space
from rltrain.settings.loops import OffPolicyConfig


def sb3_schedule() -> OffPolicyConfig:
    """Stable-Baselines3's schedule of SAC, TD3 and DDPG: one gradient step per env step on
    batches of 256, after 100 random env steps, from a buffer of a million transitions."""
    return OffPolicyConfig(batch_size=256, warmup_steps=100, train_interval=1, train_steps=1,
                           buffer_size=1_000_000)


def check_continuous_spaces(agent: str, observation_space: gym.Space[Any],
                            action_space: gym.Space[Any], encoder: str) -> None:
    """Refuse (``SpaceError``) what an agent that squashes its actions into a bounded ``Box``
    cannot take: another action space, infinite bounds, an observation space its ``encoder``
    cannot read."""
    if not isinstance(action_space, gym.spaces.Box):
        raise SpaceError(f"{agent} needs a continuous (Box) action space; got {action_space}. "
                         "Use DQN or PPO for discrete actions.")
    require_bounded(agent, action_space, "squashes its actions into the action space's bounds")
    check_observation_space(agent, observation_space, encoder)


def box_bounds(action_space: gym.Space[Any]) -> tuple[int, torch.Tensor, torch.Tensor]:
    """A ``Box``'s flat size and its bounds as flat float32 tensors."""
    assert isinstance(action_space, gym.spaces.Box)
    low, high = (torch.as_tensor(b, dtype=torch.float32).reshape(-1)
                 for b in (action_space.low, action_space.high))
    return int(np.prod(action_space.shape)), low, high

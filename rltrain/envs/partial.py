"""Partially observed classic control, for recurrent policies: :class:`MaskVelocity` hides
the velocities of CartPole, Pendulum, Acrobot or MountainCar (sb3-contrib's
``MaskVelocityWrapper``; RL-Zoo's ``CartPoleNoVel-v1``), so that a memoryless policy sees
positions only and must infer motion from their history."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: The velocity entries of each env's observation, by id prefix.
VELOCITIES: dict[str, list[int]] = {
    "CartPole": [1, 3],  # cart velocity, pole angular velocity
    "MountainCar": [1],
    "MountainCarContinuous": [1],
    "Pendulum": [2],  # angular velocity
    "Acrobot": [4, 5],
}


class MaskVelocity(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Set the velocity entries of the observation to 0 (the space keeps its shape).

    Raises:
        ValueError: For an env whose velocities are not known (:data:`VELOCITIES`).
    """

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        env_id = env.spec.id if env.spec is not None else ""
        name = env_id.split("/")[-1].split("-")[0]
        if name not in VELOCITIES:
            raise ValueError(f"MaskVelocity knows the velocities of {sorted(VELOCITIES)}; got "
                             f"{env_id or type(env.unwrapped).__name__}.")
        shape = env.observation_space.shape
        assert shape is not None
        self.mask = np.ones(shape, dtype=np.float32)
        self.mask[VELOCITIES[name]] = 0.0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.mask).astype(observation.dtype)

"""Action masks given in ``info``: :class:`InfoActionMask` moves ``info["action_mask"]`` into
the observation, where rltrain's agents read it (``rltrain.agents.nn.masking``)."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

#: The observation key of the mask (``rltrain.agents.nn.masking.MASK_KEY``).
MASK_KEY = "action_mask"


class InfoActionMask(gym.Wrapper[dict[str, Any], Any, Any, Any]):
    """An env with ``Discrete(n)`` actions that gives the valid ones in ``info["action_mask"]``
    (n 0/1 entries, 1: valid), seen as a ``Dict`` observation ``{"observation": obs,
    "action_mask": mask}``: stored with the observation, the mask is there when acting, in
    replayed next observations and in rollout minibatches. In a config:
    ``env.wrappers=[{_target_: rltrain.envs.masking.InfoActionMask}]``.

    Raises:
        ValueError: At reset or step, when ``info`` has no ``action_mask`` of ``n`` entries.
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f"InfoActionMask masks Discrete actions; this env's action space is "
                             f"{env.action_space}.")
        self.n = int(env.action_space.n)
        self.observation_space = gym.spaces.Dict({
            "observation": env.observation_space, MASK_KEY: gym.spaces.MultiBinary(self.n)})

    def _observe(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        mask = info.get(MASK_KEY)
        array = None if mask is None else np.asarray(mask)
        if array is None or array.shape != (self.n,):
            found = "none" if array is None else f"shape {array.shape}"
            raise ValueError(f"InfoActionMask: info['{MASK_KEY}'] must hold {self.n} 0/1 entries "
                             f"(one per action); got {found}.")
        return {"observation": obs, MASK_KEY: (array > 0).astype(np.int8)}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self._observe(obs, info), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool,
                                         dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs, info), reward, terminated, truncated, info

"""Does invalid-action masking keep agents from invalid actions, and do they learn? On
:class:`MaskedChoice`, an env where an invalid action ends the episode with a penalty, DQN,
QR-DQN, PQN and PPO train with the mask (a ``Dict`` observation's ``action_mask``) and, for DQN
and PPO, without it (the same env, the mask hidden); the env counts the invalid actions every
run takes, and each run's best greedy evaluation is reported.

    python -m benchmarks.masking [--seeds 0 1 2] [--steps 10000]

Writes ``benchmarks/results/masking.json``.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from benchmarks._util import table, write_results
from rltrain import (
    DQN,
    PPO,
    DQNConfig,
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    Trainer,
)
from rltrain.agents import PQN, QRDQN, PQNConfig, QRDQNConfig

N = 4
LENGTH = 20


class MaskedChoice(gym.Env[Any, int]):
    """``N`` actions; each step a random subset is valid (the target always, each other one
    with probability 1/2). The observation is the target's one-hot (and, with ``show_mask``,
    the mask; with ``in_info``, the mask is in ``info`` instead); +1 for the target, 0 for
    another valid action, -1 and the episode ends for an invalid one; episodes of ``LENGTH``
    steps. A uniformly random valid action scores about 9.4, the best policy 20. ``invalid``
    and ``steps`` count what every instance did."""

    invalid: ClassVar[list[int]] = [0]
    steps: ClassVar[list[int]] = [0]
    spec = gym.envs.registration.EnvSpec("MaskedChoice-v0", max_episode_steps=LENGTH)

    def __init__(self, in_info: bool = False, show_mask: bool = True) -> None:
        self.in_info, self.show_mask = in_info, show_mask
        target_space = gym.spaces.Box(0.0, 1.0, (N,), np.float32)
        self.observation_space = (target_space if in_info or not show_mask else gym.spaces.Dict(
            {"observation": target_space, "action_mask": gym.spaces.MultiBinary(N)}))
        self.action_space = gym.spaces.Discrete(N)  # type: ignore[assignment]  # Space[int64]

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self.target = int(self.np_random.integers(N))
        self.mask = (self.np_random.random(N) < 0.5).astype(np.int8)
        self.mask[self.target] = 1
        one_hot = np.eye(N, dtype=np.float32)[self.target]
        if self.in_info:
            return one_hot, {"action_mask": self.mask.copy()}
        if not self.show_mask:
            return one_hot, {}
        return {"observation": one_hot, "action_mask": self.mask.copy()}, {}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        MaskedChoice.steps[0] += 1
        if not self.mask[int(action)]:
            MaskedChoice.invalid[0] += 1
            obs, info = self._draw()
            return obs, -1.0, True, False, info
        reward = 1.0 if int(action) == self.target else 0.0
        obs, info = self._draw()
        return obs, reward, False, self.t >= LENGTH, info


def off_policy(seed: int) -> OffPolicyStrategy:
    return OffPolicyStrategy(OffPolicyConfig(warmup_steps=500, train_interval=64,
                                             train_steps=32, batch_size=64, seed=seed))


#: Each agent and its strategy for a seed (small networks, settings for this task).
AGENTS: dict[str, Any] = {
    "dqn": lambda seed: (DQN(DQNConfig(hidden_sizes=[32], exploration_steps=2000, lr=1e-3)),
                         off_policy(seed)),
    "qrdqn": lambda seed: (QRDQN(QRDQNConfig(hidden_sizes=[32], exploration_steps=2000,
                                             lr=1e-3)), off_policy(seed)),
    "pqn": lambda seed: (PQN(PQNConfig(hidden_sizes=[32], lr=3e-3, gamma=0.9)),
                         OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=32, batch_size=64,
                                                         update_epochs=4, seed=seed))),
    "ppo": lambda seed: (PPO(PPOConfig(hidden_sizes=[32], lr=3e-3)),
                         OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=64, batch_size=64,
                                                         update_epochs=4, seed=seed))),
}


def count(make: Any, agent: Any, strategy: Any, num_steps: int, run_dir: Any
          ) -> tuple[int, int, float]:
    """Train on ``make``; the invalid actions and env steps counted, and the best evaluation
    (10 greedy episodes at half the steps and at the end)."""
    MaskedChoice.invalid[0] = MaskedChoice.steps[0] = 0
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      eval_interval=num_steps // 2, eval_episodes=10, logger=False,
                      enable_progress_bar=False, enable_console=False,
                      enable_metrics_file=False)
    best = trainer.fit(make, agent).summary.best_eval_return
    return MaskedChoice.invalid[0], MaskedChoice.steps[0], float(best or 0.0)


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, results = [], []
    cases = [(name, True) for name in AGENTS] + [("dqn", False), ("ppo", False)]
    for name, masked in cases:
        runs = []
        for seed in args.seeds:
            agent, strategy = AGENTS[name](seed)
            with tempfile.TemporaryDirectory() as run_dir:
                make = MaskedChoice if masked else (lambda: MaskedChoice(show_mask=False))
                invalid, steps, best = count(make, agent, strategy, args.steps, run_dir)
            runs.append({"seed": seed, "invalid": invalid, "env_steps": steps, "best": best})
        results.append({"agent": name, "masked": masked, "runs": runs})
        rows.append([name, "masked" if masked else "unmasked",
                     " / ".join(str(r["invalid"]) for r in runs),
                     " / ".join(f"{r['env_steps']:,}" for r in runs),
                     " / ".join(f"{r['best']:.1f}" for r in runs)])
        print(rows[-1], flush=True)
    print(table(["agent", "mask", "invalid actions (per seed)", "env steps",
                 "best greedy return (of 20)"], rows))
    write_results("masking", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()

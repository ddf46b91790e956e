"""DQN with CleanRL's ``dqn.py`` settings, part by part, rltrain beside CleanRL's own lines in
one process: a gradient step, and a collected env step.

``benchmarks.cleanrl_speed`` times whole processes; on a machine where anything else runs, the
ratio of two ~30 s processes moves by ±20 % from repeat to repeat. Here both sides run in one
process on one thread, alternated, so the machine's load falls on both alike:

- ``gradient step``: rltrain's ``Run.gradient_step`` (a batch of 128 from its replay,
  ``DQN.training_step`` through ``Optimization``, the TrainStep event) of a real run of
  ``dqn_cartpole`` with ``benchmarks.cleanrl_dqn.CLEANRL_SETTINGS``, beside CleanRL's
  training lines (an SB3 ``ReplayBuffer`` sample, the target's max, the MSE, ``zero_grad``,
  ``backward``, Adam's ``step``) on the same network sizes.
- ``collect``: rltrain's ``Run.step`` (act at the final epsilon 0.05, step, store, events),
  beside CleanRL's loop body (epsilon-greedy, ``SyncVectorEnv`` with
  ``RecordEpisodeStatistics``, the final observation of a truncation, the SB3 replay add).

Each row: microseconds per call, median (min-max) over ``--repeats``, and rltrain's speed-up.
Needs ``stable-baselines3`` (``pip install -e ".[bench]"``).

    python -m benchmarks.dqn_parts_cleanrl [--calls 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks._util import QUIET, median_range, table, write_results
from benchmarks.cleanrl_dqn import CLEANRL_SETTINGS

BATCH, GAMMA, WARMUP = 128, 0.99, 10_000


def rltrain_run() -> Any:
    """The run object of a real ``dqn_cartpole`` run with CleanRL's settings, left as its
    final save found it (replay full past warm-up, epsilon at its end)."""
    from rltrain.config.schema import compose
    from rltrain.strategies.run import engine
    from rltrain.trainer import build

    kept: dict[str, Any] = {}
    finish = engine.Run.finish

    def keep(run: Any) -> Any:
        kept["run"] = run
        return finish(run)

    engine.Run.finish = keep  # type: ignore[method-assign, assignment]
    try:
        with tempfile.TemporaryDirectory() as run_dir, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(compose(["dqn_cartpole"], [
                *CLEANRL_SETTINGS, f"trainer.num_steps={WARMUP + 100}",
                f"trainer.run_dir={run_dir}", *QUIET, "agent.exploration_steps=100"])).fit()
    finally:
        engine.Run.finish = finish  # type: ignore[method-assign]
    return kept["run"]


class CleanRL:
    """CleanRL's ``dqn.py`` network, optimizer, replay, env and loop lines."""

    def __init__(self) -> None:
        from stable_baselines3.common.buffers import ReplayBuffer

        def network() -> nn.Module:
            return nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                                 nn.Linear(84, 2))

        self.q, self.target = network(), network()
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=2.5e-4)
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.rb = ReplayBuffer(WARMUP, self.envs.single_observation_space,
                               self.envs.single_action_space, "cpu",
                               handle_timeout_termination=False)
        self.obs, _ = self.envs.reset(seed=1)
        random.seed(1)
        for _ in range(WARMUP):
            self.collect(epsilon=1.0)

    def collect(self, epsilon: float = 0.05) -> None:
        if random.random() < epsilon:
            actions = np.array([self.envs.single_action_space.sample()])
        else:
            actions = torch.argmax(self.q(torch.Tensor(self.obs)), dim=1).cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = self.envs.step(actions)
        real_next_obs = next_obs.copy()
        if "final_obs" in infos:
            for idx, truncated in enumerate(truncations):
                if truncated:
                    real_next_obs[idx] = infos["final_obs"][idx]
        self.rb.add(self.obs, real_next_obs, actions, rewards, terminations,
                    infos)  # type: ignore[arg-type]  # as CleanRL passes them
        self.obs = next_obs

    def gradient_step(self) -> None:
        data = self.rb.sample(BATCH)
        with torch.no_grad():
            target_max, _ = self.target(data.next_observations).max(dim=1)
            td_target = data.rewards.flatten() + GAMMA * target_max * (1 - data.dones.flatten())
        old_val = self.q(data.observations).gather(1, data.actions).squeeze()
        loss = F.mse_loss(td_target, old_val)
        self.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()


def per_call(call: Callable[[], Any], calls: int) -> float:
    """Microseconds per ``call()``."""
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="gradient steps per timing "
                        "(collected env steps: 5x as many)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run, peer = rltrain_run(), CleanRL()
    parts = {"gradient step": ((lambda: run.gradient_step(lambda: run.storage.sample(BATCH))),
                               peer.gradient_step, args.calls),
             "collect": (run.step, peer.collect, 5 * args.calls)}
    found: dict[str, dict[str, list[float]]] = {p: {"rltrain": [], "cleanrl": []} for p in parts}
    for repeat in range(args.repeats + 1):  # the first round warms both up and is dropped
        for part, (ours, theirs, calls) in parts.items():
            times = (per_call(ours, calls), per_call(theirs, calls))
            if repeat:
                found[part]["rltrain"].append(times[0])
                found[part]["cleanrl"].append(times[1])
                print(f"repeat {repeat} {part}: rltrain {times[0]:.1f} us, CleanRL "
                      f"{times[1]:.1f} us", flush=True)
    rows = [[part, median_range(t["rltrain"], "{:.1f}"), median_range(t["cleanrl"], "{:.1f}"),
             median_range([c / r for r, c in zip(t["rltrain"], t["cleanrl"], strict=True)],
                          "{:.2f}")]
            for part, t in found.items()]
    print(table(["part", "rltrain µs", "CleanRL µs", "speed-up"], rows))
    write_results("dqn_parts_cleanrl", {"args": vars(args), "found": found})


if __name__ == "__main__":
    main()

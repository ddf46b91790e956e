"""PPO on Atari: env steps per second of rltrain with the envpool backend and with Gymnasium's
async vector env, beside Stable-Baselines3 (``AtariWrapper`` + ``SubprocVecEnv``), alternated
in one run, with where each step's time goes.

All three train ``ppo_atari``'s settings (``envpool-bf16``, an extra setup: rltrain's envpool
run with ``trainer.dtype=bfloat16``, its training forward passes under bfloat16 autocast, which
SB3 has no setting for) (8 envs x 128 steps, 4 epochs of 4 minibatches of 256,
the Nature CNN) on ``--game`` (Breakout) for ``--steps`` env steps, no evaluation, at each
torch thread count of ``--threads``. Each repeat runs every (setup, threads) pair once, in an
order rotated from repeat to repeat; the table gives medians (min-max) and the ratios to SB3 at
the same thread count, per repeat: of the whole run (rltrain's from building the run to its
final checkpoint, SB3's from building the model, its envs made before), and steady, from the
first env step past the first rollout (1,024 env steps) to the last env step in both.

Where the time goes (rltrain, per rollout of 1,024 env steps): the gradient steps (PPO's
``training_step`` on a minibatch of 256 stacks, timed alone, times the run's gradient steps:
the CNN's arithmetic, the same in both libraries), acting (the policy on 8 stacks, timed alone,
per vector step), and the env (the backend stepped alone with random actions); the rest is
rltrain's own (storing, GAE, events).

    python -m benchmarks.atari_speed [--game ALE/Breakout-v5] [--steps 8192] [--repeats 3] \
        [--threads 1 2] [--setups envpool async sb3]

Writes ``benchmarks/results/atari_speed.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from typing import Any

import numpy as np
import torch

from benchmarks._util import median_range, table, write_results
from benchmarks.atari_common import atari_config, sb3_atari_envs, sb3_ppo
from rltrain.buffers import RolloutBatch
from rltrain.envs.make import make_vector_env
from rltrain.observe import EnvStep, Metrics, Subscriber
from rltrain.optim import Optimization
from rltrain.trainer import build

SETUPS = {"envpool": ["env.backend=envpool"], "async": ["strategy.vectorization=async"],
          "sync": ["strategy.vectorization=sync"],
          "envpool-bf16": ["env.backend=envpool", "trainer.dtype=bfloat16"]}


#: Env steps of the first rollout (8 x 128): the steady window starts when it is collected.
FIRST_ROLLOUT = 1_024


class Window(Subscriber):
    """The time at which the run's env steps first reach :data:`FIRST_ROLLOUT` and ``last``."""

    def __init__(self, last: int) -> None:
        self.last = last
        self.times: dict[int, float] = {}

    def on_env_step(self, event: EnvStep, metrics: Metrics) -> None:
        for mark in (FIRST_ROLLOUT, self.last):
            if event.env_steps >= mark and mark not in self.times:
                self.times[mark] = time.perf_counter()

    def steady(self) -> float:
        """Env steps per second between the two marks."""
        return float((self.last - FIRST_ROLLOUT)
                     / (self.times[self.last] - self.times[FIRST_ROLLOUT]))


def rltrain_run(game: str, setup: str, steps: int, threads: int) -> dict[str, Any]:
    window = Window(steps)
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = atari_config(game, steps, run_dir, [*SETUPS[setup], "trainer.eval_interval=null",
                                                  f"trainer.num_threads={threads}"])
        built = build(cfg, callbacks=[window])
        start = time.perf_counter()
        summary = built.fit().summary
        seconds = time.perf_counter() - start
    return {"env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "seconds": seconds, "steady": window.steady(), "built": built, "config": cfg}


def sb3_run(game: str, steps: int, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = atari_config(game, steps, run_dir)
    from stable_baselines3.common.callbacks import BaseCallback

    class SB3Window(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.times: dict[int, float] = {}

        def _on_step(self) -> bool:
            for mark in (FIRST_ROLLOUT, steps):
                if self.num_timesteps >= mark and mark not in self.times:
                    self.times[mark] = time.perf_counter()
            return True

    envs = sb3_atari_envs(game, int(cfg.strategy.num_envs), 0,
                          float(cfg.env.atari.repeat_action_probability))
    window = SB3Window()
    try:
        start = time.perf_counter()
        model = sb3_ppo(cfg, envs, seed=0)
        model.learn(total_timesteps=steps, callback=window)
        steady = (steps - FIRST_ROLLOUT) / (window.times[steps] - window.times[FIRST_ROLLOUT])
        return {"env_steps": model.num_timesteps, "seconds": time.perf_counter() - start,
                "steady": steady}
    finally:
        envs.close()


def step_costs(run: dict[str, Any], calls: int) -> dict[str, float]:
    """Seconds of one gradient step and of one acting call (8 stacks) of the trained agent."""
    agent, cfg = run["built"].agent, run["config"]
    size, num_envs = int(cfg.strategy.batch_size), int(cfg.strategy.num_envs)
    settings = dataclasses.replace(run["built"].trainer.optimization, on_nan_loss="raise")
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress,
                         settings=settings)
    obs = torch.randint(0, 255, (size, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 4, (size,))
    with torch.no_grad():
        dist, values = agent.net(obs)
        log_probs = dist.log_prob(actions)
    batch = RolloutBatch(obs, actions, log_probs, values, torch.randn(size),
                         values + torch.randn(size))
    policy = agent.policy(torch.device("cpu"))

    def timed(call: Any) -> float:
        for _ in range(5):
            call()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - start) / calls

    def act() -> None:
        with torch.inference_mode():
            policy.act(obs[:num_envs], None, False)

    return {"gradient_step": timed(lambda: optim.training_step(agent, batch)),
            "act": timed(act)}


def env_seconds_per_vector_step(run: dict[str, Any], setup: str, vector_steps: int) -> float:
    """Seconds of one vector step of the run's env backend alone, random actions."""
    cfg = run["config"]
    from rltrain.config.instantiate import make_env

    envs = make_vector_env(make_env(cfg.env), num_envs=int(cfg.strategy.num_envs), seed=0,
                           vectorization="async" if setup == "async" else "sync")
    try:
        envs.reset(seed=0)
        start = time.perf_counter()
        for _ in range(vector_steps):
            envs.step(envs.action_space.sample())
        return (time.perf_counter() - start) / vector_steps
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=8_192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--setups", nargs="+", default=["envpool", "async", "sb3"],
                        choices=[*SETUPS, "sb3"])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    pairs = [(setup, threads) for threads in args.threads for setup in args.setups]
    sps: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    steady: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    shares: dict[tuple[str, int], list[dict[str, float]]] = {pair: [] for pair in pairs}
    for repeat in range(args.repeats):
        shift = repeat % len(pairs)
        for setup, threads in pairs[shift:] + pairs[:shift]:
            if setup == "sb3":
                run = sb3_run(args.game, args.steps, threads)
            else:
                run = rltrain_run(args.game, setup, args.steps, threads)
            sps[setup, threads].append(run["env_steps"] / run["seconds"])
            steady[setup, threads].append(run["steady"])
            print(f"repeat {repeat} {setup} threads={threads}: "
                  f"{sps[setup, threads][-1]:.0f} env steps/s whole, "
                  f"{steady[setup, threads][-1]:.0f} steady", flush=True)
            if setup != "sb3" and repeat == 0:
                torch.set_num_threads(threads)
                costs = step_costs(run, args.calls)
                vector_steps = run["env_steps"] // int(run["config"].strategy.num_envs)
                env = env_seconds_per_vector_step(run, setup, 200) * vector_steps
                parts = {"gradient steps": costs["gradient_step"] * run["gradient_steps"],
                         "acting": costs["act"] * vector_steps, "env": env}
                shares[setup, threads].append(
                    {name: seconds / run["seconds"] for name, seconds in parts.items()})
    rows = []
    for setup, threads in pairs:
        base, steady_base = sps.get(("sb3", threads)), steady.get(("sb3", threads))
        ratio = (median_range([a / b for a, b in zip(sps[setup, threads], base, strict=True)],
                              "{:.2f}") if base and setup != "sb3" else "-")
        steady_ratio = (median_range([a / b for a, b in zip(steady[setup, threads],
                                                             steady_base, strict=True)],
                                     "{:.2f}") if steady_base and setup != "sb3" else "-")
        split = shares[setup, threads]
        where = ("; ".join(f"{name} {100 * share:.0f}%" for name, share in split[0].items())
                 + f"; the rest {100 * (1 - sum(split[0].values())):.0f}%") if split else "-"
        rows.append([setup, str(threads), median_range(sps[setup, threads]), ratio,
                     median_range(steady[setup, threads]), steady_ratio, where])
    print(f"PPO ppo_atari on {args.game}, {args.steps:,} env steps a run, {args.repeats} repeats")
    print(table(["setup", "torch threads", "env steps/s, whole run", "/ SB3 (same threads)",
                 "steady env steps/s", "/ SB3", "rltrain's time: where it goes"], rows))
    write_results("atari_speed", {
        "args": vars(args),
        "steps_per_second": {f"{s}/{t}": v for (s, t), v in sps.items()},
        "steady_steps_per_second": {f"{s}/{t}": v for (s, t), v in steady.items()},
        "time_shares": {f"{s}/{t}": v for (s, t), v in shares.items()},
        "numpy": np.__version__})


if __name__ == "__main__":
    main()

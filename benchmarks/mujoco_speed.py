"""rltrain beside Stable-Baselines3 on HalfCheetah-v5: env steps per second of SAC, TD3 and
PPO with the MuJoCo presets' settings, alternated in one run, and the share of each step that is
the gradient step's arithmetic.

Per agent, both libraries train from the same preset (``sac_halfcheetah``, ``td3_halfcheetah``,
``ppo_halfcheetah``; SB3 through the translations of ``benchmarks.mujoco_offpolicy`` and
``benchmarks.ppo_learning``) for ``--steps`` env steps, one sub-env, one torch thread, no
evaluation; off-policy runs start training after ``--warmup`` (1,000) random env steps instead of
10,000, so that most of the steps timed train. Each repeat runs every (agent, library) pair once,
in an order rotated from repeat to repeat; ratios rltrain / SB3 are per repeat, and the table
gives their median (min-max).

The arithmetic's share: rltrain's ``training_step`` timed alone on a batch of the preset's size
with HalfCheetah's shapes (``--calls`` calls after a warm-up), times the run's gradient steps,
over the run's wall time. What is left is the env (MuJoCo's step), acting, storing and the
framework.

    python -m benchmarks.mujoco_speed [--agents sac td3 ppo] [--steps 4000] [--repeats 3]

Writes ``benchmarks/results/mujoco_speed.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks._util import QUIET, median_range, table, write_results
from benchmarks.mujoco_offpolicy import sb3_settings as offpolicy_settings
from benchmarks.ppo_learning import sb3_settings as ppo_settings
from rltrain.buffers import ReplayBatch, RolloutBatch
from rltrain.config.schema import compose
from rltrain.optim import Optimization
from rltrain.trainer import build

ENV = "HalfCheetah-v5"


def config(agent: str, steps: int, warmup: int, run_dir: str) -> Any:
    extra = [] if agent == "ppo" else [f"strategy.warmup_steps={warmup}"]
    return compose([f"{agent}_halfcheetah"], [
        f"trainer.num_steps={steps}", f"trainer.run_dir={run_dir}", "trainer.eval_interval=null",
        "trainer.return_threshold=null", "trainer.num_threads=1", *QUIET, *extra])


def rltrain_run(agent: str, steps: int, warmup: int) -> dict[str, Any]:
    """One timed rltrain run; the built run is returned for the arithmetic's timing."""
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = config(agent, steps, warmup, run_dir)
        built = build(cfg)
        start = time.perf_counter()
        summary = built.fit().summary
        seconds = time.perf_counter() - start
    return {"env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps,
            "seconds": seconds, "built": built, "config": cfg}


def sb3_run(agent: str, steps: int, warmup: int) -> dict[str, Any]:
    """One timed Stable-Baselines3 run on the same settings."""
    import stable_baselines3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = config(agent, steps, warmup, run_dir)
    start = time.perf_counter()
    if agent == "ppo":
        settings = ppo_settings(cfg)
        envs = VecNormalize(make_vec_env(ENV, n_envs=1, seed=0), gamma=settings["ppo"]["gamma"])
        model: Any = stable_baselines3.PPO("MlpPolicy", envs, seed=0, device="cpu",
                                           **settings["ppo"])
    else:
        env = gym.make(ENV)
        space = env.action_space
        assert isinstance(space, gym.spaces.Box)
        name, kwargs = offpolicy_settings(cfg, (space.high - space.low) / 2)
        model = getattr(stable_baselines3, name)("MlpPolicy", env, seed=0, device="cpu",
                                                 **kwargs)
    model.learn(total_timesteps=steps)
    return {"env_steps": model.num_timesteps, "seconds": time.perf_counter() - start}


def arithmetic_seconds(built: Any, cfg: Any, calls: int) -> float:
    """Seconds of one ``training_step`` of the trained agent alone, on batches of the preset's
    size with HalfCheetah's shapes (17 observations, 6 actions)."""
    agent, size = built.agent, int(cfg.strategy.batch_size)
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    obs, actions = torch.randn(size, 17), torch.rand(size, 6) * 2 - 1
    if cfg.agent.name == "ppo":
        with torch.no_grad():
            dist, values = agent.net(obs)
            log_probs = dist.log_prob(actions)
        batch: Any = RolloutBatch(obs, actions, log_probs, values, torch.randn(size),
                                  values + torch.randn(size))
    else:
        batch = ReplayBatch(obs, actions, torch.randn(size), torch.randn(size, 17),
                            torch.zeros(size), torch.zeros(size))
    for _ in range(10):  # warm-up
        optim.training_step(agent, batch)
    start = time.perf_counter()
    for _ in range(calls):
        optim.training_step(agent, batch)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["sac", "td3", "ppo"],
                        choices=["sac", "td3", "ppo"])
    parser.add_argument("--steps", type=int, default=4_000)
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pairs = [(agent, library) for agent in args.agents for library in ("rltrain", "sb3")]
    sps: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    shares: dict[str, list[float]] = {agent: [] for agent in args.agents}
    for repeat in range(args.repeats):
        shift = repeat % len(pairs)
        for agent, library in pairs[shift:] + pairs[:shift]:
            run = (rltrain_run if library == "rltrain" else sb3_run)(agent, args.steps,
                                                                     args.warmup)
            sps[agent, library].append(run["env_steps"] / run["seconds"])
            if library == "rltrain":
                step = arithmetic_seconds(run["built"], run["config"], args.calls)
                shares[agent].append(step * run["gradient_steps"] / run["seconds"])
            print(f"repeat {repeat} {agent} {library}: {sps[agent, library][-1]:.0f} env "
                  "steps/s", flush=True)
    rows = []
    for agent in args.agents:
        ratios = [a / b for a, b in zip(sps[agent, "rltrain"], sps[agent, "sb3"], strict=True)]
        rows.append([agent, median_range(sps[agent, "rltrain"]), median_range(sps[agent, "sb3"]),
                     median_range(ratios, "{:.3f}"),
                     median_range([100 * s for s in shares[agent]], "{:.0f}%")])
    print(f"{ENV}, {args.steps:,} env steps a run, {args.repeats} repeats, one thread")
    print(table(["agent", "rltrain env steps/s", "SB3 env steps/s", "rltrain / SB3",
                 "gradient-step arithmetic's share of rltrain's time"], rows))
    write_results("mujoco_speed", {
        "args": vars(args), "steps_per_second": {f"{a}/{lib}": v for (a, lib), v in sps.items()},
        "arithmetic_share": shares, "numpy": np.__version__})


if __name__ == "__main__":
    main()

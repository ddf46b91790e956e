"""Two versions of rltrain, alternated: env steps per second of DQN, PPO and SAC training.

Each repeat runs every (agent, version) pair once, in an order rotated from repeat to repeat,
each in its own process with ``PYTHONPATH`` set to that version's checkout, one torch thread,
no renderers, no evaluation and no checkpoints: what a change to the engine costs or saves per
env step. Only ``Trainer.fit`` is timed (imports and the first env creation are not). The
table gives, per agent, each version's median (min-max) steps per second and the median of the
per-repeat ratios ``after / before`` (runs seconds apart, so machine drift cancels).

    git worktree add /tmp/rltrain-before <commit>
    python -m benchmarks.ab_speed --before /tmp/rltrain-before --after . [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._util import median_range, table

#: One timed fit per agent, with the public API both versions share.
SNIPPET = """
import json, sys, tempfile, time, torch
torch.set_num_threads(1)
from rltrain import (DQN, PPO, SAC, DQNConfig, OffPolicyConfig, OffPolicyStrategy,
                     OnPolicyConfig, OnPolicyStrategy, PPOConfig, SACConfig, Trainer)
agent_name, steps = sys.argv[1], int(sys.argv[2])
if agent_name == "dqn":
    env, agent = "CartPole-v1", DQN(DQNConfig(hidden_sizes=[256, 256]))
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=1000, train_interval=4,
                                                 train_steps=1, batch_size=64))
elif agent_name == "ppo":
    env, agent = "CartPole-v1", PPO(PPOConfig())
    strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=8, n_steps=32, batch_size=256,
                                               update_epochs=20))
else:
    env, agent = "Pendulum-v1", SAC(SACConfig(hidden_sizes=[256, 256]))
    strategy = OffPolicyStrategy(OffPolicyConfig(warmup_steps=500, train_interval=1,
                                                 train_steps=1, batch_size=256))
with tempfile.TemporaryDirectory() as run_dir:
    trainer = Trainer(num_steps=steps, strategy=strategy, run_dir=run_dir, logger=False,
                      enable_progress_bar=False, enable_console=False,
                      enable_metrics_file=False, eval_interval=None, num_threads=1)
    start = time.perf_counter()
    trainer.fit(env, agent)
    print(json.dumps({"sps": steps / (time.perf_counter() - start)}))
"""

STEPS = {"dqn": 8000, "ppo": 25600, "sac": 2000}


def timed(checkout: Path, agent: str, steps: int) -> float:
    """Env steps per second of one fit of ``agent`` with the rltrain of ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SNIPPET, agent, str(steps)], env=env,
                          capture_output=True, text=True, cwd=checkout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout} {agent}: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["sps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the earlier checkout")
    parser.add_argument("--after", type=Path, default=Path("."), help="the later checkout")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--agents", nargs="+", default=list(STEPS), choices=list(STEPS))
    args = parser.parse_args()
    versions = {"before": args.before, "after": args.after}
    sps: dict[tuple[str, str], list[float]] = {}
    ratios: dict[str, list[float]] = {agent: [] for agent in args.agents}
    pairs = [(agent, version) for agent in args.agents for version in versions]
    for repeat in range(args.repeats):
        shift = repeat % len(pairs)
        measured: dict[tuple[str, str], float] = {}
        for agent, version in pairs[shift:] + pairs[:shift]:
            measured[agent, version] = timed(versions[version], agent, STEPS[agent])
            sps.setdefault((agent, version), []).append(measured[agent, version])
            print(f"repeat {repeat + 1}: {agent} {version}: "
                  f"{measured[agent, version]:,.0f} steps/s", flush=True)
        for agent in args.agents:
            ratios[agent].append(measured[agent, "after"] / measured[agent, "before"])
    rows = [[agent.upper(), f"{STEPS[agent]:,}", median_range(sps[agent, "before"], "{:,.0f}"),
             median_range(sps[agent, "after"], "{:,.0f}"), median_range(ratios[agent], "{:.3f}"),
             f"{statistics.median(ratios[agent]):.3f}"]
            for agent in args.agents]
    print(table(["agent", "env steps", "before (steps/s)", "after (steps/s)",
                 "after/before per repeat", "median"], rows))


if __name__ == "__main__":
    main()

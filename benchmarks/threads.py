"""Torch threads against speed: the shipped presets' networks (and wider ones) at 1 and 2
threads, to choose ``num_threads="auto"``'s rule (``rltrain/config/trainer_config.py``).

Each case runs a shipped preset's config for a fixed number of env steps with every output
off and no evaluation, once per thread count and repeat, the thread counts alternating so that
they run seconds apart (this machine's speed drifts by about 20% over minutes). A run is timed
whole: making the envs and networks, training, the final checkpoint.

    python -m benchmarks.threads [--repeats 2] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from benchmarks._util import QUIET, table, write_results
from rltrain.config.schema import compose
from rltrain.observe.model_summary import summarize
from rltrain.trainer import build

#: (name, preset and overrides). DQN trains 128 gradient steps per 256 env steps; PPO 20
#: epochs per 256-transition rollout.
CASES: list[tuple[str, list[str]]] = [
    ("DQN CartPole 256x256, 4,000 env steps",
     ["dqn_cartpole", "trainer.num_steps=4000"]),
    ("PPO CartPole 64x64, 8,192 env steps",
     ["ppo_cartpole", "trainer.num_steps=8192"]),
    ("DQN CartPole 1024x1024, 2,000 env steps",
     ["dqn_cartpole", "trainer.num_steps=2000", "agent.hidden_sizes=[1024,1024]"]),
    ("DQN CartPole 2048x2048, 2,000 env steps",
     ["dqn_cartpole", "trainer.num_steps=2000", "agent.hidden_sizes=[2048,2048]"]),
]


def run(overrides: list[str], threads: int) -> tuple[float, int]:
    """Seconds of one whole run at ``threads`` torch threads, and the agent's trainable
    parameters."""
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = compose(overrides[:1], [*overrides[1:], *QUIET, "trainer.eval_interval=null",
                                      f"trainer.num_threads={threads}",
                                      f"trainer.run_dir={run_dir}"])
        built = build(cfg)
        start = time.perf_counter()
        built.fit()
        seconds = time.perf_counter() - start
        parameters = sum(row.trainable for row in summarize(built.agent))
    return seconds, parameters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cases", type=int, nargs="+", default=list(range(len(CASES))))
    args = parser.parse_args()
    rows, raw = [], {}
    for index in args.cases:
        name, overrides = CASES[index]
        seconds: dict[int, list[float]] = {t: [] for t in args.threads}
        parameters = 0
        for repeat in range(args.repeats):
            order = args.threads if repeat % 2 == 0 else args.threads[::-1]
            for threads in order:
                took, parameters = run(overrides, threads)
                seconds[threads].append(took)
                print(f"{name}: {threads} thread(s) {took:.1f} s", flush=True)
        medians = {t: statistics.median(v) for t, v in seconds.items()}
        first = args.threads[0]
        rows.append([name, f"{parameters:,}"]
                    + [f"{medians[t]:.1f}" for t in args.threads]
                    + [f"{medians[t] / medians[first]:.2f}" for t in args.threads[1:]])
        raw[name] = {"parameters": parameters, "seconds": seconds}
    header = (["case", "parameters"] + [f"{t} thread(s), s" for t in args.threads]
              + [f"{t} / {args.threads[0]}" for t in args.threads[1:]])
    print(table(header, rows))
    write_results("threads", {"cases": raw})


if __name__ == "__main__":
    main()

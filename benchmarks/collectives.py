"""What one collective costs between two processes here: the all-gather of an agreement
(``sync_interval`` vector steps of stop requests and episodes) and the all-reduce of a
gradient bucket (one per optimizer step) of the shipped agents' sizes.

Starts itself under torchrun (``python -m torch.distributed.run --standalone
--nproc-per-node=2``, gloo on the CPU) and prints microseconds per call, the median of 5
rounds of 200 calls after 50 warm-up calls:

    python -m benchmarks.collectives
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

#: Floats in each gradient bucket: PPO's 64x64 CartPole net, DQN's 256x256 Q-network, SAC's
#: twin 256x256 critics (Pendulum).
BUCKETS = {"PPO ppo_cartpole (9,155)": 9_155, "DQN dqn_cartpole (67,586)": 67_586,
           "SAC critics sac_pendulum (134,658)": 134_658}


def timed(call: Callable[[], object], rounds: int = 5, calls: int = 200) -> float:
    for _ in range(50):
        call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def worker() -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rows = []
    agreement = torch.zeros(2 + 5 * 16)  # one sub-env, sync_interval 16
    out = [torch.empty_like(agreement) for _ in range(2)]
    rows.append(("all-gather, agreement row (82 floats)",
                 timed(lambda: dist.all_gather(out, agreement))))
    flag = torch.zeros(1)
    rows.append(("all-reduce, 1 float", timed(lambda: dist.all_reduce(flag))))
    for name, size in BUCKETS.items():
        bucket = torch.zeros(size + 1)
        rows.append((f"all-reduce, gradient bucket {name}",
                     timed(functools.partial(dist.all_reduce, bucket), calls=100)))
    if dist.get_rank() == 0:
        print("| collective (gloo, 2 processes, this machine) | µs per call |")
        print("|---|---|")
        for name, micros in rows:
            print(f"| {name} | {micros:,.0f} |")
    dist.destroy_process_group()


def main() -> None:
    if "RANK" in os.environ:
        worker()
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node=2", "-m", "benchmarks.collectives"], check=True, env=env)


if __name__ == "__main__":
    main()

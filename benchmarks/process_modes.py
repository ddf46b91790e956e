"""How much does the same arithmetic's speed differ from one fresh process to the next?

Starts ``--processes`` Python processes one after another (each pinned where this one is, one
torch thread). Each times DQN's two heaviest parts on RL-Zoo's CartPole network (256x256 MLP,
batch 64): the 64x256 @ 256x256 matrix product alone, and the online forward and backward
pass (``benchmarks.gradient_step``'s), each as the median of 5 timings after a warm-up. The
table gives every process's figures, then their median and min-max.

On a machine whose processes land in two speed modes (seen on this VM: a process keeps its
mode for its whole life), a ratio between two libraries' runs, each its own process, is only
as good as the number of alternated repeats behind it.

    python -m benchmarks.process_modes [--processes 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from benchmarks._util import median_range, table, write_results

#: What each process runs: prints a JSON object of µs per call.
CHILD = """
import json, statistics, time
import torch, torch.nn.functional as F
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                    nn.Linear(256, 2))
obs, actions, targets = torch.randn(64, 4), torch.randint(0, 2, (64,)), torch.randn(64)
rows, weight = torch.randn(64, 256), torch.randn(256, 256)

def forward_backward():
    q = net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
    F.huber_loss(q, targets).backward()

def micros(part, calls):
    for _ in range(50):
        part()
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            part()
        timings.append(1e6 * (time.perf_counter() - start) / calls)
    return statistics.median(timings)

print(json.dumps({"product": micros(lambda: rows @ weight, 1000),
                  "forward_backward": micros(forward_backward, 300)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10)
    args = parser.parse_args()
    runs = []
    for index in range(args.processes):
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                              check=True)
        runs.append(json.loads(done.stdout))
        print(f"process {index}: product {runs[-1]['product']:.0f} µs, forward + backward "
              f"{runs[-1]['forward_backward']:.0f} µs", flush=True)
    rows = [[name, median_range([run[key] for run in runs], "{:.0f}"),
             f"{max(run[key] for run in runs) / min(run[key] for run in runs):.2f}"]
            for name, key in (("64x256 @ 256x256 product", "product"),
                              ("online forward + backward", "forward_backward"))]
    print(table(["part (µs per call)", "median (min-max) over processes", "slowest / fastest"],
                rows))
    print(f"results: {write_results('process_modes', {'args': vars(args), 'runs': runs})}")


if __name__ == "__main__":
    main()

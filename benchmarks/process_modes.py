"""How much does the same arithmetic's speed differ from one fresh process to the next?

Starts ``--processes`` Python processes one after another (each pinned where this one is, one
torch thread). Each times DQN's two heaviest parts on RL-Zoo's CartPole network (256x256 MLP,
batch 64), as ``benchmarks.gradient_step`` times them: the 64x256 @ 256x256 matrix product
alone, and the online forward and backward pass, each as the median of 5 timings of 300 calls
after a warm-up. The table gives their median and min-max over the processes.

On a machine whose processes land in two speed modes (seen on this VM: a process keeps its
mode, mostly), a ratio between two libraries' runs, each its own process, is only
as good as the number of alternated repeats behind it.

    python -m benchmarks.process_modes [--processes 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._util import median_range, table, write_results

#: ``benchmarks.gradient_step``'s parts each process times.
PARTS = ("matrix product 64x256 @ 256x256", "online forward + backward")
#: What each process runs: prints each part's µs per call (5 timings) as JSON.
CHILD = ("import json\nfrom benchmarks.gradient_step import time_parts\n"
         f"print(json.dumps(time_parts(calls=300, repeats=5, names={PARTS!r})))")
ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10)
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for index in range(args.processes):
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        runs.append({name: statistics.median(values)
                     for name, values in json.loads(done.stdout).items()})
        print(f"process {index}: " + ", ".join(f"{name} {runs[-1][name]:.0f} µs"
                                               for name in PARTS), flush=True)
    rows = [[name, median_range([run[name] for run in runs], "{:.0f}"),
             f"{max(run[name] for run in runs) / min(run[name] for run in runs):.2f}"]
            for name in PARTS]
    print(table(["part (µs per call)", "median (min-max) over processes", "slowest / fastest"],
                rows))
    print(f"results: {write_results('process_modes', {'args': vars(args), 'runs': runs})}")


if __name__ == "__main__":
    main()

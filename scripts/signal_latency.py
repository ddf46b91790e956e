"""How fast does a running `rltrain fit` stop on SIGINT and on SIGTERM, and is `last` loadable?

Starts `rltrain fit` in a subprocess, waits until it trains, sends the signal, and reports the
seconds from the signal to the run's end (its summary.json written, after the final checkpoint
and the renderers' close) and to the process's exit (which adds the interpreter's teardown),
its exit code, the stop reason and whether the last checkpoint loads and is the final step.

    python scripts/signal_latency.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rltrain.checkpoint import Checkpointer, read_checkpoint


def one(sig: signal.Signals, run_dir: Path) -> dict[str, object]:
    process = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "fit", "trainer.num_steps=1000000",
         "trainer.return_threshold=null", f"trainer.run_dir={run_dir}",
         "trainer.enable_progress_bar=false", "trainer.enable_console=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 4):
        time.sleep(0.1)
    sent = time.time()
    process.send_signal(sig)
    code = process.wait(timeout=60)
    seconds = time.time() - sent
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text())
    last = read_checkpoint(Checkpointer(run_dir / "checkpoints").resolve("last"))
    return {"signal": sig.name, "seconds": seconds,
            "seconds_to_end": summary_file.stat().st_mtime - sent, "exit_code": code,
            "stop_reason": summary["stop_reason"],
            "last_is_final_step": last["progress"]["env_steps"] == summary["env_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = []
    for _ in range(args.repeats):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with tempfile.TemporaryDirectory() as tmp:
                result = one(sig, Path(tmp) / "run")
            results.append(result)
            print(result, flush=True)
    for name in ("SIGINT", "SIGTERM"):
        for key, label in (("seconds_to_end", "run ended and saved"), ("seconds", "exit")):
            values = [float(r[key]) for r in results if r["signal"] == name]  # type: ignore[arg-type]
            print(f"{name}: signal to {label}: {statistics.median(values):.2f} s median "
                  f"({min(values):.2f}-{max(values):.2f}) over {len(values)} runs")
    ok = all(r["exit_code"] == 0 and r["last_is_final_step"] for r in results)
    print("all exited 0 with last saved at the final step" if ok else "FAILURES above")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()

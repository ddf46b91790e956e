"""DQN on CartPole-v1 with CleanRL's ``dqn.py`` settings: CleanRL's own script beside rltrain
given the same hyperparameters as ``key=value`` overrides (``agent.loss=mse`` among them),
seed for seed.

CleanRL is not copied into this repository: pass a checkout with ``--cleanrl DIR`` (``git clone
https://github.com/vwxyzjn/cleanrl``; it needs ``pip install tyro``). Its ``cleanrl/dqn.py`` runs
unmodified but for the Gymnasium 1.x vector API, patched into a copy in a temporary folder
(:data:`PATCHES`: same-step autoreset, ``final_obs``, and ``final_info`` as a dict of arrays);
a patch that no longer applies stops the benchmark.

CleanRL's settings (its ``Args`` defaults): 500,000 env steps, Adam lr 2.5e-4, a 120-84 MLP,
buffer 10,000, batch 128, gamma 0.99, learning from env step 10,000, one gradient step every 10
env steps, the target copied every 500 env steps (50 gradient steps), epsilon 1 -> 0.05 over
250,000 env steps, the MSE loss, no double Q, no gradient clipping. rltrain takes them as
:data:`CLEANRL_SETTINGS`.

Both libraries are scored by what CleanRL reports, the returns of the training episodes
(epsilon-greedy): per seed, the mean of the last 100 episodes ("final") and the highest mean of
100 consecutive ones ("best"). For ``rltrain compare``, each run also becomes a run directory
(``--out``, default ``runs/cleanrl-dqn/<library>/seed-S``) whose ``metrics.jsonl`` has one row per
10,000 env steps holding the mean return of the training episodes that ended in those steps (as
``eval/return_mean``: these are not greedy evaluations), and whose ``config.yaml`` differs
between the two libraries only in ``library``.

    python -m benchmarks.cleanrl_dqn --cleanrl ~/cleanrl --seeds 1 2 3 4 5 [--steps 500000]
    rltrain compare runs/cleanrl-dqn/rltrain runs/cleanrl-dqn/cleanrl --threshold 475

Runs alternate between the libraries (one process each, one torch thread). Writes
``benchmarks/results/cleanrl_dqn.json``; a seed already there is not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._util import RESULTS, write_results
from benchmarks.groups import write_run

#: CleanRL's ``dqn.py`` defaults as rltrain overrides (on top of ``dqn_cartpole``).
CLEANRL_SETTINGS = [
    "agent.loss=mse", "agent.lr=2.5e-4", "agent.hidden_sizes=[120,84]", "agent.gamma=0.99",
    "agent.double_q=false", "agent.target_update_interval=50", "agent.tau=1.0",
    "agent.epsilon_start=1.0", "agent.epsilon_end=0.05", "strategy.buffer_size=10000",
    "strategy.batch_size=128", "strategy.warmup_steps=10000", "strategy.train_interval=10",
    "strategy.train_steps=1", "trainer.gradient_clip_val=null", "trainer.eval_interval=null",
    "trainer.return_threshold=null", "trainer.num_threads=1", "trainer.logger=false",
    "trainer.enable_progress_bar=false", "trainer.enable_console=false",
    "trainer.enable_metrics_file=false", "trainer.checkpoint_interval=null"]

#: (pattern, replacement) in CleanRL's ``dqn.py`` for Gymnasium 1.x, each matching once: the
#: vector env resets sub-envs in the step that ends them, keeps their last observations in
#: ``final_obs``, and gives ``final_info`` as a dict of arrays with an ``_episode`` mask.
PATCHES = [
    (r"for i in range\(args\.num_envs\)\]\n    \)",
     "for i in range(args.num_envs)],\n"
     "        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,\n    )"),
    (r'        if "final_info" in infos:\n.*?"charts/episodic_length".*?\n',
     '        if "final_info" in infos and "episode" in infos["final_info"]:\n'
     '            ended = infos["final_info"]["episode"]\n'
     '            for i in np.flatnonzero(infos["final_info"]["_episode"]):\n'
     '                print(f"global_step={global_step}, episodic_return={ended[\'r\'][i]}")\n'
     '                writer.add_scalar("charts/episodic_return", ended["r"][i], global_step)\n'
     '                writer.add_scalar("charts/episodic_length", ended["l"][i], global_step)\n'),
    (r'infos\["final_observation"\]\[idx\]', 'infos["final_obs"][idx]'),
]
EPISODE = re.compile(r"global_step=(\d+), episodic_return=([-\d.e+]+)")
WINDOW, ROW_STEPS = 100, 10_000


def patched_script(cleanrl: Path, folder: Path) -> Path:
    """CleanRL's ``dqn.py`` with :data:`PATCHES` applied, written into ``folder``."""
    text = (cleanrl / "cleanrl" / "dqn.py").read_text()
    for pattern, replacement in PATCHES:
        text, count = re.subn(pattern, replacement.replace("\\", "\\\\"), text,
                              flags=re.DOTALL)
        if count != 1:
            raise SystemExit(f"{cleanrl}/cleanrl/dqn.py has changed: a Gymnasium 1.x patch no "
                             f"longer applies ({pattern[:60]!r}).")
    script = folder / "dqn.py"
    script.write_text(text)
    return script


def run_cleanrl(cleanrl: Path, seed: int, steps: int) -> list[tuple[int, float]]:
    """CleanRL's script on ``seed``: its training episodes as (env step, return)."""
    with tempfile.TemporaryDirectory() as folder:
        script = patched_script(cleanrl, Path(folder))
        env = {**os.environ, "PYTHONPATH": str(cleanrl), "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, str(script), "--seed", str(seed), "--total-timesteps", str(steps),
             "--no-cuda"], cwd=folder, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"CleanRL's dqn.py failed (seed {seed}): {done.stderr[-2000:]}")
    return [(int(m.group(1)), float(m.group(2))) for m in EPISODE.finditer(done.stdout)]


RLTRAIN_CHILD = """
import json, sys
from rltrain.config.schema import compose
from rltrain.observe import Subscriber
from rltrain.trainer import build

class Episodes(Subscriber):
    def __init__(self):
        self.episodes = []
    def on_episode_end(self, event, metrics):
        self.episodes.append((event.env_steps, event.episode_return))

seed, steps, run_dir, overrides = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
episodes = Episodes()
config = compose(["dqn_cartpole"], [*overrides, f"strategy.seed={seed}",
                                    f"trainer.num_steps={steps}",
                                    f"agent.exploration_steps={steps // 2}",
                                    f"trainer.run_dir={run_dir}", "trainer.overwrite=true"])
build(config, callbacks=[episodes]).fit()
print(json.dumps(episodes.episodes))
"""


def run_rltrain(seed: int, steps: int) -> list[tuple[int, float]]:
    """rltrain with :data:`CLEANRL_SETTINGS` on ``seed``: its training episodes."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-c", RLTRAIN_CHILD, str(seed), str(steps), f"{folder}/run",
             *CLEANRL_SETTINGS], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"rltrain failed (seed {seed}): {done.stderr[-2000:]}")
    return [(int(s), float(r)) for s, r in json.loads(done.stdout.splitlines()[-1])]


def summary(episodes: list[tuple[int, float]]) -> dict[str, float]:
    """The last 100 training episodes' mean ("final") and the best mean of 100 consecutive
    ones ("best")."""
    returns = np.array([r for _, r in episodes])
    means = np.convolve(returns, np.ones(WINDOW) / WINDOW, mode="valid")
    return {"final": float(returns[-WINDOW:].mean()), "best": float(means.max()),
            "episodes": len(returns)}


def windows(episodes: list[tuple[int, float]], steps: int) -> list[tuple[int, float]]:
    """(end, mean return of the training episodes that ended in the :data:`ROW_STEPS` env
    steps up to end) for each window with an episode: the curve the results file keeps."""
    out = []
    for end in range(ROW_STEPS, steps + 1, ROW_STEPS):
        ended = [r for s, r in episodes if end - ROW_STEPS < s <= end]
        if ended:
            out.append((end, float(np.mean(ended))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", type=Path, required=True, help="a CleanRL checkout")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=Path("runs/cleanrl-dqn"))
    args = parser.parse_args()
    path = RESULTS / "cleanrl_dqn.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    runs = results.setdefault("runs", {})
    for run in runs.values():  # files written with every episode keep their curve only
        if "episodes_list" in run:
            run["curve"] = windows([tuple(e) for e in run.pop("episodes_list")], run["steps"])
    for index, seed in enumerate(args.seeds):
        order = ("rltrain", "cleanrl") if index % 2 == 0 else ("cleanrl", "rltrain")
        for library in order:
            key = f"{library}/seed-{seed}"
            if key not in runs or runs[key]["steps"] != args.steps:
                start = time.perf_counter()
                episodes = (run_rltrain(seed, args.steps) if library == "rltrain"
                            else run_cleanrl(args.cleanrl, seed, args.steps))
                runs[key] = {"steps": args.steps, "seconds": time.perf_counter() - start,
                             **summary(episodes), "curve": windows(episodes, args.steps)}
                write_results("cleanrl_dqn", {"settings": CLEANRL_SETTINGS, "runs": runs})
            print(f"{key}: final {runs[key]['final']:.1f}, best {runs[key]['best']:.1f} "
                  f"({runs[key]['episodes']} episodes, {runs[key]['seconds']:.0f} s)",
                  flush=True)
            write_run(args.out / library / f"seed-{seed}", library, "CartPole-v1", "dqn", seed,
                      args.steps,
                      [tuple(point) for point in runs[key]["curve"]])
    write_results("cleanrl_dqn", {"settings": CLEANRL_SETTINGS, "runs": runs})


if __name__ == "__main__":
    main()

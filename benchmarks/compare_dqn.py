"""DQN on CartPole-v1 with the same hyperparameters in rltrain, Stable-Baselines3 and a minimal
hand-written loop, side by side.

Hyperparameters (RL-Zoo's tuned CartPole-v1 DQN, in all three): 256x256 MLP, Adam lr 2.3e-3,
batch 64, buffer 100,000, 1,000 random warm-up steps, gamma 0.99, train every 256 env steps for
128 gradient steps, the target network copied once per round (SB3's ``target_update_interval:
10`` counts env steps), gradient norm clip 10, Huber loss, Nature-DQN target (SB3 has no double
Q), epsilon 1 -> 0.04 over the first 8,000 env steps; one sub-environment; one torch thread.

Each run is its own subprocess (so that its peak memory is its own); runs alternate between the
libraries, in an order rotated per seed, so that the machine's drift hits all three alike.

- ``learn``: up to ``--steps`` env steps with a greedy evaluation of 20 episodes every 2,500 env
  steps; a run stops at the first mean return >= 475. Reports the wall time and env steps to
  that point, the last evaluation's return and the process's peak resident memory.
- ``speed``: ``--speed-steps`` env steps with no evaluation: env steps and gradient steps per
  second of wall time, measured inside the process from the agent's construction (rltrain:
  ``build`` and ``fit``; SB3: the model's constructor and ``learn``; the hand-written loop: its
  networks and optimizer) to the end of training. Each pays torch's first ``Optimizer``
  (about 1.7 s here: it imports ``torch._dynamo``) inside its time.

- the ceiling: each speed repeat also times ``benchmarks.gradient_step``'s parts (one more
  subprocess, in the rotation), and the last table gives each library's env steps per second
  as a share of the two ceilings of the same repeat (this machine's speed drifts by tens of
  percent over minutes, so a ceiling from another hour would not compare).

Ratios are paired (same seed or repeat). Needs the ``bench`` extra (stable-baselines3).

    python -m benchmarks.compare_dqn [--seeds 0 1 2] [--repeats 3] [--speed-steps 20000]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks import gradient_step
from benchmarks._util import QUIET, median_range, require_sb3, table, write_results

THRESHOLD = 475.0
EVAL_INTERVAL = 2_500
EVAL_EPISODES = 20
LIBRARIES = ("rltrain", "sb3", "handwritten")


def run_rltrain(seed: int, steps: int, learn: bool) -> dict[str, Any]:
    from rltrain.config.schema import compose
    from rltrain.observe import Subscriber
    from rltrain.trainer import build

    class Started(Subscriber):
        """When the run's clock (``threshold_seconds``) started."""

        at = 0.0

        def on_start(self, event: Any, metrics: Any) -> None:
            Started.at = time.perf_counter()

    evaluation = ([f"trainer.eval_interval={EVAL_INTERVAL}",
                   f"trainer.eval_episodes={EVAL_EPISODES}",
                   f"trainer.return_threshold={THRESHOLD}"] if learn
                  else ["trainer.eval_interval=null", "trainer.return_threshold=null"])
    with tempfile.TemporaryDirectory() as run_dir:
        config = compose(["dqn_cartpole"], [
            f"strategy.seed={seed}", f"trainer.num_steps={steps}", "agent.double_q=false",
            f"trainer.run_dir={run_dir}", *QUIET, *evaluation])
        start = time.perf_counter()
        summary = build(config, callbacks=[Started()]).fit().summary
        seconds = time.perf_counter() - start
    solved = summary.threshold_seconds
    return {"seconds": seconds, "env_steps": summary.env_steps,
            "gradient_steps": summary.gradient_steps,
            "solved_env_steps": summary.threshold_env_steps,
            # from the same start as the whole run's seconds (the setup counts)
            "solved_seconds": None if solved is None else solved + Started.at - start,
            "final_return": summary.final_metrics.get("eval/return_mean")}


def run_sb3(seed: int, steps: int, learn: bool) -> dict[str, Any]:
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    start = time.perf_counter()  # the model's construction counts, as rltrain's fit sets up
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.3e-3, batch_size=64,
                buffer_size=100_000, learning_starts=1_000, gamma=0.99,
                target_update_interval=10, train_freq=256, gradient_steps=128,
                exploration_fraction=8_000 / steps, exploration_final_eps=0.04,
                max_grad_norm=10, policy_kwargs={"net_arch": [256, 256]}, seed=seed,
                device="cpu", verbose=0)
    solved: dict[str, Any] = {}
    callback = None
    if learn:
        class Solved(StopTrainingOnRewardThreshold):
            def _on_step(self) -> bool:
                keep_going = super()._on_step()
                if not keep_going and not solved:
                    solved.update(env_steps=self.num_timesteps,
                                  seconds=time.perf_counter() - start)
                return keep_going

        callback = EvalCallback(gym.make("CartPole-v1"), n_eval_episodes=EVAL_EPISODES,
                                eval_freq=EVAL_INTERVAL, deterministic=True, verbose=0,
                                callback_on_new_best=Solved(reward_threshold=THRESHOLD))
    model.learn(total_timesteps=steps, callback=callback)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "env_steps": model.num_timesteps,
            "gradient_steps": model._n_updates,
            "solved_env_steps": solved.get("env_steps"), "solved_seconds": solved.get("seconds"),
            "final_return": None if callback is None else float(callback.last_mean_reward)}


def run_handwritten(seed: int, steps: int, learn: bool) -> dict[str, Any]:
    from benchmarks import handwritten_dqn

    result = handwritten_dqn.train(
        num_steps=steps, seed=seed, double_q=False, fused_adam=False,
        eval_interval=EVAL_INTERVAL if learn else None, eval_episodes=EVAL_EPISODES,
        return_threshold=THRESHOLD if learn else None)
    evaluations = result["evaluations"]
    hit = next((e for e in evaluations if e[2] >= THRESHOLD), None)
    return {"seconds": result["seconds"], "env_steps": result["env_steps"],
            "gradient_steps": result["gradient_steps"],
            "solved_env_steps": None if hit is None else hit[0],
            "solved_seconds": None if hit is None else hit[1],
            "final_return": evaluations[-1][2] if evaluations else None}


RUNNERS: dict[str, Callable[[int, int, bool], dict[str, Any]]] = {
    "rltrain": run_rltrain, "sb3": run_sb3, "handwritten": run_handwritten}


def run_ceiling() -> dict[str, Any]:
    """``benchmarks.gradient_step``'s two ceilings (env steps/s), timed now: measured in the
    same minutes as the libraries' runs, since this machine's speed drifts by tens of percent
    over minutes."""
    micros = gradient_step.time_parts(calls=300, repeats=1)
    loose, strict = (gradient_step.ceiling(micros, step) for step in gradient_step.CEILING_STEPS)
    return {"ceiling": loose, "strict_ceiling": strict}


def worker(library: str, seed: int, steps: int, learn: bool) -> None:
    """Run one measurement in this process and print it as one JSON line."""
    torch.set_num_threads(1)
    result = run_ceiling() if library == "ceiling" else RUNNERS[library](seed, steps, learn)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def measure(library: str, seed: int, steps: int, learn: bool) -> dict[str, Any]:
    """One worker subprocess; its JSON result."""
    command = [sys.executable, "-m", "benchmarks.compare_dqn", "--worker", library,
               "--seed", str(seed), "--worker-steps", str(steps)] + (["--learn"] if learn else [])
    process = subprocess.run(command, capture_output=True, text=True, check=False)
    if process.returncode != 0:
        raise RuntimeError(f"{library} seed {seed} failed:\n{process.stderr}")
    result: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    return result


def rotated(seed: int, libraries: list[str]) -> list[str]:
    shift = seed % len(libraries)
    return libraries[shift:] + libraries[:shift]


def ratios(runs: dict[str, list[dict[str, Any]]], key: str, name: str,
           base: str) -> list[float]:
    """Paired ``name / base`` of ``key`` over the runs where both have it."""
    return [a[key] / b[key] for a, b in zip(runs[name], runs[base], strict=True)
            if a[key] is not None and b[key] is not None]


def report(libraries: list[str], speed: dict[str, list[dict[str, Any]]],
           learn: dict[str, list[dict[str, Any]]]) -> None:
    def sps(run: dict[str, Any]) -> dict[str, Any]:
        return {"env_sps": run["env_steps"] / run["seconds"],
                "gradient_sps": run["gradient_steps"] / run["seconds"]}

    speed_sps = {lib: [sps(r) for r in runs] for lib, runs in speed.items()}
    rows = []
    for lib in libraries:
        env_sps = [r["env_sps"] for r in speed_sps[lib]]
        grad_sps = [r["gradient_sps"] for r in speed_sps[lib]]
        solved = [r for r in learn[lib] if r["solved_seconds"] is not None]
        finals = [r["final_return"] for r in learn[lib] if r["final_return"] is not None]
        speed_ratios = ratios(speed_sps, "env_sps", lib, "sb3")
        rows.append([
            lib, median_range(env_sps) if env_sps else "-",
            median_range(grad_sps) if grad_sps else "-",
            median_range(speed_ratios, "{:.2f}") if speed_ratios else "-",
            f"{len(solved)}/{len(learn[lib])}",
            median_range([r["solved_seconds"] for r in solved], "{:.1f}") if solved else "-",
            median_range([float(r["solved_env_steps"]) for r in solved]) if solved else "-",
            median_range(ratios(learn, "solved_seconds", lib, "sb3"), "{:.2f}")
            if ratios(learn, "solved_seconds", lib, "sb3") else "-",
            median_range(finals, "{:.1f}") if finals else "-",
            median_range([r["peak_rss_mb"] for r in learn[lib] + speed[lib]])])
    print(table(["library", "env steps/s", "gradient steps/s", "env steps/s vs SB3 (paired)",
                 "seeds solved", "seconds to solve", "env steps to solve",
                 "time to solve vs SB3 (paired)", "final eval return", "peak RSS (MB)"], rows))


def report_ceiling(libraries: list[str], speed: dict[str, list[dict[str, Any]]],
                   ceilings: list[dict[str, Any]]) -> None:
    """Each library's env steps/s as a share of the ceilings measured in the same repeat."""
    rows = []
    for lib in libraries:
        rates = [r["env_steps"] / r["seconds"] for r in speed[lib]]
        rows.append([lib, *(median_range([100 * rate / c[key] for rate, c in
                                          zip(rates, ceilings, strict=True)], "{:.0f}%")
                            for key in ("ceiling", "strict_ceiling"))])
    print(f"ceiling per repeat: {median_range([c['ceiling'] for c in ceilings])} env steps/s "
          f"(the kernel alone: {median_range([c['strict_ceiling'] for c in ceilings])})")
    print(table(["library", "of the ceiling (paired)", "of the strict ceiling (paired)"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--speed-steps", type=int, default=20_000)
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--results", default="compare_dqn",
                        help="name of the results file in benchmarks/results/")
    parser.add_argument("--worker", choices=[*LIBRARIES, "ceiling"], help=argparse.SUPPRESS)
    parser.add_argument("--worker-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--learn", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if "sb3" in ([args.worker] if args.worker else args.libraries):
        require_sb3("benchmarks.compare_dqn", "leave it out: --libraries rltrain handwritten")
    if args.worker is not None:
        worker(args.worker, args.seed, args.worker_steps, args.learn)
        return
    libraries = list(args.libraries)
    speed: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libraries}
    learn: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libraries}
    ceilings: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for lib in rotated(repeat, [*libraries, "ceiling"]):
            if lib == "ceiling":
                ceilings.append(measure("ceiling", repeat, 0, learn=False))
                print(f"ceiling repeat {repeat}: {ceilings[-1]['ceiling']:.0f} env steps/s",
                      flush=True)
                continue
            speed[lib].append(measure(lib, repeat, args.speed_steps, learn=False))
            run = speed[lib][-1]
            print(f"speed {lib} repeat {repeat}: {run['env_steps'] / run['seconds']:.0f} env "
                  f"steps/s, {run['peak_rss_mb']:.0f} MB", flush=True)
    for seed in args.seeds:
        for lib in rotated(seed, libraries):
            learn[lib].append(measure(lib, seed, args.steps, learn=True))
            print(f"learn {lib} seed {seed}: {learn[lib][-1]}", flush=True)
    if "sb3" in libraries:
        report(libraries, speed, learn)
    if ceilings:
        report_ceiling(libraries, speed, ceilings)
    summary = {lib: {"median_env_sps": statistics.median(
        r["env_steps"] / r["seconds"] for r in speed[lib])} for lib in libraries if speed[lib]}
    path = write_results(args.results, {"args": vars(args), "speed": speed, "learn": learn,
                                         "ceilings": ceilings, "summary": summary})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

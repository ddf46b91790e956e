"""How fast is one Dreamer gradient step? configs/dreamer_pendulum.yaml on Pendulum-v1, one thread.

Builds the shipped config's agent (``compose(["dreamer_pendulum"], overrides)``), fills its
sequence replay with ``--fill`` random env steps, then times ``--steps`` gradient steps (the
agent's ``training_step`` through the framework's ``Optimization``, with the config's gradient
clip) ``--repeats`` times after ``--warmup`` steps, and prints the median and min-max of the
gradient steps per second. One torch thread unless ``trainer.num_threads`` says otherwise.

    python -m benchmarks.dreamer_step [--steps 20] [--repeats 5] [--profile] [key=value ...]

``--profile`` prints where a step's time goes: torch.profiler's ops (self CPU time) and
record_function ranges over the phases of ``training_step``, and a cProfile of the same steps.

The allocator is set as ``fit`` sets it (``Trainer(keep_freed_memory=True)``,
:mod:`rltrain.runtime.heap`) unless ``--glibc-defaults``; the line printed says which, and
counts the page faults of the timed steps.

``--save-losses FILE`` writes the losses of the first ``--loss-steps`` gradient steps from a
fixed seed (a JSON list of dicts); ``--compare-losses FILE`` checks this code's losses against
such a file (largest relative difference per metric), to show that a faster step computes the
same thing.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import inspect
import io
import json
import math
import pstats
import resource
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks._util import median_range, write_results
from rltrain.agents.dreamer import Dreamer
from rltrain.buffers import SequenceReplayBuffer
from rltrain.config.instantiate import make_agent
from rltrain.config.schema import compose
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.optim import Optimization, OptimizationSettings
from rltrain.runtime.heap import keep_freed_memory
from rltrain.types import Progress


def setup(overrides: list[str], fill: int, seed: int) -> tuple[Dreamer, Optimization,
                                                                 SequenceReplayBuffer, int]:
    """The shipped agent, its optimizers (with the config's clip) and a replay holding
    ``fill`` random env steps of Pendulum-v1; returns them and the batch size."""
    config = compose(["dreamer_pendulum"], overrides)
    torch.set_num_threads(int(config.trainer.num_threads or 1))
    torch.manual_seed(seed)
    agent = make_agent(config.agent)
    assert isinstance(agent, Dreamer)
    envs = make_vector_env(config.env.id, num_envs=1, seed=seed)
    progress = Progress()
    try:
        agent.setup(observation_space=envs.single_observation_space,
                    action_space=envs.single_action_space, device=torch.device("cpu"),
                    progress=progress)
        buffer = agent.make_buffer(fill + fill // 100 + 10, num_envs=1,
                                   observation_space=envs.single_observation_space,
                                   action_space=envs.single_action_space, seed=seed,
                                   device=torch.device("cpu"))
        assert isinstance(buffer, SequenceReplayBuffer)
        runner = Runner(envs, device=torch.device("cpu"), progress=progress)
        runner.reset(seed=seed)
        for _ in range(fill):
            buffer.add(runner.step(runner.random_actions())[0])
    finally:
        envs.close()
    optim = Optimization(agent.configure_optimizers(), progress=progress,
                         settings=OptimizationSettings(
                             gradient_clip_val=config.trainer.gradient_clip_val,
                             on_nan_loss="raise"))
    return agent, optim, buffer, int(config.strategy.batch_size)


def time_steps(agent: Dreamer, optim: Optimization, buffer: SequenceReplayBuffer,
               batch_size: int, steps: int) -> float:
    """Seconds for ``steps`` gradient steps (sampling included, as in a run)."""
    start = time.perf_counter()
    for _ in range(steps):
        optim.training_step(agent, buffer.sample(batch_size))
    return time.perf_counter() - start


def losses(overrides: list[str], fill: int, steps: int) -> list[dict[str, float]]:
    """The metrics of the first ``steps`` gradient steps from seed 0."""
    agent, optim, buffer, batch_size = setup(overrides, fill, seed=0)
    torch.manual_seed(0)
    return [{name: float(value) for name, value in
             optim.training_step(agent, buffer.sample(batch_size)).items()}
            for _ in range(steps)]


def compare(saved: list[dict[str, float]], now: list[dict[str, float]]) -> float:
    """Print the largest relative difference of each metric; returns the largest of all."""
    worst = 0.0
    for name in saved[0]:
        diffs = [abs(b[name] - a[name]) / max(abs(a[name]), 1e-8) for a, b in
                 zip(saved, now, strict=True)]
        first = next((i for i, d in enumerate(diffs) if d > 1e-5), None)
        print(f"{name:30s} max rel diff {max(diffs):.2e}"
              + ("" if first is None else f" (above 1e-5 from step {first + 1})"))
        worst = max(worst, max(diffs))
    return worst


@contextlib.contextmanager
def phases() -> Iterator[None]:
    """Wrap the Dreamer phases in profiler ranges (patched in for ``--profile`` only)."""
    from rltrain.agents.dreamer import agent as agent_module
    from rltrain.agents.dreamer import world_model as wm_module

    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        if not hasattr(owner, name):
            return
        stored = inspect.getattr_static(owner, name)
        original = getattr(owner, name)

        def ranged(*args: Any, **kwargs: Any) -> Any:
            with record_function(label):
                return original(*args, **kwargs)
        patched.append((owner, name, stored))
        setattr(owner, name, staticmethod(ranged) if isinstance(stored, staticmethod)
                else ranged)

    wrap(wm_module.WorldModel, "embed", "wm: encoder")
    wrap(wm_module.RSSM, "observe", "wm: RSSM observe (L steps)")
    wrap(wm_module.WorldModel, "kl", "wm: KL")
    wrap(wm_module.WorldModel, "loss", "wm: forward (all)")
    wrap(agent_module, "imagine", "imagination (H steps)")
    wrap(Optimization, "step", "backward + clip + Adam")
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def run_profile(agent: Dreamer, optim: Optimization, buffer: SequenceReplayBuffer,
                batch_size: int, steps: int) -> None:
    """torch.profiler and cProfile breakdowns of ``steps`` gradient steps."""
    with phases(), profile(activities=[ProfilerActivity.CPU]) as prof:
        time_steps(agent, optim, buffer, batch_size, steps)
    averages = prof.key_averages()
    print(f"torch.profiler, {steps} gradient steps; ranges (total CPU ms per step):")
    for event in sorted(averages, key=lambda e: -e.cpu_time_total):
        if event.key.startswith(("wm:", "imagination", "backward +")):
            print(f"  {event.key:32s} {event.cpu_time_total / 1e3 / steps:8.1f} ms"
                  f"  ({event.count // steps} calls per step)")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=30))
    profiler = cProfile.Profile()
    profiler.enable()
    time_steps(agent, optim, buffer, batch_size, steps)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(35)
    print(f"cProfile, {steps} gradient steps (cumulative):\n{out.getvalue()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="gradient steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--fill", type=int, default=4_000, help="random env steps in replay")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--save-losses", metavar="FILE")
    parser.add_argument("--compare-losses", metavar="FILE")
    parser.add_argument("--loss-steps", type=int, default=20)
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave the C allocator's settings alone (fit's keep_freed_memory "
                             "off)")
    parser.add_argument("--results", default="dreamer_step",
                        help="name of the JSON file written to benchmarks/results/")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    heap = "glibc defaults" if args.glibc_defaults else keep_freed_memory()
    if args.save_losses or args.compare_losses:
        now = losses(args.overrides, args.fill, args.loss_steps)
        if args.save_losses:
            with open(args.save_losses, "w") as f:
                json.dump(now, f, indent=1)
            print(f"losses of {len(now)} gradient steps: {args.save_losses}")
        if args.compare_losses:
            with open(args.compare_losses) as f:
                worst = compare(json.load(f), now)
            print(f"largest relative difference over {len(now)} gradient steps: {worst:.2e}")
        return
    agent, optim, buffer, batch_size = setup(args.overrides, args.fill, seed=0)
    time_steps(agent, optim, buffer, batch_size, args.warmup)
    if args.profile:
        run_profile(agent, optim, buffer, batch_size, args.steps)
        return
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rates = [args.steps / time_steps(agent, optim, buffer, batch_size, args.steps)
             for _ in range(args.repeats)]
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) // (
        args.repeats * args.steps)
    print(f"gradient steps/s: {median_range(rates, '{:.2f}')} (median, min-max of "
          f"{args.repeats} x {args.steps} steps, {torch.get_num_threads()} thread); "
          f"{1e3 / statistics.median(rates):.0f} ms per step; heap: {heap}; {faults:,} page "
          "faults per step")
    assert all(math.isfinite(r) for r in rates)
    path = write_results(args.results, {"args": vars(args), "gradient_steps_per_second": rates,
                                         "heap": heap, "page_faults_per_step": faults})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

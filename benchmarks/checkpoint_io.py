"""Save and load time and size of a full training checkpoint with a 100,000-transition buffer.

The state is built from the real parts of a DQN CartPole-v1 run with ``rltrain fit``'s default
settings, without training for 100,000 steps: DQN set up on CartPole's spaces, its
``Optimization`` (after one training round, so Adam's moments exist), a ``ReplayBuffer`` filled
with 100,000 transitions from a real CartPole vector env stepped by a ``Runner`` with uniform
random actions, ``GlobalRandomState`` and the run's ``Metrics``. Each repeat times:

* ``state``: ``training_state(...)`` (copying every part's state into tensors);
* ``save``: ``Checkpointer.save`` (serialise, hash, fsync, rename, manifest, ``last.pt`` link,
  retention), the time the run's Checkpoint event reports;
* ``load``: ``read_checkpoint`` (SHA-256 check, then ``torch.load(weights_only=True)``);
* ``restore``: every part's ``load_state_dict`` from the loaded state.

The file is read back from the page cache (it was just written), as on a resume shortly after a
crash. Target: save and load each under 1 second.

    python -m benchmarks.checkpoint_io [--transitions 100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._util import median_range, table, write_results
from rltrain import DQN
from rltrain.buffers import ReplayBuffer
from rltrain.checkpoint import Checkpointer, Stateful, read_checkpoint, training_state
from rltrain.config.instantiate import make_agent, make_strategy
from rltrain.config.schema import compose
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.observe import EventProcessor
from rltrain.optim import Optimization, OptimizationSettings
from rltrain.runtime.interrupt import Interrupter
from rltrain.runtime.seeding import GlobalRandomState, seed_everything
from rltrain.strategies.off_policy import OffPolicyStrategy
from rltrain.types import Progress

TARGET_SECONDS = 1.0


def optimization(agent: DQN, progress: Progress, clip: float | None) -> Optimization:
    """The run's ``Optimization``."""
    return Optimization(agent.configure_optimizers(), progress=progress,
                        settings=OptimizationSettings(gradient_clip_val=clip),
                        interrupter=Interrupter())


def build_parts(transitions: int, seed: int) -> tuple[DQN, dict[str, Stateful], Progress,
                                                      dict[str, Any]]:
    """The parts of a DQN CartPole-v1 run whose buffer holds ``transitions`` transitions."""
    config = compose(["dqn_cartpole"])
    strategy = make_strategy(config.strategy)
    assert isinstance(strategy, OffPolicyStrategy)
    strategy_config = strategy.config
    seed_everything(seed)
    envs = make_vector_env(str(config.env.id), num_envs=strategy_config.num_envs, seed=seed)
    progress = Progress()
    cpu = torch.device("cpu")
    agent = make_agent(config.agent)
    assert isinstance(agent, DQN)
    agent.setup(observation_space=envs.single_observation_space,
                action_space=envs.single_action_space, device=cpu, progress=progress)
    buffer = ReplayBuffer(max(transitions, strategy_config.buffer_size),
                          observation_space=envs.single_observation_space,
                          action_space=envs.single_action_space, seed=seed)
    events = EventProcessor()
    runner = Runner(envs, device=cpu, progress=progress)
    runner.reset(seed=seed)
    while progress.env_steps < transitions:
        batch, episodes = runner.step(runner.random_actions())
        buffer.add(batch)
        for episode in episodes:
            events.emit(episode)
    optim = optimization(agent, progress, config.trainer.gradient_clip_val)
    for _ in range(strategy_config.train_steps):
        optim.training_step(agent, buffer.sample(strategy_config.batch_size))
    parts: dict[str, Stateful] = {
        "runner": runner, "agent": agent, "optimization": optim, "buffer": buffer,
        "random": GlobalRandomState(), "metrics": events.metrics}
    hparams = {**strategy.hparams(), **agent.hparams()}
    return agent, parts, progress, hparams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    start = time.perf_counter()
    agent, parts, progress, hparams = build_parts(args.transitions, args.seed)
    build_seconds = time.perf_counter() - start
    buffer = parts["buffer"]
    assert isinstance(buffer, ReplayBuffer)
    print(f"built the parts in {build_seconds:.1f} s: buffer of {len(buffer):,} transitions "
          f"({buffer.nbytes / 1e6:.1f} MB of arrays), {progress.env_steps:,} env steps, "
          f"{progress.gradient_steps} gradient steps")

    times: dict[str, list[float]] = {"state": [], "save": [], "load": [], "restore": []}
    sizes: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        checkpointer = Checkpointer(Path(directory) / "checkpoints", keep_last=3)
        for repeat in range(args.repeats):
            t0 = time.perf_counter()
            state = training_state(agent, parts, progress, hparams)
            t1 = time.perf_counter()
            saved = checkpointer.save(state, env_steps=progress.env_steps + repeat)
            t2 = time.perf_counter()
            loaded = read_checkpoint(saved.path)
            t3 = time.perf_counter()
            for name, part in parts.items():
                part.load_state_dict(loaded[name])
            t4 = time.perf_counter()
            times["state"].append(t1 - t0)
            times["save"].append(t2 - t1)
            times["load"].append(t3 - t2)
            times["restore"].append(t4 - t3)
            sizes.append(saved.size_bytes / 1e6)
            assert int(loaded["progress"]["env_steps"]) == progress.env_steps
            del state, loaded

    rows = [[name, median_range(values, "{:.3f}")] for name, values in times.items()]
    rows.append(["size (MB)", median_range(sizes, "{:.2f}")])
    print(f"\n{args.transitions:,}-transition CartPole-v1 checkpoint, {args.repeats} repeats, "
          "median (min-max) seconds:\n")
    print(table(["step", "median (min-max)"], rows))
    slowest = {name: max(times[name]) for name in ("save", "load")}
    verdict = all(seconds < TARGET_SECONDS for seconds in slowest.values())
    print(f"\ntarget: save and load each under {TARGET_SECONDS:.0f} s: "
          f"{'met' if verdict else 'NOT met'} (slowest save {slowest['save']:.3f} s, slowest "
          f"load {slowest['load']:.3f} s)")
    path = write_results("checkpoint_io", {
        "args": vars(args), "build_seconds": build_seconds,
        "buffer_transitions": len(buffer), "buffer_array_bytes": buffer.nbytes,
        "seconds": times, "size_mb": sizes, "target_seconds": TARGET_SECONDS,
        "target_met": verdict})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""Where rltrain's framework cost per env step goes, measured inside the loop.

Each part's cost alone in a ``timeit`` loop is a fraction of what it costs in the training
loop, where each call follows an env step and a forward pass (caches cold): so each part is
measured by taking it out of the real loop and timing the loop again. Rows, each
``benchmarks.limits``' ``rltrain x1`` loop (CartPole-v1, one sub-env, training off, DQN acting
greedily with a 256x256 MLP) with one change, ``--repeats`` times alternated, median (min-max)
µs per env step:

- ``acting``: the ceiling (``benchmarks.limits``' acting row: a raw vector env and a bare
  ``nn.Sequential`` forward).
- ``rltrain``: the loop as it is.
- ``act: the MLP alone``: ``Runner.act`` replaced by the MLP's forward on the observations
  (no policy, Q-network wrapper or encoder): what the acting layers cost.
- ``act: the Q-network``: ``Runner.act`` calling the Q-network itself (no ``DQNPolicy.act``,
  no ``Runner.act`` bookkeeping).
- ``step: the vector env alone``: ``Runner.step`` replaced by the vector env's step and the
  counters (no env-call watch, NaN checks, episode returns or episode ends): what the runner
  adds around the env.
- ``no replay add``: the replay store skipped.
- ``all three``: the MLP alone, the vector env alone and no replay add: what is left is the run
  loop itself (events, interval and stop checks, the owed-steps accounting).

The difference of a row from ``rltrain`` is that part's cost in the loop.

    python -m benchmarks.overhead_parts [--steps 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from benchmarks._util import median_range, table, write_results
from benchmarks.limits import mlp_policy, rltrain_loop, vector_env
from rltrain.buffers.replay import ReplayBuffer
from rltrain.envs.runner import Runner
from rltrain.types import Transitions

Patch = tuple[Any, str, Any]


def mlp_alone(runner: Runner, policy: Any, *, deterministic: bool = False) -> np.ndarray:
    """``Runner.act`` as the acting row does it, on the policy's own MLP."""
    with torch.inference_mode():
        values = policy.q_network.q(torch.from_numpy(runner.observations))
        actions: np.ndarray = values.argmax(1).numpy()
    return actions


def q_network(runner: Runner, policy: Any, *, deterministic: bool = False) -> np.ndarray:
    """``Runner.act`` through the Q-network (its encoder and MLP), without the policy."""
    with torch.inference_mode():
        actions: np.ndarray = policy.q_network(torch.from_numpy(runner.observations)).argmax(
            1).numpy()
    return actions


def env_alone(runner: Runner, actions: np.ndarray, policy: Any = None
              ) -> tuple[Transitions, list[Any]]:
    """``Runner.step`` as the vector env's step and the counters only."""
    next_obs, rewards, terminated, truncated, _ = runner.envs.step(actions)
    obs, runner.observations = runner.observations, next_obs
    runner.progress.vector_steps += 1
    runner.progress.env_steps += runner.env_steps_per_step
    return Transitions(obs, actions, rewards, next_obs, terminated, truncated), []


def no_add(buffer: ReplayBuffer, transitions: Transitions) -> None:
    """The replay store skipped."""


ACT_MLP: Patch = (Runner, "act", mlp_alone)
ACT_Q: Patch = (Runner, "act", q_network)
STEP_ENV: Patch = (Runner, "step", env_alone)
NO_ADD: Patch = (ReplayBuffer, "add", no_add)

CASES: dict[str, list[Patch]] = {
    "rltrain": [],
    "act: the MLP alone": [ACT_MLP],
    "act: the Q-network": [ACT_Q],
    "step: the vector env alone": [STEP_ENV],
    "no replay add": [NO_ADD],
    "all three": [ACT_MLP, STEP_ENV, NO_ADD],
}


@contextlib.contextmanager
def patched(patches: list[Patch]) -> Iterator[None]:
    """The methods replaced for the block, restored after it."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs: dict[str, Callable[[], float]] = {
        "acting": lambda: vector_env("CartPole-v1", args.steps, 1, mlp_policy("CartPole-v1"))}
    for name, patches in CASES.items():
        def run(patches: list[Patch] = patches) -> float:
            with patched(patches), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return rltrain_loop(args.steps, 1)
        runs[name] = run
    micros: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(args.repeats):
        for name, case in runs.items():
            micros[name].append(1e6 / case())
            print(f"repeat {repeat} {name}: {micros[name][-1]:.1f} µs per env step", flush=True)
    rows = []
    for name, values in micros.items():
        paired = [whole - value for whole, value in zip(micros["rltrain"], values, strict=True)]
        rows.append([name, median_range(values, "{:.1f}"),
                     "-" if name in ("acting", "rltrain") else median_range(paired, "{:.1f}")])
    print(table(["case", "µs per env step", "rltrain minus this row (the part's cost)"], rows))
    write_results("overhead_parts", {"steps": args.steps, "micros": micros})


if __name__ == "__main__":
    main()

"""The framework's own cost per env step, measured inside one run: the loop's time less the time
spent inside the environment and inside the network.

A difference of two runs (the loop against a bare acting loop, as ``benchmarks.limits`` takes
it) moves by more than the overhead itself on a loaded machine, since both are dominated by the
env and the forward pass. Here one run times both from inside: each sub-env's ``gym.make``
stack (the env and Gymnasium's own wrappers) through a timing wrapper, and the Q-network's
``forward`` through a timing patch, accumulated between the run's first and last tenth; what
is left of the loop's time is the framework's: the vector env, the runner, the acting policy's
own lines, the replay store, NaN checks, counters, events, interval and stop checks.

Rows, per ``--num-envs``, each run in its own process, ``--repeats`` times alternated:

- ``rltrain xN`` (CartPole-v1, DQN greedy with a 256x256 MLP, training off, no evaluation, no
  outputs, one torch thread): the off-policy loop as a user runs it; a subscriber listens to
  EnvStep (it marks the timed span), so that event is made every step.
- ``bare xN``: the loop a practitioner writes by hand with the same env stack and the same
  Q-network: a list of envs stepped in turn (reset on episode end), observations to a tensor,
  the forward pass under ``torch.inference_mode``, ``argmax``, back to NumPy, each transition
  stored into preallocated NumPy arrays. Its framework column is the floor of any Python loop.
- ``bare xN unclocked`` (not in the table): the same loop without the two clocks, whose own
  cost (a wrapper call and two ``perf_counter`` reads each) lands in every framework column:
  printed below the table, paired by repeat.

Columns: µs per env step (transitions summed over sub-envs): the whole loop, inside the env,
inside the network, and the rest (the framework's), median (min-max). ``--trees`` measures
other checkouts too (each row's process imports rltrain from that tree), alternated with this
one: before and after a change, on the same machine in one run.

    python -m benchmarks.framework_cost [--steps 40000] [--repeats 3] [--num-envs 1 8] \
        [--trees PATH ...] [--results NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

HIDDEN = [256, 256]


class Clocks:
    """Seconds spent inside the env and inside the network since the last :meth:`zero`."""

    env = 0.0
    net = 0.0

    @classmethod
    def zero(cls) -> None:
        cls.env = cls.net = 0.0


class TimedEnv(gym.Wrapper[Any, Any, Any, Any]):
    """Adds the time of each ``step`` and ``reset`` of the env it wraps to :class:`Clocks`."""

    def step(self, action: Any) -> Any:
        start = time.perf_counter()
        result = self.env.step(action)
        Clocks.env += time.perf_counter() - start
        return result

    def reset(self, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = self.env.reset(**kwargs)
        Clocks.env += time.perf_counter() - start
        return result


def time_the_network() -> None:
    """Patch ``QNetwork.forward`` to add its time to :class:`Clocks`."""
    from rltrain.agents.nn import networks

    forward = networks.QNetwork.forward

    def timed(self: Any, obs: Any) -> Any:
        start = time.perf_counter()
        out = forward(self, obs)
        Clocks.net += time.perf_counter() - start
        return out

    networks.QNetwork.forward = timed  # type: ignore[method-assign]


def span(steps: int, num_envs: int) -> tuple[int, int]:
    """The env-step counts between which a run is timed: its first and last tenth left out."""
    vector_steps = max(10, steps // num_envs)
    return (vector_steps // 10) * num_envs, (vector_steps - vector_steps // 10) * num_envs


def training_off(num_steps: int, num_envs: int, run_dir: str) -> Any:
    """``dqn_cartpole`` with training off: ``num_steps`` env steps of its DQN acting greedily
    (epsilon 0) on ``num_envs`` sub-envs, no gradient step, evaluation or output."""
    from benchmarks._util import QUIET
    from rltrain.config.schema import compose

    return compose(["dqn_cartpole"], [
        f"trainer.num_steps={num_steps}", f"trainer.run_dir={run_dir}", *QUIET,
        "trainer.eval_interval=null", "trainer.return_threshold=null",
        "trainer.num_threads=null", f"strategy.num_envs={num_envs}",
        "strategy.warmup_steps=0", "strategy.train_steps=0",
        "agent.epsilon_start=0.0", "agent.epsilon_end=0.0"])


def rltrain_loop(steps: int, num_envs: int) -> dict[str, float]:
    """One timed run of rltrain's off-policy loop (module docstring)."""
    from rltrain.envs import make
    from rltrain.observe import Subscriber
    from rltrain.trainer import build

    first, last = span(steps, num_envs)
    marks: dict[str, float] = {}

    class Clock(Subscriber):
        def on_env_step(self, event: Any, metrics: Any) -> None:
            if event.env_steps == first:
                Clocks.zero()
                marks["start"] = time.perf_counter()
            elif event.env_steps == last:
                marks.update(end=time.perf_counter(), env=Clocks.env, net=Clocks.net)

    sub_env = make._SubEnv.__init__

    def timed_sub_env(self: Any, env: Any, index: int, seed: int) -> None:
        sub_env(self, TimedEnv(env), index, seed)

    make._SubEnv.__init__ = timed_sub_env  # type: ignore[method-assign]
    time_the_network()
    with tempfile.TemporaryDirectory() as run_dir:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # train_steps=0: "the agent will not learn"
            build(training_off(last + first, num_envs, run_dir), callbacks=[Clock()]).fit()
    return per_env_step(marks, last - first)


def bare_loop(steps: int, num_envs: int, clocks: bool = True) -> dict[str, float]:
    """One timed run of the hand-written loop (module docstring); without ``clocks``, neither
    the env nor the network is timed (only the whole loop: what the clocks cost)."""
    from rltrain.agents.nn.networks import QNetwork

    if clocks:
        time_the_network()
    envs = [TimedEnv(gym.make("CartPole-v1")) if clocks else gym.make("CartPole-v1")
            for _ in range(num_envs)]
    net = QNetwork(4, 2, HIDDEN)
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    size = 100_000
    stored: dict[str, np.ndarray] = {
        "obs": np.zeros((size, 4), np.float32), "next": np.zeros((size, 4), np.float32),
        "action": np.zeros(size, np.int64), "reward": np.zeros(size, np.float32),
        "terminated": np.zeros(size, np.float32)}
    position = 0
    first, last = span(steps, num_envs)
    marks: dict[str, float] = {}
    for vector_step in range(last // num_envs + 1):
        if vector_step * num_envs == first:
            Clocks.zero()
            marks["start"] = time.perf_counter()
        with torch.inference_mode():
            actions = net(torch.from_numpy(obs)).argmax(1).numpy()
        next_obs = np.empty_like(obs)
        for i, env in enumerate(envs):
            row, reward, terminated, truncated, _ = env.step(int(actions[i]))
            stored["obs"][position], stored["next"][position] = obs[i], row
            stored["action"][position], stored["reward"][position] = actions[i], reward
            stored["terminated"][position] = terminated
            position = (position + 1) % size
            next_obs[i] = env.reset()[0] if terminated or truncated else row
        obs = next_obs
        if (vector_step + 1) * num_envs == last:
            marks.update(end=time.perf_counter(), env=Clocks.env, net=Clocks.net)
    return per_env_step(marks, last - first)


def unclocked_bare_loop(steps: int, num_envs: int) -> dict[str, float]:
    """The hand-written loop without the env's and the network's clocks."""
    return bare_loop(steps, num_envs, clocks=False)


def per_env_step(marks: dict[str, float], env_steps: int) -> dict[str, float]:
    """µs per env step: the whole loop, inside the env, inside the network, the rest."""
    total, env, net = (1e6 * value / env_steps
                       for value in (marks["end"] - marks["start"], marks["env"], marks["net"]))
    return {"total": total, "env": env, "net": net, "framework": total - env - net}


def measure(tree: Path, loop: str, steps: int, num_envs: int) -> dict[str, float]:
    """One row's run in its own process, importing rltrain from ``tree`` (this file's loops,
    so that a tree from before this benchmark existed can be measured)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    code = ("import importlib.util, json, torch; torch.set_num_threads(1); "
            f"spec = importlib.util.spec_from_file_location('framework_cost', {__file__!r}); "
            "f = importlib.util.module_from_spec(spec); spec.loader.exec_module(f); "
            f"print(json.dumps(f.{loop}({steps}, {num_envs})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    from benchmarks._util import median_range, table, write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--trees", type=Path, nargs="*", default=[],
                        help="other checkouts to measure beside this one (e.g. before a change)")
    parser.add_argument("--results", default="framework_cost")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    trees = [here, *(tree.resolve() for tree in args.trees)]
    cases = [(f"bare x{n}{kind}", here, loop, n) for n in args.num_envs
             for kind, loop in (("", "bare_loop"), (" unclocked", "unclocked_bare_loop"))]
    cases += [(f"rltrain x{n}" + (f" ({tree})" if tree != here else ""), tree, "rltrain_loop", n)
              for n in args.num_envs for tree in trees]
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in cases}
    for repeat in range(args.repeats):
        for name, tree, loop, n in cases:
            rows[name].append(measure(tree, loop, args.steps, n))
            print(f"repeat {repeat} {name}: " + ", ".join(
                f"{k} {v:.1f}" for k, v in rows[name][-1].items()), flush=True)
    columns = ["total", "env", "net", "framework"]
    print(table(["loop", *(f"{c} µs" for c in columns)],
                [[name, *(median_range([r[c] for r in runs], "{:.1f}") for c in columns)]
                 for name, runs in rows.items() if not name.endswith("unclocked")]))
    for n in args.num_envs:  # paired by repeat: the same loop with and without its clocks
        cost = [a["total"] - b["total"] for a, b in zip(rows[f"bare x{n}"],
                                                        rows[f"bare x{n} unclocked"], strict=True)]
        print(f"x{n}: the clocks' own cost, in the framework column, {median_range(cost, '{:.1f}')}"
              " µs per env step (the bare loop with them less without)")
    path = write_results(args.results, {"steps": args.steps, "micros": rows,
                                        "trees": [str(t) for t in trees]})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

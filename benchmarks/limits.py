"""The ceilings no training loop can pass: raw environment steps per second, and the acting loop.

Rows, each timed over ``--steps`` env steps (transitions summed over sub-envs), ``--repeats``
times, median (min-max):

- ``env``: ``env.step`` with pre-drawn random actions, one environment (``reset`` on episode end).
- ``vector env xN``: Gymnasium's ``SyncVectorEnv`` (same-step autoreset, as rltrain uses) of N
  sub-envs with pre-drawn random actions.
- ``acting xN``: the same vector env driven by a 256x256 MLP: observations to a tensor, a batch-N
  forward pass under ``torch.inference_mode``, ``argmax`` (CartPole) or ``tanh`` (Pendulum),
  back to numpy. This is what any DQN or SAC loop pays before it learns anything.
- ``rltrain xN`` (CartPole): rltrain's off-policy loop with training off (no gradient steps,
  no evaluation, no outputs), its DQN acting greedily with the same 256x256 MLP: the acting
  row plus what the framework adds per env step (the replay store, NaN checks, counters,
  events, stop checks), timed between the run's first and last tenth so that its setup and
  final checkpoint are left out (a subscriber's own cost, one call per vector step, is
  included). The overhead column is this row's µs per env step minus the acting row's, paired
  by repeat (each repeat runs every case once, in order).
- ``sb3 xN`` (with ``--sb3``): the same for Stable-Baselines3's DQN, training off
  (``gradient_steps=0``, epsilon 0), timed by a callback.

    python -m benchmarks.limits [--steps 20000] [--repeats 3] [--num-envs 1 8] [--envs ...] [--sb3]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from benchmarks._util import median_range, require_sb3, table, write_results

ENVS = ("CartPole-v1", "Pendulum-v1")


def single_env(env_id: str, steps: int) -> float:
    """Env steps per second of one environment stepped with random actions."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    seconds = time.perf_counter() - start
    env.close()
    return steps / seconds


def vector_env(env_id: str, steps: int, num_envs: int,
               policy: Callable[[np.ndarray], np.ndarray] | None = None) -> float:
    """Env steps per second of a sync vector env, with random actions or ``policy(obs)``."""
    envs = gym.make_vec(env_id, num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    envs.action_space.seed(0)
    vector_steps = max(1, steps // num_envs)
    actions = [envs.action_space.sample() for _ in range(vector_steps)] if policy is None else []
    obs, _ = envs.reset(seed=0)
    start = time.perf_counter()
    for i in range(vector_steps):
        obs, _, _, _, _ = envs.step(actions[i] if policy is None else policy(obs))
    seconds = time.perf_counter() - start
    envs.close()
    return vector_steps * num_envs / seconds


def mlp_policy(env_id: str) -> Callable[[np.ndarray], np.ndarray]:
    """A 256x256 MLP acting on a batch of observations: argmax (discrete) or tanh (box)."""
    probe = gym.make(env_id)
    obs_dim = int(np.prod(probe.observation_space.shape or (1,)))
    space = probe.action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    out = (int(space.n) if isinstance(space, gym.spaces.Discrete)
           else int(np.prod(space.shape or (1,))))
    probe.close()
    net = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, out))

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            output = net(torch.from_numpy(np.asarray(obs, dtype=np.float32)))
            actions = output.argmax(1) if discrete else torch.tanh(output) * 2.0
        result: np.ndarray = actions.numpy()
        return result

    return act


def rltrain_loop(steps: int, num_envs: int) -> float:
    """Env steps per second of rltrain's off-policy loop with training off, its DQN acting
    greedily (epsilon 0) with a 256x256 MLP: the steady rate between the run's first and last
    tenth (timed by a subscriber), so that setup and the final save are left out."""
    from benchmarks.framework_cost import span, training_off
    from rltrain.observe import Subscriber
    from rltrain.trainer import build

    class Clock(Subscriber):
        def __init__(self) -> None:
            self.marks: list[tuple[int, float]] = []

        def on_env_step(self, event: Any, metrics: Any) -> None:
            if event.env_steps in (first, last):
                self.marks.append((event.env_steps, time.perf_counter()))

    first, last = span(steps, num_envs)
    clock = Clock()
    with tempfile.TemporaryDirectory() as run_dir:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # train_steps=0: "the agent will not learn"
            build(training_off(first + last, num_envs, run_dir), callbacks=[clock]).fit()
    (start, began), (end, ended) = clock.marks
    return (end - start) / (ended - began)


def sb3_loop(steps: int, num_envs: int) -> float:
    """The same for Stable-Baselines3's DQN (``learning_starts=0``, ``gradient_steps=0``,
    epsilon 0, the same 256x256 MLP, a ``DummyVecEnv`` of ``num_envs``): its
    ``collect_rollouts`` loop with ``predict``, the replay add and its callbacks, timed
    between the first and last tenth by a callback."""
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from benchmarks.framework_cost import span

    first, last = span(steps, num_envs)

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.marks: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps in (first, last):
                self.marks.append((self.num_timesteps, time.perf_counter()))
            return True

    model = SB3DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=num_envs, seed=0),
                   learning_starts=0, gradient_steps=0, train_freq=1,
                   exploration_initial_eps=0.0, exploration_final_eps=0.0,
                   buffer_size=100_000, policy_kwargs={"net_arch": [256, 256]}, seed=0,
                   device="cpu", verbose=0)
    clock = Clock()
    model.learn(total_timesteps=first + last, callback=clock)
    (start, began), (end, ended) = clock.marks
    return (end - start) / (ended - began)


def overhead(name: str, results: dict[str, list[float]]) -> str:
    """For an rltrain row: its µs per env step minus the acting row's (paired by repeat,
    median (min-max)); "-" for the other rows."""
    loop = next((lib for lib in (" rltrain ", " sb3 ") if lib in name), None)
    if loop is None:
        return "-"
    acting = results[name.replace(loop, " acting ")]
    values = [1e6 / loop - 1e6 / act for loop, act in zip(results[name], acting, strict=True)]
    return median_range(values, "{:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--sb3", action="store_true",
                        help="add Stable-Baselines3's DQN loop beside rltrain's (bench extra)")
    args = parser.parse_args()
    if args.sb3:
        require_sb3("benchmarks.limits --sb3", "leave out --sb3")
    torch.set_num_threads(args.threads)
    cases: dict[str, Callable[[], float]] = {}
    for env_id in args.envs:
        cases[f"{env_id} env"] = functools.partial(single_env, env_id, args.steps)
        for n in args.num_envs:
            cases[f"{env_id} vector env x{n}"] = functools.partial(vector_env, env_id,
                                                                  args.steps, n)
            cases[f"{env_id} acting x{n}"] = functools.partial(vector_env, env_id, args.steps, n,
                                                              mlp_policy(env_id))
            if env_id == "CartPole-v1":
                cases[f"{env_id} rltrain x{n}"] = functools.partial(rltrain_loop, args.steps, n)
                if args.sb3:
                    cases[f"{env_id} sb3 x{n}"] = functools.partial(sb3_loop, args.steps, n)
    results: dict[str, list[float]] = {name: [] for name in cases}
    for repeat in range(args.repeats):
        for name, case in cases.items():
            results[name].append(case())
            print(f"repeat {repeat} {name}: {results[name][-1]:,.0f} env steps/s", flush=True)
    rows = [[name, median_range(values), f"{1e6 / np.median(values):.1f}",
             overhead(name, results)] for name, values in results.items()]
    print(table(["case", "env steps/s", "µs per env step", "framework µs per env step"], rows))
    payload: dict[str, Any] = {"args": vars(args), "env_steps_per_second": results}
    print(f"results: {write_results('limits', payload)}")


if __name__ == "__main__":
    main()

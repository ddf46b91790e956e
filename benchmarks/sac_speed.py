"""rltrain's SAC against Stable-Baselines3's SAC and a hand-written loop: env steps per second on
Pendulum-v1, side by side.

All four train SAC with the settings of ``configs/sac_pendulum.yaml`` (SB3's SAC defaults with
RL-Zoo's lr 1e-3: 256x256 ReLU actor and twin critics, batch 256, buffer 1,000,000, tau 0.005,
gamma 0.99, learned temperature from 1 with target entropy -|A|, 100 random env steps, then one
gradient step per env step), one sub-environment, one torch thread, no evaluation, for the same
env steps:

- ``rltrain, no renderers``: ``rltrain.trainer.build`` on ``sac_pendulum`` with every output
  off (TensorBoard, progress bar, console, metrics.jsonl); the final checkpoint is written;
- ``rltrain, all renderers``: the same with all four renderers on, drawing into os.devnull;
- ``Stable-Baselines3``: ``stable_baselines3.SAC`` with the same settings;
- ``hand-written loop``: ``benchmarks/handwritten_sac.py``.

Each repeat runs the four one after the other in this process, in an order rotated from repeat
to repeat; each call is timed whole (setup included), in wall-clock and in this process's CPU
seconds. The machine's speed drifts on shared virtual machines, so ratios are computed within
each repeat (runs seconds apart) and the table gives the median (min-max) of those per-repeat
ratios.

``--parts`` times instead the parts of one gradient step alone (batch 256, Pendulum's sizes, one
thread; ``--calls`` calls after a warm-up, ``--repeats`` times, median (min-max)): what any
library's SAC pays per step, rltrain's whole ``training_step`` and SB3's ``SAC.train`` for one
gradient step beside them, and from the parts the ceiling of a loop that pays only the
arithmetic, an env step and the acting forward.

    python -m benchmarks.sac_speed [--steps 3000] [--repeats 3]
    python -m benchmarks.sac_speed --parts [--calls 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import torch

from benchmarks import handwritten_sac
from benchmarks._util import QUIET, median_range, require_sb3, table, write_results
from benchmarks.dqn_speed import all_renderers, paired_ratios
from rltrain.config.schema import compose
from rltrain.trainer import build

SB3 = "Stable-Baselines3"
HANDWRITTEN = "hand-written loop"


def rltrain_run(steps: int, seed: int, renderers: bool) -> dict[str, float]:
    """One rltrain SAC run from ``sac_pendulum``; returns env steps and gradient steps."""
    with tempfile.TemporaryDirectory() as run_dir, open(os.devnull, "w") as sink:
        config = compose(["sac_pendulum"], [
            f"strategy.seed={seed}", f"trainer.num_steps={steps}", "trainer.eval_interval=null",
            f"trainer.run_dir={run_dir}", *QUIET])
        callbacks = all_renderers(run_dir, sink) if renderers else []
        summary = build(config, callbacks=callbacks).fit().summary
    return {"env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps}


def sb3_run(steps: int, seed: int) -> dict[str, float]:
    """One Stable-Baselines3 SAC run with the same settings."""
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", gym.make("Pendulum-v1"), learning_rate=1e-3, buffer_size=1_000_000,
                batch_size=256, tau=0.005, gamma=0.99, learning_starts=100, train_freq=1,
                gradient_steps=1, ent_coef="auto", policy_kwargs={"net_arch": [256, 256]},
                seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=steps)
    return {"env_steps": model.num_timesteps, "gradient_steps": model._n_updates}


def handwritten_run(steps: int, seed: int) -> dict[str, float]:
    result = handwritten_sac.train(num_steps=steps, seed=seed)
    return {"env_steps": result["env_steps"], "gradient_steps": result["gradient_steps"]}


def timed(run: Callable[[int], dict[str, float]], seed: int) -> dict[str, float]:
    """``run(seed)``'s result with its wall-clock and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = dict(run(seed))
    result["seconds"] = time.perf_counter() - wall
    result["cpu_seconds"] = time.process_time() - cpu
    return result


def parts(args: argparse.Namespace) -> None:
    """Time the parts of one SAC gradient step (see the module docstring)."""
    import torch.nn.functional as F
    from stable_baselines3 import SAC as SB3SAC
    from torch import nn

    from rltrain import SAC, SACConfig
    from rltrain.agents.nn.networks import soft_update
    from rltrain.buffers.replay import ReplayBatch
    from rltrain.optim import Optimization
    from rltrain.types import Progress

    torch.manual_seed(0)
    env = gym.make("Pendulum-v1")
    agent = SAC(SACConfig())
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    optim = Optimization(agent.configure_optimizers(), progress=agent.progress)
    b = 256
    batch = ReplayBatch(torch.randn(b, 3), torch.rand(b, 1) * 4 - 2, torch.randn(b),
                        torch.randn(b, 3), torch.zeros(b), torch.zeros(b))
    obs, next_obs = batch.observations, batch.next_observations
    assert isinstance(obs, torch.Tensor) and isinstance(next_obs, torch.Tensor)  # not a Dict
    actions, rewards = batch.actions / 2, batch.rewards
    actor, twin, twin_target = agent.actor, agent.critic, agent.critic_target
    actor_params, twin_params = list(actor.parameters()), list(twin.parameters())
    # Two separate critics, as SB3 and CleanRL (and the hand-written loop) have them.
    q1, q2 = (nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 1)) for _ in range(2))
    pair_params = list(q1.parameters()) + list(q2.parameters())

    def target() -> None:
        with torch.no_grad():
            next_a, next_log_prob = actor(next_obs)
            next_q = twin_target(next_obs, agent.normalized(next_a)).min(0).values
            _ = rewards + 0.99 * (next_q - 0.1 * next_log_prob)

    def twin_forward_backward() -> None:
        q = twin(obs, actions)
        (q - rewards).square().mean(1).sum().backward(inputs=twin_params)

    def pair_forward_backward() -> None:
        x = torch.cat([obs, actions], 1)
        loss = F.mse_loss(q1(x).squeeze(-1), rewards) + F.mse_loss(q2(x).squeeze(-1), rewards)
        loss.backward()  # type: ignore[no-untyped-call]

    def actor_through_twin() -> None:
        a, log_prob = actor(obs)
        q = twin(obs, agent.normalized(a)).min(0).values
        (0.1 * log_prob - q).mean().backward(inputs=actor_params)

    def actor_through_pair_plain_backward() -> None:  # fills the critics' gradients too
        a, log_prob = actor(obs)
        x = torch.cat([obs, a / 2], 1)
        (0.1 * log_prob - torch.min(q1(x), q2(x)).squeeze(-1)).mean().backward()

    twin_forward_backward()
    actor_through_twin()
    pair_forward_backward()
    adams = {"fused": torch.optim.Adam(twin_params, lr=1e-3, fused=True),
             "plain": torch.optim.Adam(pair_params, lr=1e-3)}
    one = torch.randn(1, 3)

    def act() -> None:
        with torch.inference_mode():
            actor(one)

    sb3 = SB3SAC("MlpPolicy", gym.make("Pendulum-v1"), learning_rate=1e-3, batch_size=256,
                 learning_starts=100, policy_kwargs={"net_arch": [256, 256]}, seed=0,
                 device="cpu", verbose=0)
    sb3.learn(total_timesteps=300)  # a filled buffer and a logger for train()
    vec = gym.make_vec("Pendulum-v1", 1, vectorization_mode="sync")
    vec.reset(seed=0)
    vec_action = vec.action_space.sample()
    weight, rows = torch.randn(256, 256), torch.randn(b, 256)
    timed_parts: dict[str, Callable[[], object]] = {
        "matrix product 256x256 @ 256x256": lambda: rows @ weight,
        "target: actor sample at s' + twin target critics (no grad)": target,
        "twin critics (TwinQ) forward + backward": twin_forward_backward,
        "two separate critics forward + backward": pair_forward_backward,
        "actor loss through TwinQ, backward to the actor only (rltrain)": actor_through_twin,
        "actor loss through two critics, plain backward (SB3, CleanRL)":
            actor_through_pair_plain_backward,
        "Adam step on the critics, fused (rltrain)": adams["fused"].step,
        "Adam step on the critics, plain (SB3)": adams["plain"].step,
        "Polyak update of the target critics": lambda: soft_update(twin_target, twin, 0.005),
        "acting forward, batch 1": act,
        "Pendulum vector env step": lambda: vec.step(vec_action),
        "rltrain: one whole training_step": lambda: optim.training_step(agent, batch),
        "SB3: SAC.train(gradient_steps=1) (with its replay sample)":
            lambda: sb3.train(gradient_steps=1, batch_size=256),
    }
    micros: dict[str, list[float]] = {name: [] for name in timed_parts}
    for _ in range(args.repeats):
        for name, part in timed_parts.items():
            for _ in range(20):
                part()
            start = time.perf_counter()
            for _ in range(args.calls):
                part()
            micros[name].append(1e6 * (time.perf_counter() - start) / args.calls)
    print(table(["part (batch 256, one thread)", "µs per call"],
                [[n, median_range(v)] for n, v in micros.items()]))

    def med(name: str) -> float:
        return sorted(micros[name])[len(micros[name]) // 2]

    arithmetic = (med("target: actor sample at s' + twin target critics (no grad)")
                  + med("twin critics (TwinQ) forward + backward")
                  + med("actor loss through TwinQ, backward to the actor only (rltrain)")
                  + med("Adam step on the critics, fused (rltrain)")
                  + med("Polyak update of the target critics"))
    per_env_step = arithmetic + med("acting forward, batch 1") + med("Pendulum vector env step")
    print(f"arithmetic of one gradient step (target, critics, actor, critic Adam, Polyak; "
          f"the actor's and alpha's Adam steps left out): {arithmetic:.0f} µs; ceiling at one "
          f"gradient step per env step: {1e6 / per_env_step:.0f} env steps/s")
    path = write_results(args.results, {"args": vars(args), "microseconds": micros,
                                         "arithmetic_microseconds": arithmetic,
                                         "ceiling_env_steps_per_second": 1e6 / per_env_step})
    print(f"results: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", action="store_true",
                        help="time the parts of one gradient step instead")
    parser.add_argument("--calls", type=int, default=200, help="calls per part (--parts)")
    parser.add_argument("--results", help="default: sac_speed (sac_speed_parts with --parts)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.parts:
        args.results = args.results or "sac_speed_parts"
        parts(args)
        return
    args.results = args.results or "sac_speed"
    require_sb3("benchmarks.sac_speed")
    load_before = os.getloadavg()
    variants: dict[str, Callable[[int], dict[str, float]]] = {
        "rltrain, no renderers": lambda seed: rltrain_run(args.steps, seed, False),
        "rltrain, all renderers": lambda seed: rltrain_run(args.steps, seed, True),
        SB3: lambda seed: sb3_run(args.steps, seed),
        HANDWRITTEN: lambda seed: handwritten_run(args.steps, seed),
    }
    names = list(variants)
    sps: dict[str, list[float]] = {name: [] for name in names}
    cpu_sps: dict[str, list[float]] = {name: [] for name in names}
    gps: dict[str, list[float]] = {name: [] for name in names}
    gradient_steps: dict[str, list[float]] = {name: [] for name in names}
    loads: list[tuple[float, float, float]] = []
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            result = timed(variants[name], repeat)
            sps[name].append(result["env_steps"] / result["seconds"])
            cpu_sps[name].append(result["env_steps"] / result["cpu_seconds"])
            gps[name].append(result["gradient_steps"] / result["seconds"])
            gradient_steps[name].append(result["gradient_steps"])
            print(f"repeat {repeat} {name}: {sps[name][-1]:.0f} env steps/s, "
                  f"{cpu_sps[name][-1]:.0f} per CPU second, "
                  f"{result['gradient_steps']:.0f} gradient steps, {result['seconds']:.1f} s",
                  flush=True)
        loads.append(os.getloadavg())
        print(f"load average after repeat {repeat}: {loads[-1]}", flush=True)
    rows = [[name, median_range(sps[name]), median_range(cpu_sps[name]),
             median_range(gps[name])] + [
                 median_range(paired_ratios(values, name, base), "{:.2f}")
                 for values, base in ((sps, SB3), (sps, HANDWRITTEN), (cpu_sps, SB3),
                                      (cpu_sps, HANDWRITTEN))]
            for name in names]
    print(f"SAC on Pendulum-v1, {args.steps:,} env steps per run, {args.repeats} repeats")
    print(table(["loop", "env steps/s (wall)", "env steps per CPU s", "gradient steps/s",
                 "wall vs SB3", "wall vs hand-written", "CPU vs SB3", "CPU vs hand-written"],
                rows))
    for label, values in (("wall", sps), ("CPU", cpu_sps)):
        ratios = paired_ratios(values, "rltrain, all renderers", "rltrain, no renderers")
        print(f"renderers all on / all off ({label} time), per repeat: "
              f"{median_range(ratios, '{:.3f}')}")
    print(f"load average before: {load_before}; after each repeat: {loads}")
    path = write_results(args.results, {
        "args": vars(args), "env_steps_per_second": sps, "env_steps_per_cpu_second": cpu_sps,
        "gradient_steps_per_second": gps, "gradient_steps": gradient_steps,
        "load_average_before": load_before, "load_average_after_each_repeat": loads})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""PPO env steps per second on CartPole-v1: rltrain, Stable-Baselines3 and a hand-written loop.

All train PPO with RL-Zoo's tuned CartPole-v1 settings (``configs/ppo_cartpole.yaml``: 8 envs,
rollouts of 32 vector steps, batch 256, 20 epochs, 64x64 tanh actor and critic, Adam 1e-3 and
clip range 0.2 annealed linearly, gamma 0.98, GAE lambda 0.8, gradient clip 0.5) for the same
env steps, with no evaluation and one torch thread. The loops:

- rltrain, no renderers: ``build(compose(["ppo_cartpole"], ...))`` with every output off but
  the final checkpoint and summary.json;
- rltrain, all renderers: the same plus tqdm and console (into os.devnull), TensorBoard and
  metrics.jsonl;
- Stable-Baselines3: ``PPO("MlpPolicy", make_vec_env("CartPole-v1", 8))`` with the same
  settings (skipped when stable-baselines3 is not importable);
- hand-written: ``benchmarks/handwritten_ppo.py``.

Each repeat runs every loop once, one after the other in this process, in an order rotated
from repeat to repeat; each call is timed whole (setup included), in wall-clock and this
process's CPU seconds (after one untimed rollout of each loop, so that imports and first calls
are not in the first repeat). The machine drifts, so ratios are computed within each repeat and
summarised as median (min-max) over the repeats. ``--steps`` should be a multiple of the
rollout (256) so that every loop learns from the same rollouts.

    python -m benchmarks.ppo_speed [--steps 25600] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from functools import partial
from typing import Any

import torch

from benchmarks import handwritten_ppo
from benchmarks._util import QUIET, median_range, table, write_results
from benchmarks.dqn_speed import all_renderers, paired_ratios, timed
from rltrain.config.schema import compose
from rltrain.trainer import build

HANDWRITTEN, SB3 = "hand-written loop", "Stable-Baselines3"


def rltrain_run(steps: int, seed: int, renderers: bool) -> dict[str, float]:
    """One rltrain PPO run from configs/ppo_cartpole.yaml with no evaluation."""
    with tempfile.TemporaryDirectory() as run_dir, open(os.devnull, "w") as sink:
        config = compose(["ppo_cartpole"], [
            f"strategy.seed={seed}", f"trainer.num_steps={steps}", f"trainer.run_dir={run_dir}",
            "trainer.eval_interval=null", "trainer.return_threshold=null", *QUIET])
        callbacks = all_renderers(run_dir, sink) if renderers else []
        summary = build(config, callbacks=callbacks).fit().summary
    return {"env_steps": summary.env_steps, "gradient_steps": summary.gradient_steps}


def sb3_run(steps: int, seed: int) -> dict[str, float]:
    """One Stable-Baselines3 PPO run with the same settings."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed), n_steps=32,
                batch_size=256, n_epochs=20, learning_rate=lambda remaining: 1e-3 * remaining,
                clip_range=lambda remaining: 0.2 * remaining, gamma=0.98, gae_lambda=0.8,
                ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, seed=seed, device="cpu",
                verbose=0)
    model.learn(total_timesteps=steps)
    # SB3's _n_updates counts epochs; each epoch is rollout / batch_size = 1 gradient step here.
    return {"env_steps": model.num_timesteps, "gradient_steps": model._n_updates * (8 * 32 // 256)}


def handwritten_run(steps: int, seed: int) -> dict[str, float]:
    result = handwritten_ppo.train(num_steps=steps, seed=seed)
    return {"env_steps": result["env_steps"], "gradient_steps": result["gradient_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=25_600)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-sb3", action="store_true", help="leave Stable-Baselines3 out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loops: dict[str, Any] = {  # name: run(steps, seed)
        HANDWRITTEN: handwritten_run,
        "rltrain, no renderers": lambda steps, seed: rltrain_run(steps, seed, False),
        "rltrain, all renderers": lambda steps, seed: rltrain_run(steps, seed, True),
    }
    try:
        import stable_baselines3
        sb3_version = stable_baselines3.__version__
    except ImportError:
        sb3_version = None
    if sb3_version is not None and not args.no_sb3:
        loops[SB3] = sb3_run
    else:
        print("stable-baselines3 is not importable (or --no-sb3): its row is left out")
    names = list(loops)
    for name in names:  # one untimed rollout each first: imports and first-call costs
        loops[name](256, 1_000)
    variants = {name: partial(loop, args.steps) for name, loop in loops.items()}
    sps: dict[str, list[float]] = {name: [] for name in names}
    cpu_sps: dict[str, list[float]] = {name: [] for name in names}
    gps: dict[str, list[float]] = {name: [] for name in names}
    raw: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            result = timed(variants[name], repeat)
            raw[name].append(result)
            sps[name].append(result["env_steps"] / result["seconds"])
            cpu_sps[name].append(result["env_steps"] / result["cpu_seconds"])
            gps[name].append(result["gradient_steps"] / result["seconds"])
            print(f"repeat {repeat} {name}: {sps[name][-1]:.0f} env steps/s, "
                  f"{cpu_sps[name][-1]:.0f} per CPU second, {result['env_steps']} env steps, "
                  f"{result['gradient_steps']} gradient steps", flush=True)
    bases = [HANDWRITTEN] + ([SB3] if SB3 in loops else [])
    rows = [[name, median_range(sps[name]), median_range(cpu_sps[name]),
             median_range(gps[name])]
            + [median_range(paired_ratios(sps, name, base), "{:.3f}") for base in bases]
            for name in names]
    print(table(["loop", "env steps/s (wall)", "env steps per CPU s", "gradient steps/s"]
                + [f"ratio to {base} (paired)" for base in bases], rows))
    print("The same ratios in CPU time (less sensitive to other processes on the machine):")
    print(table(["loop"] + [f"CPU-time ratio to {base} (paired)" for base in bases],
                [[name] + [median_range(paired_ratios(cpu_sps, name, base), "{:.3f}")
                           for base in bases] for name in names]))
    for label, values in (("wall", sps), ("CPU", cpu_sps)):
        ratios = paired_ratios(values, "rltrain, all renderers", "rltrain, no renderers")
        print(f"renderers all on / all off ({label} time), per repeat: "
              f"{median_range(ratios, '{:.3f}')}")
    path = write_results("ppo_speed", {
        "args": vars(args), "stable_baselines3": sb3_version, "runs": raw,
        "env_steps_per_second": sps, "env_steps_per_cpu_second": cpu_sps,
        "gradient_steps_per_second": gps,
        "ratios": {f"{name} / {base}": paired_ratios(sps, name, base)
                   for name in names for base in bases},
        "cpu_ratios": {f"{name} / {base}": paired_ratios(cpu_sps, name, base)
                       for name in names for base in bases}})
    print(f"results: {path}")


if __name__ == "__main__":
    main()

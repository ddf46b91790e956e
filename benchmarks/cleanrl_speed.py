"""Env steps per second of rltrain beside CleanRL's own scripts (and sb3-contrib's RecurrentPPO,
which CleanRL has no script for), on the same settings, pair by pair.

CleanRL is not copied into this repository: pass a checkout with ``--cleanrl DIR`` (``git clone
https://github.com/vwxyzjn/cleanrl``; it needs ``pip install tyro``; ``ppo_atari`` needs
envpool). Its scripts run unmodified but for the Gymnasium 1.x (and envpool 1.x) API, patched
into a copy in a temporary folder (:data:`PATCHES`; ``dqn.py`` with
``benchmarks.cleanrl_dqn.PATCHES``); a patch that no longer applies stops the benchmark.

The pairs (:data:`PAIRS`; rltrain takes the peer's defaults as ``key=value`` overrides of a
shipped preset, same seed):

- ``dqn``: CartPole-v1, ``dqn.py`` (``benchmarks.cleanrl_dqn.CLEANRL_SETTINGS``).
- ``pqn``: CartPole-v1, ``pqn.py`` (``pqn_cartpole`` is its settings).
- ``ppo``: CartPole-v1, ``ppo.py`` (4 envs x 128 steps, 4 epochs of 4 minibatches).
- ``sac``: HalfCheetah-v5, ``sac_continuous_action.py``.
- ``td3``: HalfCheetah-v5, ``td3_continuous_action.py``.
- ``ppo_atari``: Breakout-v5, ``ppo_atari_envpool.py`` beside ``ppo_atari`` with
  ``env.backend=envpool``.
- ``recurrent_ppo``: Acrobot-v1 with its velocities zeroed (``rltrain.envs.partial.
  MaskVelocity`` on both sides), sb3-contrib's ``RecurrentPPO`` beside PPO with
  ``agent.recurrent=lstm``: 8 envs x 256 steps, an LSTM of 64 shared by the policy and the value,
  10 epochs of 4 minibatches, SB3's PPO defaults for the rest.

Method: every run is its own process with one torch thread (``OMP_NUM_THREADS=1``;
``trainer.num_threads=1``, ``torch.set_num_threads(1)`` in the sb3-contrib child), timed from
outside (the subprocess's wall time). Each side runs ``N1`` and ``N2`` env steps in separate
processes; its rate is ``(N2 - N1) / (t2 - t1)``, which cancels the start-up (imports, env
creation, the random warm-up before learning starts) common to both. ``N1`` is past the warm-up
so that every timed step learns. Epsilon schedules (``dqn``, ``pqn``) end at ``N1`` on both
sides in both processes (CleanRL's ``--exploration-fraction N1/N``, rltrain's
``agent.exploration_steps=N1`` / ``agent.exploration_fraction=N1/N``), so that both processes
of a side act alike up to ``N1`` and the window is timed at the final epsilon (as most of a
full-length run). Learning-rate annealing depends on the run's length: it changes no step's
cost. Per repeat the sides alternate (rltrain N1, peer N1, rltrain N2, peer N2, the peer first in
odd repeats), pair after pair; the table gives each side's rate and the ratio rltrain / peer per
repeat as median (min-max).

What each side writes: CleanRL writes its TensorBoard events (part of the script) into a
temporary folder, no video, no tracking, no model; rltrain has no console, progress bar, logger
or metrics file (``benchmarks._util.QUIET``), no evaluation, no periodic checkpoint
(``trainer.checkpoint_interval=null``; its final checkpoint is written, in both processes).

    python -m benchmarks.cleanrl_speed --cleanrl ~/cleanrl [--pairs dqn pqn ...] \
        [--repeats 3] [--scale 1.0] [--steps dqn=12000:52000 ...] [--logs DIR]

``--scale`` multiplies each pair's timed window ``N2 - N1`` (``N1`` stays past the warm-up):
``--scale 0.05`` is a quick check that every command runs. Writes
``benchmarks/results/cleanrl_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._util import QUIET, median_range, table, write_results
from benchmarks.cleanrl_dqn import CLEANRL_SETTINGS
from benchmarks.cleanrl_patches import patched_script

ROOT = Path(__file__).resolve().parent.parent
SEED = 1  # CleanRL's default seed

def rate(n1: int, t1: float, n2: int, t2: float) -> float:
    """Env steps per second between two runs of ``n1`` < ``n2`` env steps that took ``t1`` and
    ``t2`` seconds: what the ``n2 - n1`` extra steps cost, start-up cancelled."""
    if not n2 > n1:
        raise ValueError(f"need n1 < n2; got {n1} and {n2}")
    if not t2 > t1:
        raise ValueError(f"the longer run ({n2} env steps, {t2:.2f} s) was not slower than the "
                         f"shorter ({n1}, {t1:.2f} s): the window is too short for the noise")
    return (n2 - n1) / (t2 - t1)


@dataclass(frozen=True)
class Pair:
    """One comparison: rltrain's preset and overrides beside the peer's command.

    ``start``: the default ``N1`` (past the warm-up, learning on); ``window``: the default
    ``N2 - N1``; ``unit``: step counts are multiples of it (a rollout)."""

    preset: str
    overrides: list[str]
    start: int
    window: int
    unit: int = 1
    script: str | None = None  # CleanRL's script; None: the sb3-contrib child
    peer_args: list[str] = field(default_factory=list)
    peer: str = "CleanRL"
    exploration: str | None = None  # "steps" (dqn) or "fraction" (pqn): epsilon ends at N1

    def rltrain_overrides(self, n: int, n1: int) -> list[str]:
        extra = []
        if self.exploration == "steps":
            extra = [f"agent.exploration_steps={n1}"]
        elif self.exploration == "fraction":
            extra = [f"agent.exploration_fraction={n1 / n!r}"]
        return [*self.overrides, *extra, f"strategy.seed={SEED}", f"trainer.num_steps={n}"]

    def cleanrl_args(self, n: int, n1: int) -> list[str]:
        extra = [f"--exploration-fraction={n1 / n!r}"] if self.exploration else []
        return [f"--seed={SEED}", f"--total-timesteps={n}", "--no-cuda", *self.peer_args, *extra]


#: What every rltrain run sets: one thread, no output but the final checkpoint, no evaluation.
COMMON = [*QUIET, "trainer.num_threads=1", "trainer.eval_interval=null",
          "trainer.checkpoint_interval=null", "trainer.return_threshold=null"]

#: CleanRL ``ppo.py``'s defaults (CartPole-v1) as overrides of ``ppo_cartpole``; its vf_coef
#: 0.5 weighs a halved squared error, rltrain's (SB3's) value loss is not halved: 0.25 here.
PPO_SETTINGS = [
    "strategy.num_envs=4", "strategy.vectorization=sync", "strategy.n_steps=128",
    "strategy.batch_size=128", "strategy.update_epochs=4", "agent.lr=2.5e-4",
    "agent.anneal_lr=true", "agent.adam_eps=1e-5", "agent.gamma=0.99", "agent.gae_lambda=0.95",
    "agent.clip_range=0.2", "agent.anneal_clip_range=false", "agent.clip_range_vf=0.2",
    "agent.ent_coef=0.01", "agent.vf_coef=0.25", "agent.max_grad_norm=0.5",
    "agent.normalize_advantage=true", "agent.target_kl=null", "agent.hidden_sizes=[64,64]",
    "agent.activation=tanh", "agent.shared_trunk=false", "agent.ortho_init=true"]

#: What CleanRL's ``sac_continuous_action.py`` and ``td3_continuous_action.py`` share: one env,
#: a replay of 1M, batches of 256, one gradient step per env step, 256x256 networks, lr 3e-4,
#: gamma 0.99, tau 0.005.
CONTINUOUS_SETTINGS = [
    "strategy.num_envs=1", "strategy.buffer_size=1000000", "strategy.batch_size=256",
    "strategy.train_interval=1", "strategy.train_steps=1", "agent.hidden_sizes=[256,256]",
    "agent.lr=3e-4", "agent.gamma=0.99", "agent.tau=0.005"]

#: CleanRL ``sac_continuous_action.py``'s defaults as overrides of ``sac_halfcheetah``; its
#: actor's 2 updates every 2 env steps are rltrain's one per step (policy_delay=1).
SAC_SETTINGS = [*CONTINUOUS_SETTINGS, "strategy.warmup_steps=5000", "agent.alpha=null",
                "agent.alpha_init=1.0", "agent.policy_delay=1", "agent.target_update_interval=1"]

#: CleanRL ``td3_continuous_action.py``'s defaults as overrides of ``td3_halfcheetah``.
TD3_SETTINGS = [*CONTINUOUS_SETTINGS, "strategy.warmup_steps=25000", "agent.policy_delay=2",
                "agent.exploration_noise=0.1", "agent.target_policy_noise=0.2",
                "agent.target_noise_clip=0.5"]

#: ``ppo_atari`` is CleanRL's ``ppo_atari.py``; envpool as CleanRL's envpool script.
PPO_ATARI_SETTINGS = ["env.id=ALE/Breakout-v5", "env.backend=envpool", "strategy.num_envs=8",
                      "strategy.n_steps=128", "strategy.batch_size=256",
                      "strategy.update_epochs=4"]

#: The recurrent pair's settings, sb3-contrib's side in :func:`sb3_recurrent_ppo`: SB3's PPO
#: defaults but for the asked shape. rltrain's as overrides of ``ppo_acrobot`` (its env), with
#: ``MaskVelocity`` (velocities 4 and 5 zeroed, as in ``ppo_lstm_cartpole_novel``) and the LSTM.
RECURRENT: dict[str, Any] = {"env": "Acrobot-v1", "n_envs": 8, "n_steps": 256, "batch_size": 512,
             "n_epochs": 10, "lstm": 64, "net": [64, 64], "lr": 3e-4, "gamma": 0.99,
             "gae_lambda": 0.95, "clip_range": 0.2, "ent_coef": 0.0, "vf_coef": 0.5,
             "max_grad_norm": 0.5}
RECURRENT_SETTINGS = [
    f"env.id={RECURRENT['env']}", "env.wrappers=[{_target_: rltrain.envs.partial.MaskVelocity}]",
    f"strategy.num_envs={RECURRENT['n_envs']}", "strategy.vectorization=sync",
    f"strategy.n_steps={RECURRENT['n_steps']}", f"strategy.batch_size={RECURRENT['batch_size']}",
    f"strategy.update_epochs={RECURRENT['n_epochs']}", "agent.recurrent=lstm",
    f"agent.recurrent_hidden_size={RECURRENT['lstm']}", "agent.hidden_sizes=[64,64]",
    "agent.activation=tanh", "agent.shared_trunk=false", "agent.ortho_init=true",
    f"agent.lr={RECURRENT['lr']}", "agent.anneal_lr=false", "agent.anneal_clip_range=false",
    f"agent.gamma={RECURRENT['gamma']}", f"agent.gae_lambda={RECURRENT['gae_lambda']}",
    f"agent.clip_range={RECURRENT['clip_range']}", f"agent.ent_coef={RECURRENT['ent_coef']}",
    f"agent.vf_coef={RECURRENT['vf_coef']}", f"agent.max_grad_norm={RECURRENT['max_grad_norm']}",
    "agent.clip_range_vf=null", "agent.normalize_observations=false",
    "agent.normalize_rewards=false", "agent.normalize_advantage=true"]

PAIRS: dict[str, Pair] = {
    "dqn": Pair("dqn_cartpole", CLEANRL_SETTINGS, start=12_000, window=60_000,
                script="dqn.py", exploration="steps"),
    "pqn": Pair("pqn_cartpole", ["strategy.vectorization=sync"], start=2_048, window=61_440,
                unit=512, script="pqn.py", exploration="fraction"),
    "ppo": Pair("ppo_cartpole", PPO_SETTINGS, start=2_048, window=49_152, unit=512,
                script="ppo.py"),
    "sac": Pair("sac_halfcheetah", SAC_SETTINGS, start=6_000, window=3_000,
                script="sac_continuous_action.py", peer_args=["--env-id=HalfCheetah-v5"]),
    "td3": Pair("td3_halfcheetah", TD3_SETTINGS, start=26_000, window=4_000,
                script="td3_continuous_action.py", peer_args=["--env-id=HalfCheetah-v5"]),
    "ppo_atari": Pair("ppo_atari", PPO_ATARI_SETTINGS, start=2_048, window=6_144, unit=1_024,
                      script="ppo_atari_envpool.py", peer_args=["--env-id=Breakout-v5"]),
    "recurrent_ppo": Pair("ppo_acrobot", RECURRENT_SETTINGS, start=4_096,
                          window=12_288, unit=2_048, peer="sb3-contrib"),
}
CHEAP = ["dqn", "pqn", "ppo", "recurrent_ppo"]


def steps(pair: Pair, scale: float) -> tuple[int, int]:
    """(N1, N2) of ``pair`` with its window scaled, N2 - N1 a positive multiple of its unit."""
    units = max(1, round(pair.window * scale / pair.unit))
    return pair.start, pair.start + units * pair.unit


def sb3_recurrent_ppo(n: int, seed: int) -> None:
    """The peer of ``recurrent_ppo``: sb3-contrib's RecurrentPPO for ``n`` env steps."""
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from rltrain.envs.partial import MaskVelocity

    torch.set_num_threads(1)
    r = RECURRENT
    envs = make_vec_env(r["env"], n_envs=r["n_envs"], seed=seed, wrapper_class=MaskVelocity)
    model = RecurrentPPO(
        "MlpLstmPolicy", envs, n_steps=r["n_steps"], batch_size=r["batch_size"],
        n_epochs=r["n_epochs"], learning_rate=r["lr"], gamma=r["gamma"],
        gae_lambda=r["gae_lambda"], clip_range=r["clip_range"], ent_coef=r["ent_coef"],
        vf_coef=r["vf_coef"], max_grad_norm=r["max_grad_norm"], seed=seed, device="cpu",
        verbose=0, policy_kwargs={"lstm_hidden_size": r["lstm"], "n_lstm_layers": 1,
                                  "shared_lstm": True, "enable_critic_lstm": False,
                                  "net_arch": {"pi": r["net"], "vf": r["net"]}})
    model.learn(total_timesteps=n)
    assert model.num_timesteps == n, (model.num_timesteps, n)
    if model.ep_info_buffer:  # the last 100 episodes, read by last_returns
        mean = statistics.fmean(info["r"] for info in model.ep_info_buffer)
        print(f"episodic_return={mean}", flush=True)


def commands(name: str, n: int, n1: int, cleanrl: Path, folder: Path
             ) -> dict[str, tuple[list[str], Path]]:
    """Each side's command line for ``n`` env steps, and the folder it runs in."""
    pair = PAIRS[name]
    rltrain = [sys.executable, "-m", "rltrain.cli", "fit", pair.preset,
               *pair.rltrain_overrides(n, n1), *COMMON, f"trainer.run_dir={folder / 'run'}",
               "trainer.overwrite=true"]
    if pair.script is None:
        peer = [sys.executable, "-m", "benchmarks.cleanrl_speed", "--peer", name,
                f"--peer-steps={n}"]
        peer_cwd = ROOT
    else:
        script = folder / pair.script
        peer = [sys.executable, str(script), *pair.cleanrl_args(n, n1)]
        peer_cwd = folder
    return {"rltrain": (rltrain, ROOT), "peer": (peer, peer_cwd)}


def timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Wall seconds of ``command`` as a subprocess; its output goes to ``log``."""
    with log.open("w") as out:
        out.write(shlex.join(command) + "\n")
        out.flush()
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                              check=False)
        seconds = time.perf_counter() - start
    if done.returncode:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"exit {done.returncode}: {shlex.join(command)}\n{tail}")
    return seconds


def child_env(cleanrl: Path) -> dict[str, str]:
    """The environment of every run: one OpenMP (and MKL) thread; the repository and CleanRL's
    checkout (its ``cleanrl_utils``) importable."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(cleanrl),
                                                        os.environ.get("PYTHONPATH", "")]))}


def run_pair(name: str, n1: int, n2: int, repeat: int, cleanrl: Path, logs: Path,
             warmup: bool = False) -> dict[str, Any]:
    """One repeat of ``name``: both sides at N1 and N2, alternating; their rates. ``warmup``:
    first one untimed N1 run of each side (files cached, bytecode compiled), not kept."""
    pair = PAIRS[name]
    env = child_env(cleanrl)
    sides = ("rltrain", "peer") if repeat % 2 == 0 else ("peer", "rltrain")
    seconds: dict[str, dict[int, float]] = {"rltrain": {}, "peer": {}}
    shown: dict[str, dict[int, str]] = {"rltrain": {}, "peer": {}}
    gradient_steps: dict[int, int] = {}
    returns: dict[str, float | None] = {}  # each side's last 100 training episodes at N2
    runs = [(n1, side, True) for side in sides if warmup]
    runs += [(n, side, False) for n in (n1, n2) for side in sides]
    for n, side, untimed in runs:
        with tempfile.TemporaryDirectory(prefix=f"cleanrl-speed-{name}-") as tmp:
            folder = Path(tmp)
            if side == "peer" and pair.script is not None:
                patched_script(cleanrl, pair.script, folder)
            command, cwd = commands(name, n, n1, cleanrl, folder)[side]
            tag = "warmup" if untimed else f"r{repeat}"
            took = timed(command, cwd, env, logs / f"{name}-{tag}-{side}-{n}.log")
            if side == "rltrain":  # it did the steps, and learned
                done = json.loads((folder / "run" / "summary.json").read_text())
                if done["env_steps"] < n or not done["gradient_steps"]:
                    raise RuntimeError(f"rltrain stopped at {done['env_steps']} env steps, "
                                       f"{done['gradient_steps']} gradient steps (asked {n})")
                if not untimed:
                    gradient_steps[n] = done["gradient_steps"]
                if n == n2 and not untimed:
                    returns["rltrain"] = done["final_metrics"].get("rollout/episode_return")
            elif n == n2 and not untimed:
                returns["peer"] = last_returns(logs / f"{name}-{tag}-{side}-{n}.log")
        print(f"  {name} {'warm-up (untimed)' if untimed else f'repeat {repeat}'} {side:7s} "
              f"{n:>7,} env steps: {took:.1f} s", flush=True)
        if not untimed:
            seconds[side][n], shown[side][n] = took, shlex.join(command)
    rates = {side: rate(n1, seconds[side][n1], n2, seconds[side][n2]) for side in seconds}
    return {"n1": n1, "n2": n2, "seconds": seconds, "rates": rates,
            "ratio": rates["rltrain"] / rates["peer"], "commands": shown,
            "rltrain_gradient_steps": gradient_steps, "returns": returns}


#: An episode's return as the peers print it: CleanRL's scripts (as patched), and
#: sb3-contrib's runner here (its last 100 episodes' mean).
EPISODIC_RETURN = re.compile(r"episodic_return=\[?(-?[\d.]+(?:e[-+]?\d+)?)")


def learning(runs: list[dict[str, Any]], side: str) -> str:
    """A side's return at N2 over the repeats, median (min-max), or "-" where none was read."""
    found = [r["returns"][side] for r in runs if r["returns"].get(side) is not None]
    return median_range(found, "{:.1f}") if found else "-"


def last_returns(log: Path, window: int = 100) -> float | None:
    """The mean return of the last ``window`` episodes a peer's log shows (None: none)."""
    found = [float(m.group(1)) for m in EPISODIC_RETURN.finditer(log.read_text())]
    return statistics.fmean(found[-window:]) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", type=Path, help="a CleanRL checkout")
    parser.add_argument("--pairs", nargs="+", default=CHEAP, choices=list(PAIRS),
                        help=f"default: {' '.join(CHEAP)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies each pair's window N2 - N1")
    parser.add_argument("--steps", nargs="+", default=[], metavar="PAIR=N1:N2",
                        help="a pair's step counts, e.g. dqn=12000:52000")
    parser.add_argument("--logs", type=Path, help="keep each run's output here")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="skip the untimed N1 run of each side before a pair's first repeat")
    parser.add_argument("--results", default="cleanrl_speed",
                        help="benchmarks/results/<name>.json")
    parser.add_argument("--peer", choices=[n for n, p in PAIRS.items() if p.script is None],
                        help=argparse.SUPPRESS)  # the sb3-contrib child
    parser.add_argument("--peer-steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        sb3_recurrent_ppo(args.peer_steps, SEED)
        return
    if args.cleanrl is None or not (args.cleanrl / "cleanrl").is_dir():
        parser.error("--cleanrl DIR: a CleanRL checkout (with cleanrl/dqn.py ...) is needed")
    counts = {name: steps(PAIRS[name], args.scale) for name in args.pairs}
    for item in args.steps:
        name, _, spec = item.partition("=")
        first, _, second = spec.partition(":")
        counts[name] = (int(first), int(second))
    with tempfile.TemporaryDirectory() as tmp:  # patches checked before anything runs
        for name in args.pairs:
            script = PAIRS[name].script
            if script:
                patched_script(args.cleanrl, script, Path(tmp))
    logs = args.logs or Path(tempfile.mkdtemp(prefix="cleanrl-speed-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.pairs}
    failed: dict[str, str] = {}
    for repeat in range(args.repeats):
        for name in args.pairs:
            if name in failed:
                continue
            try:
                runs[name].append(run_pair(name, *counts[name], repeat, args.cleanrl, logs,
                                            warmup=args.warmup and repeat == 0))
            except (RuntimeError, ValueError) as error:
                failed[name] = str(error)
                print(f"{name} failed: {error}", flush=True)
                continue
            last = runs[name][-1]
            print(f"{name} repeat {repeat}: rltrain {last['rates']['rltrain']:.0f}, "
                  f"{PAIRS[name].peer} {last['rates']['peer']:.0f} env steps/s, "
                  f"ratio {last['ratio']:.3f}", flush=True)
            write_results(args.results, {"args": _jsonable(vars(args)), "runs": runs,
                                         "failed": failed})
    rows = []
    for name in args.pairs:
        done = runs[name]
        if not done:
            rows.append([name, "-", "-", f"failed: {failed[name].splitlines()[0][:80]}"])
            continue
        n1, n2 = counts[name]
        rows.append([f"{name} (vs {PAIRS[name].peer}; N1={n1:,}, N2={n2:,})",
                     median_range([r["rates"]["rltrain"] for r in done]),
                     median_range([r["rates"]["peer"] for r in done]),
                     median_range([r["ratio"] for r in done], "{:.2f}")])
    learned = [[name, *(learning(runs[name], side) for side in ("rltrain", "peer"))]
               for name in args.pairs if runs[name]]
    print(f"\n{args.repeats} repeats; one torch thread a process; rate = (N2 - N1) / (t2 - t1)")
    print(table(["pair", "rltrain env steps/s", "peer env steps/s",
                 "ratio rltrain/peer median (min-max)"], rows))
    print("\nLearning at N2: mean return of the last 100 training episodes (median (min-max) "
          "over repeats; rltrain's rollout/episode_return, the peer's printed returns)")
    print(table(["pair", "rltrain", "peer"], learned))
    print("\nCommands (N2 runs; N1 runs differ only in the step counts; the CleanRL script is "
          "the patched copy in a temporary folder, run there):")
    for name in args.pairs:
        if runs[name]:
            commands_n2 = runs[name][0]["commands"]
            n2 = counts[name][1]
            print(f"- {name} rltrain: `{commands_n2['rltrain'][n2]}`")
            print(f"- {name} {PAIRS[name].peer}: `{commands_n2['peer'][n2]}`")
    summary = {name: {"rltrain": [r["rates"]["rltrain"] for r in runs[name]],
                      "peer": [r["rates"]["peer"] for r in runs[name]],
                      "ratio": [r["ratio"] for r in runs[name]],
                      "ratio_median": statistics.median([r["ratio"] for r in runs[name]])}
               for name in args.pairs if runs[name]}
    path = write_results(args.results, {"args": _jsonable(vars(args)), "counts": counts,
                                        "summary": summary, "runs": runs, "failed": failed,
                                        "logs": str(logs)})
    print(f"\nresults: {path}; logs: {logs}")


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {key: str(value) if isinstance(value, Path) else value
            for key, value in values.items()}


if __name__ == "__main__":
    main()

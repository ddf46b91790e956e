"""The workloads of the results page (``scripts/results_page.py``): what each table shows,
read from which result files, and the commands that make them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.groups import (
    GROUPS,
    atari_curves,
    atari_finals,
    cleanrl_finals,
    per_seed_files,
    played_on,
)


@dataclass(frozen=True)
class Workload:
    """One table of the page.

    Attributes:
        title: The heading.
        about: What is run, in a sentence or two.
        budget: Env steps per run.
        score: What a run's score is.
        peer: The other library's name.
        read: ``library -> {seed: score}`` from the result files.
        commands: How to run both sides.
        wanted: Seeds per library the comparison is planned with.
        curves: ``library -> {seed: [(env steps, evaluation return), ...]}``, for the table of
            mean curves and the env steps to ``threshold``. Default: none.
        threshold: A return whose first reaching is tabled per seed. Default: none.
        random: The results file of the random policy's games on rltrain's evaluation
            pipeline. Default: none.
        ours: The name rltrain's result files carry (an earlier version's runs keep their
            own). Default ``"rltrain"``.
    """

    title: str
    about: str
    budget: int
    score: str
    peer: str
    read: Callable[[str], dict[int, float]]
    commands: tuple[str, ...]
    wanted: int = 5
    curves: Callable[[str], dict[int, list[tuple[int, float]]]] | None = None
    threshold: float | None = None
    random: str | None = None
    ours: str = "rltrain"

def of_group(name: str) -> dict[str, Any]:
    """A :class:`Workload`'s curves, threshold and rltrain's name, from peer group ``name``
    (:data:`benchmarks.groups.GROUPS`)."""
    group = GROUPS[name]
    return {"curves": group.curves, "threshold": group.threshold, "ours": group.ours}


BREAKOUT = (
    "`ppo_atari` (8 envs x 128 steps, the Nature CNN; rltrain on envpool's envs) on "
    "ALE/Breakout-v5 beside Stable-Baselines3's PPO `CnnPolicy` on the same settings "
    "(`AtariWrapper`, 4 frames stacked); 10 greedy whole games every 100,000 env steps. "
    "The value loss weighs 0.5 on both sides (`agent.vf_coef=0.5`, the preset's value when "
    "the group began; the preset now has CleanRL's 0.25, which in SB3's convention, "
    "rltrain's, is half CleanRL's `vf_coef`).")
BREAKOUT_COMMANDS = (
    "python -m benchmarks.atari_ppo --library rltrain --seed S --run-dir RUN agent.vf_coef=0.5",
    "python -m benchmarks.atari_ppo --library sb3 --seed S --run-dir RUN_SB3 agent.vf_coef=0.5")

WORKLOADS = [
    Workload(
        "PPO on Atari Breakout", BREAKOUT + " Each library's evaluations restart a lost life "
        "as its training does (rltrain on envpool: after 0 to 29 random no-op frames; SB3: "
        "after one no-op step). rltrain trained on envpool's own frame stack (before "
        "2026-12-06), which carries a lost life's last frames into the next life.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"), BREAKOUT_COMMANDS,
        **of_group("breakout"),
        random="atari_ppo_breakout_random_seed0"),
    Workload(
        "PPO on Atari Breakout, rltrain on Gymnasium's envs", BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on Gymnasium's async envs, whose pipeline "
            "plays SB3's `AtariWrapper` frame for frame") + " The same SB3 runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --backend "
                                      "gymnasium"), BREAKOUT_COMMANDS[1]),
        **of_group("breakout-gymnasium")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs stacked by rltrain", BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on envpool's envs, whose frames rltrain "
            "stacks itself since 2026-12-06, refilled at each life's start as on Gymnasium's "
            "envs (envpool's own stack keeps the lost life's last frames)") + " The same SB3 "
        "runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --label "
                                      "rltrain-envpool-refill"), BREAKOUT_COMMANDS[1]),
        **of_group("breakout-envpool-refill")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs started SB3's way",
        BREAKOUT.replace(
            "rltrain on envpool's envs", "rltrain on envpool's envs, stacked by rltrain, "
            "whose games and lives rltrain starts itself as SB3's `AtariWrapper` does "
            "(`env.atari.life_noops=false`, since 2026-12-06: a lost life goes on after one "
            "no-op step, then FIRE and action 2, where envpool takes 0 to 29 random no-op "
            "frames); evaluated on the same restart") + " The same SB3 runs as above.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"),
        (BREAKOUT_COMMANDS[0].replace("--library rltrain", "--library rltrain --label "
                                      "rltrain-envpool-sb3-starts") + " env.atari.life_noops=false",
         BREAKOUT_COMMANDS[1]),
        **of_group("breakout-envpool-sb3-starts")),
    Workload(
        "PPO on Atari Breakout, rltrain on envpool's envs stacked by rltrain, played on SB3's "
        "life restart", "The final checkpoints of the group above played on rltrain's "
        "Gymnasium pipeline, which restarts a lost life after one no-op step as SB3's "
        "`AtariWrapper` does (and as SB3's evaluations above did), beside those SB3 "
        "evaluations: both libraries scored on the same restart. 10 greedy whole games each.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        played_on("repeat"),
        ("python -m benchmarks.atari_life_restart RUN --restarts repeat zeros repeat+noops "
         "--results atari_life_restart_breakout_rltrain-envpool-refill_seedS",),
        ours="rltrain-envpool-refill"),
    Workload(
        "PPO on Atari Breakout, rltrain evaluated on SB3's life restart (before 2026-12-06)",
        BREAKOUT + " rltrain's evaluations then restarted a lost life after one no-op step, "
        "SB3's way, where its training on envpool's envs restarts after random no-ops: its "
        "greedy agents met a restart they had rarely seen (the same three final checkpoints "
        "scored 8.0, 17.0 and 25.6 so, 11.3, 19.5 and 27.5 on envpool's restart). Kept as "
        "measured; the table above is the group measured again.",
        1_000_000, "mean score of 10 greedy whole games at 1M env steps", "SB3",
        atari_finals("breakout"), BREAKOUT_COMMANDS,
        **of_group("breakout-one-noop-eval")),
    Workload(
        "DQN on CartPole-v1 with CleanRL's settings", "rltrain's DQN given CleanRL's "
        "`dqn.py` hyperparameters as overrides (`agent.loss=mse`, lr 2.5e-4, a 120-84 MLP, no "
        "double Q, no gradient clip, the target copied every 500 env steps) beside CleanRL's "
        "own script (patched for the Gymnasium 1.x vector API only).", 500_000,
        "mean return of the last 100 training episodes (what CleanRL reports)", "CleanRL",
        cleanrl_finals,
        ("python -m benchmarks.cleanrl_dqn --cleanrl CLEANRL_CHECKOUT --seeds 1 2 3 4 5",)),
    Workload(
        "SAC with gSDE on MountainCarContinuous-v0", "RL-Zoo's entry "
        "(`zoo:sac/MountainCarContinuous-v0`: gSDE with `use_expln`, 64x64, 50,000 env steps) "
        "beside SB3's SAC on the same settings; 10 greedy episodes every 2,500 env steps.",
        50_000, "env steps to a mean greedy return of 90 (∞: not reached)", "SB3",
        per_seed_files("sac_mountaincar_gsde", "threshold_env_steps"),
        ("python -m benchmarks.sac_learning --config zoo:sac/MountainCarContinuous-v0 "
         "--seeds S --threshold 90 --eval-interval 2500 --results "
         "sac_mountaincar_gsde_rltrain_seedS [--sb3 --results sac_mountaincar_gsde_sb3_seedS]",),
        curves=GROUPS["sac"].curves),
    Workload(
        "TD3 on HalfCheetah-v5", "`td3_halfcheetah` beside SB3's TD3 on the same settings; 10 "
        "greedy episodes every 10,000 env steps.", 100_000,
        "mean greedy return at 100,000 env steps", "SB3",
        per_seed_files("td3_halfcheetah", "final_eval_return"),
        ("python -m benchmarks.mujoco_offpolicy --config td3_halfcheetah --seeds S "
         "--run-dir RUNS --results td3_halfcheetah_rltrain_seedS "
         "[--sb3 --results td3_halfcheetah_sb3_seedS]",),
        **of_group("td3")),
]


@dataclass(frozen=True)
class Reference:
    """A table of rltrain's curves beside published ones and the random policy, and beside
    SB3's on the same settings where its runs are in (a budget too long to run both here).

    Attributes:
        title: The heading.
        about: What is run.
        budget: Env steps per run.
        curves: ``library -> {seed: [(env steps, evaluation return), ...]}``, finished seeds.
        random: The results file of the random policy's games on rltrain's pipeline.
        published: The results file of published curves (``dopamine``: runs of returns per
            iteration; ``finals``: single scores with their budgets).
        commands: How to run each side.
        wanted: Seeds planned.
    """

    title: str
    about: str
    budget: int
    curves: Callable[[str], dict[int, list[tuple[int, float]]]]
    random: str
    published: str
    commands: tuple[str, ...]
    wanted: int


REFERENCES = [
    Reference(
        "DQN on Atari Pong", "`dqn_atari` (RL-Zoo's Atari DQN settings: replay 100,000, "
        "100,000 random steps first, one gradient step per 4 env steps, the target copied "
        "every 1,000 env steps, epsilon 1 to 0.01 over 1,000,000 env steps, the Nature CNN) on "
        "ALE/Pong-v5 without sticky actions; 10 greedy whole games every 100,000 env steps. "
        "Beside it, the random policy, published curves, and SB3's DQN on the same settings "
        "(RL-Zoo's, one env, `AtariWrapper`) where its runs are in.", 1_000_000,
        atari_curves("pong", "dqn"), "atari_dqn_pong_random_seed0", "published_dqn_pong",
        tuple(f"python -m benchmarks.atari_ppo --library {library} --preset dqn_atari --game "
              f"ALE/Pong-v5 --seed S --run-dir {run}"
              for library, run in (("rltrain", "RUN"), ("sb3", "RUN_SB3"))), 2),
]

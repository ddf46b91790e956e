"""The peer groups behind the results page, for ``rltrain compare``: each library's finished runs
read from the result files in ``benchmarks/results/``, written out as run directories that
``rltrain compare`` reads (one per library and seed), then compared by it.

    python -m benchmarks.groups [breakout td3 sac ...] [--out runs/groups]

prints, per group, ``rltrain compare``'s table (final and best returns' IQM with 95% intervals,
the probability of improvement, and, where the group names a return threshold, the env steps
to it with the runs that never reach it censored) and the command that prints it again:
``rltrain compare OUT/<group>/rltrain OUT/<group>/<peer> [--threshold R]``.

A run directory here holds a ``config.yaml`` that differs between the libraries only in
``library`` and a ``metrics.jsonl`` of the run's evaluations (``eval/return_mean``) and its end;
these are the same curves the results page reads, not the runs' own logs.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from benchmarks._util import RESULTS
from benchmarks.atari_life_restart import restart_scores

#: ``library -> {seed: [(env steps, evaluation return), ...]}``.
Curves = Callable[[str], dict[int, list[tuple[int, float]]]]


def atari_curves(game: str, algo: str = "ppo") -> Curves:
    """Each finished seed's evaluations from ``atari_<algo>_<game>_<library>_seed<S>.json``."""
    def read(library: str) -> dict[int, list[tuple[int, float]]]:
        out = {}
        for path in sorted(RESULTS.glob(f"atari_{algo}_{game}_{library}_seed*.json")):
            data = json.loads(path.read_text())
            if data["curve"] and data["curve"][-1][0] >= data["args"]["steps"]:
                out[int(data["args"]["seed"])] = [(int(x), float(y)) for x, y in data["curve"]]
        return out
    return read


def per_seed_curves(prefix: str) -> Curves:
    """Each seed's evaluations from ``<prefix>_<library>_seed<S>.json`` (the files of
    ``benchmarks.mujoco_offpolicy`` and ``benchmarks.sac_learning``)."""
    def read(library: str) -> dict[int, list[tuple[int, float]]]:
        out = {}
        for path in sorted(RESULTS.glob(f"{prefix}_{library}_seed*.json")):
            for run in json.loads(path.read_text())["runs"]:
                out[int(run["seed"])] = [(int(x), float(y)) for x, y in run["curve"]]
        return out
    return read


def atari_finals(game: str, algo: str = "ppo") -> Callable[[str], dict[int, float]]:
    """Each finished seed's last evaluation."""
    curves = atari_curves(game, algo)

    def read(library: str) -> dict[int, float]:
        return {seed: curve[-1][1] for seed, curve in curves(library).items()}
    return read


def played_on(restart: str) -> Callable[[str], dict[int, float]]:
    """rltrain's final Breakout checkpoints played on ``restart`` (the files of
    ``benchmarks.atari_life_restart``), SB3's runs as they were evaluated."""
    sb3 = atari_finals("breakout")

    def read(library: str) -> dict[int, float]:
        return sb3(library) if library == "sb3" else restart_scores(
            RESULTS, "breakout", library, restart)
    return read


def cleanrl_finals(library: str) -> dict[int, float]:
    """Each seed's final score from ``cleanrl_dqn.json`` (``benchmarks.cleanrl_dqn``)."""
    path = RESULTS / "cleanrl_dqn.json"
    data = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    return {int(key.split("seed-")[1]): float(run["final"])
            for key, run in data["runs"].items() if key.startswith(f"{library}/")}


def per_seed_files(prefix: str, field: str) -> Callable[[str], dict[int, float]]:
    """Each seed's ``field`` from ``<prefix>_<library>_seed<S>.json`` (None: never, ∞)."""
    def read(library: str) -> dict[int, float]:
        out = {}
        for path in sorted(RESULTS.glob(f"{prefix}_{library}_seed*.json")):
            for run in json.loads(path.read_text())["runs"]:
                out[int(run["seed"])] = math.inf if run[field] is None else float(run[field])
        return out
    return read


@dataclass(frozen=True)
class Group:
    """One peer comparison: its runs, env, algorithm, budget and threshold (or none); rltrain's
    runs are those its result files name ``ours`` (an earlier version's runs keep a name of
    their own)."""

    curves: Curves
    env_id: str
    algo: str
    steps: int
    peer: str = "sb3"
    threshold: float | None = None
    ours: str = "rltrain"


BREAKOUT = Group(atari_curves("breakout"), "ALE/Breakout-v5", "ppo", 1_000_000, threshold=20.0)

GROUPS = {
    "breakout": BREAKOUT,
    # the same group's rltrain runs as evaluated before evaluations restarted a lost life
    # as envpool (their training backend) does: after one no-op step
    "breakout-one-noop-eval": replace(BREAKOUT, ours="rltrain-one-noop-eval"),
    # rltrain on Gymnasium's envs (SB3's env frame for frame) beside the same SB3 runs
    "breakout-gymnasium": replace(BREAKOUT, ours="rltrain-gymnasium"),
    # the same learner on two backends: rltrain on Gymnasium's envs against rltrain on
    # envpool's (envpool's own frame stack, before 2026-12-06)
    "breakout-envs": replace(BREAKOUT, ours="rltrain-gymnasium", peer="rltrain"),
    # rltrain on envpool's envs, their frames stacked by rltrain (since 2026-12-06)
    "breakout-envpool-refill": replace(BREAKOUT, ours="rltrain-envpool-refill"),
    # rltrain on envpool's envs with games and lives started by rltrain, SB3's way
    # (env.atari.life_noops=false, since 2026-12-06)
    "breakout-envpool-sb3-starts": replace(BREAKOUT, ours="rltrain-envpool-sb3-starts"),
    "td3": Group(per_seed_curves("td3_halfcheetah"), "HalfCheetah-v5", "td3", 100_000,
                 threshold=3_000.0),  # benchmarks.mujoco_offpolicy's default threshold
    "sac": Group(per_seed_curves("sac_mountaincar_gsde"), "MountainCarContinuous-v0", "sac",
                 50_000, threshold=90.0),
}


def write_run(folder: Path, library: str, env_id: str, algo: str, seed: int, steps: int,
              curve: list[tuple[int, float]]) -> None:
    """A run directory ``rltrain compare`` reads: ``curve``'s points as complete evaluations,
    then the end of a run that finished its ``steps``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = [
        {"event": "evaluation", "env_steps": end, "eval/return_mean": value, "complete": True}
        for end, value in curve]
    rows.append({"event": "end", "env_steps": steps, "stop_reason": None})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "library": library, "env": {"id": env_id}, "agent": {"name": algo},
        "strategy": {"seed": seed}, "trainer": {"num_steps": steps}}))


def write_group(group: Group, out: Path) -> list[Path]:
    """Each side's finished runs of ``group`` under ``out/<name>/seed-S`` (``name``: the
    result files' library, ``ours`` then ``peer``); the two folders."""
    folders = []
    for library in (group.ours, group.peer):
        for seed, curve in sorted(group.curves(library).items()):
            write_run(out / library / f"seed-{seed}", library, group.env_id, group.algo, seed,
                      group.steps, curve)
        folders.append(out / library)
    return folders


def main() -> None:
    from rltrain.cli.compare import compare, markdown

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP",
                        help=f"of {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--out", type=Path, default=Path("runs/groups"))
    args = parser.parse_args()
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        parser.error(f"no group {', '.join(unknown)}: choose from {', '.join(GROUPS)}")
    for name in args.groups or GROUPS:
        group = GROUPS[name]
        folders = write_group(group, args.out / name)
        if not all(folder.exists() for folder in folders):
            print(f"## {name}\n\nno finished runs of one library yet\n")
            continue
        threshold = [] if group.threshold is None else ["--threshold", f"{group.threshold:g}"]
        print(f"## {name}\n\n    rltrain compare {' '.join(map(str, folders))} "
              f"{' '.join(threshold)}\n")
        print(markdown(compare(folders, threshold=group.threshold)))


if __name__ == "__main__":
    main()

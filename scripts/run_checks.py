"""What ``scripts/concurrency_check.py`` checks in a run directory after its racing commands:
that it holds one run of one seed, start to end: its metrics' timeline, every checkpoint the
manifest lists (seed, env steps), ``summary.json`` and ``config.yaml``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rltrain.checkpoint import MANIFEST, read_checkpoint


def read_rows(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (a line that is not a JSON object is a problem)."""
    if not path.is_file():
        problems.append("no metrics.jsonl")
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            problems.append(f"metrics.jsonl line {number} is not JSON: {line[:80]!r}")
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            problems.append(f"metrics.jsonl line {number} is not an object")
    return rows


def check_timeline(rows: list[dict[str, Any]], *, seed: int, num_steps: int, starts: int
                   ) -> list[str]:
    """Problems of metrics.jsonl's rows as one run's timeline: ``starts`` start rows, all with
    ``seed``; within a run env steps never go back; a resume starts where the run before it
    ended (after a kill, not before where that run started: the rows of its last moments may
    not have reached the file); the last run ends at ``num_steps``."""
    problems: list[str] = []
    segments: list[list[dict[str, Any]]] = []
    for row in rows:
        if row.get("event") == "start":
            segments.append([row])
        elif not segments:
            problems.append(f"a {row.get('event')!r} row before the first start row")
        else:
            segments[-1].append(row)
    if len(segments) != starts:
        problems.append(f"{len(segments)} start rows in metrics.jsonl, expected {starts}")
    previous_end: int | None = 0
    previous_begin = 0
    for number, segment in enumerate(segments, 1):
        start = segment[0]
        config = start.get("config") or {}
        if config.get("strategy.seed") != seed:
            problems.append(f"start row {number} has seed {config.get('strategy.seed')}, not "
                            f"{seed}")
        begin = int(start.get("env_steps", -1))
        if previous_end is not None and begin != previous_end:
            problems.append(f"start row {number} at {begin} env steps, but the run before "
                            f"ended at {previous_end}")
        elif previous_end is None and begin < previous_begin:
            problems.append(f"start row {number} at {begin} env steps, before the killed "
                            f"run's start at {previous_begin}")
        steps = begin
        ended: int | None = None
        for row in segment[1:]:
            if ended is not None:
                problems.append(f"a {row.get('event')!r} row after run {number}'s end row")
            current = int(row.get("env_steps", -1))
            if current < steps:
                problems.append(f"env steps go back from {steps} to {current} in run {number} "
                                f"({row.get('event')!r} row)")
            steps = max(steps, current)
            if row.get("event") == "end":
                ended = current
        previous_end, previous_begin = ended, begin
        if number == len(segments):
            if config.get("trainer.num_steps") != num_steps:
                problems.append(f"the last start row is for {config.get('trainer.num_steps')} "
                                f"env steps, not {num_steps}")
            if ended != num_steps:
                problems.append(f"the last run's end row is at {ended} env steps, not "
                                f"{num_steps}")
    return problems


def checkpoint_facts(path: Path) -> dict[str, Any]:
    """A checkpoint's seed, env steps and num_steps, as stored in it."""
    state = read_checkpoint(path)
    config = state.get("config") or {}
    return {"seed": config.get("strategy", {}).get("seed"),
            "num_steps": config.get("trainer", {}).get("num_steps"),
            "env_steps": int(state["progress"]["env_steps"])}


def check_run(run_dir: Path, *, seed: int, num_steps: int, starts: int) -> list[str]:
    """Why ``run_dir`` is not one run of ``seed`` that ended at ``num_steps`` after ``starts``
    starts (an empty list: it is)."""
    problems: list[str] = []
    rows = read_rows(run_dir / "metrics.jsonl", problems)
    problems += check_timeline(rows, seed=seed, num_steps=num_steps, starts=starts)
    checkpoints = run_dir / "checkpoints"
    try:
        manifest = json.loads((checkpoints / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [*problems, f"manifest.json unreadable: {error}"]
    listed = {entry["file"]: entry for entry in manifest.get("checkpoints") or []}
    best = manifest.get("best")
    roles = [("last", manifest.get("last")), ("best", best["file"] if best else None)]
    roles += [("listed", name) for name in listed if name != manifest.get("last")]
    for role, name in roles:
        if name is None:
            problems.append(f"manifest.json has no {role} checkpoint")
            continue
        try:
            facts = checkpoint_facts(checkpoints / name)
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{role} checkpoint {name} does not load: {error}")
            continue
        if facts["seed"] != seed:
            problems.append(f"{role} checkpoint {name} holds seed {facts['seed']}, not {seed}")
        if facts["env_steps"] > num_steps:
            problems.append(f"{role} checkpoint {name} holds {facts['env_steps']} env steps, "
                            f"past {num_steps}")
        if role == "last" and (facts["env_steps"], facts["num_steps"]) != (num_steps,
                                                                              num_steps):
            problems.append(f"last checkpoint {name} holds {facts['env_steps']} env steps of a "
                            f"{facts['num_steps']}-step run, not {num_steps} of {num_steps}")
        entry = listed.get(name) if role != "best" else best
        if entry and int(entry["env_steps"]) != facts["env_steps"]:
            problems.append(f"manifest.json lists {name} at {entry['env_steps']} env steps, it "
                            f"holds {facts['env_steps']}")
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        if summary.get("env_steps") != num_steps:
            problems.append(f"summary.json has {summary.get('env_steps')} env steps, not "
                            f"{num_steps}")
    except (OSError, ValueError) as error:
        problems.append(f"summary.json unreadable: {error}")
    try:
        saved = OmegaConf.load(run_dir / "config.yaml")
        if (saved.strategy.seed, saved.trainer.num_steps) != (seed, num_steps):
            problems.append(f"config.yaml has seed {saved.strategy.seed} and num_steps "
                            f"{saved.trainer.num_steps}, not {seed} and {num_steps}")
    except Exception as error:  # any unreadable config.yaml is a problem to report
        problems.append(f"config.yaml unreadable: {error}")
    return problems

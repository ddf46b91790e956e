"""Many seeds in one command: ``rltrain fit CONFIG --seeds 0-9 --jobs N``.

Every seed is an ordinary ``rltrain fit`` process with ``strategy.seed=S`` and its own run
directory, ``PARENT/seed-S`` (``PARENT`` is ``trainer.run_dir``, or ``runs/<time>-<agent>-<env>-
seeds``); ``--jobs`` of them run at once, each with ``cores / jobs`` torch threads, its output in
``PARENT/seed-S.log`` and one line here when it starts and ends. ``PARENT/seeds.json`` records
the command, so that ``rltrain fit --resume PARENT`` continues the group: a finished seed is left
as it is, a stopped one resumes from its last checkpoint, one that never started starts. A seed
that fails is reported with its log's last line; the others go on, and the command exits with
the first failure's status once all have ended. Ctrl-C stops every seed (each saves a
checkpoint) before the command exits, and so does SIGTERM; a seed's process dies with the
command (SIGKILL included), so ``--resume PARENT`` never meets a seed still running.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from omegaconf import DictConfig

from rltrain.checkpoint.files import atomic_write_text
from rltrain.cli.launchers import JOB_ID, Launcher, NoSlurm, slurm_active, wait
from rltrain.cli.processes import (
    Stops,
    ended_on_signal,
    fit_command,
    has_checkpoint,
    last_line,
    open_log,
    start,
    summary,
)
from rltrain.cli.records import bounded_int, read_bounded, refuse_unknown_fields
from rltrain.config.files import literal_config
from rltrain.config.schema import to_container, validate
from rltrain.runtime.watchdog import exit_words
from rltrain.trainer.preflight import default_run_dir
from rltrain.trainer.run_dir import LOCK, prepare_run

#: The group's record in its parent folder.
MANIFEST = "seeds.json"
SEEDS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_seeds(spec: str) -> list[int]:
    """``"0-9"``, ``"0,3,5"`` or ``"0-4,7"`` as sorted distinct seeds; ``ValueError``
    otherwise."""
    if not SEEDS.fullmatch(spec.replace(" ", "")):
        raise ValueError(f"--seeds {spec!r}: write a range or a list, e.g. --seeds 0-9 or "
                         "--seeds 0,3,5.")
    seeds: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low or high - low >= 10_000:
            raise ValueError(f"--seeds {spec!r}: {part} is not a range of at most 10,000 "
                             "seeds from low to high.")
        seeds.update(range(low, high + 1))
    return sorted(seeds)


@dataclass(eq=False)
class Seed:
    """One seed of the group: its run directory and, while it runs, its process."""

    seed: int
    run_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    started: float = 0.0

    @property
    def finished(self) -> bool:
        """Whether the seed's run ended (its ``summary.json`` says so) other than by a signal
        (Ctrl-C, SIGTERM), after which it is continued."""
        return bool(summary(self.run_dir)) and not ended_on_signal(self.run_dir)


def parent_of(config: DictConfig) -> Path:
    """The group's folder: ``trainer.run_dir``, or a fresh one under ``runs/``."""
    if config.trainer.run_dir is not None:
        return Path(str(config.trainer.run_dir))
    env = str(config.env.id or config.env._target_ or "env")
    fresh = default_run_dir(str(config.agent.name), env)
    return fresh.with_name(fresh.name + "-seeds")


#: The most seeds and jobs a group record may hold (what ``--seeds`` accepts).
MAX_SEEDS, MAX_JOBS = 10_000, 1_024


def launch(config: DictConfig, seeds: list[int], jobs: int, parent: Path,
           passthrough: list[str], overrides: list[str], launcher: Launcher | None = None,
           *, wait_for: bool = False) -> int:
    """Start a group: record it in ``parent/seeds.json`` (refused where a group or a run is
    already), then run its seeds. ``config``: the composed config of the command line;
    ``overrides``: the command line's own that every seed takes as given (the folders it
    names outside the seeds' runs)."""
    if (parent / MANIFEST).exists() or (parent / "config.yaml").exists():
        raise ValueError(f"{parent} already holds a run or a group of seeds: continue it with "
                         f"rltrain fit --resume {parent}, or name another trainer.run_dir.")
    parent.mkdir(parents=True, exist_ok=True)
    stored = to_container(config)
    record = {"format": FORMAT, "seeds": seeds, "jobs": jobs, "config": stored, "slurm": {}}
    _write(parent, record)
    if launcher is not None:
        return submit_group(parent, record, literal_config(stored), overrides, passthrough,
                            launcher, resuming=False, wait_for=wait_for, active={})
    return run_group(parent, literal_config(stored), seeds, jobs, overrides, passthrough,
                     resuming=False)


def _write(parent: Path, record: dict[str, Any]) -> None:
    atomic_write_text(parent / MANIFEST, json.dumps(record, indent=2) + "\n")


#: The record's format: 2 holds the composed config (1 held a command line to replay).
FORMAT = 2


def resume_group(parent: Path, overrides: list[str], passthrough: list[str],
                 launcher: Launcher | None = None, *, wait_for: bool = False) -> int:
    """``rltrain fit --resume PARENT`` of a group: its unfinished seeds. The record is read as
    untrusted data: its seeds and jobs checked, its config given to each seed's run as a stored
    config (checked there as any run's); ``overrides`` and ``passthrough`` come from this
    command line only."""
    path = parent / MANIFEST
    try:
        record = json.loads(read_bounded(path), parse_int=bounded_int)
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise ValueError("its format is not " + (
                "2 (it was written by an earlier rltrain, whose records held a command line to "
                "replay, which rltrain no longer trusts: resume each started seed with rltrain "
                f"fit --resume {parent}/seed-S, and start the others again with your command)"
                if isinstance(record, dict) and record.get("format") == 1 else str(FORMAT)))
        refuse_unknown_fields(record, {"format", "seeds", "jobs", "config", "slurm"})
        seeds, jobs, stored = record["seeds"], record["jobs"], record["config"]
        record["slurm"] = _checked_jobs(record.get("slurm", {}), seeds)
        if not (isinstance(seeds, list) and 0 < len(seeds) <= MAX_SEEDS
                and all(type(s) is int and 0 <= s < 2**32 for s in seeds)
                and len(set(seeds)) == len(seeds)):
            raise ValueError(f"'seeds' must be distinct seeds in [0, 2**32), at most "
                             f"{MAX_SEEDS:,}")
        if not (type(jobs) is int and 1 <= jobs <= MAX_JOBS):
            raise ValueError(f"'jobs' must be an int in [1, {MAX_JOBS}]")
        if not isinstance(stored, dict):
            raise ValueError("'config' must be a mapping")
        config = literal_config(stored)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"{path} is not a group of seeds rltrain wrote: {error}.") from None
    try:
        config = validate(config)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: the group's config is refused: {error}") from None
    try:
        still = slurm_active([j["job"] for j in record["slurm"].values()]) \
            if record["slurm"] else {}
    except NoSlurm:
        if launcher is not None:
            raise
        print(f"rltrain: no Slurm here (squeue): the seeds of {parent} that ran in Slurm are "
              "taken to have ended; a seed still being written elsewhere is refused by its "
              "run directory's lock", flush=True)
        still = {}
    if launcher is not None:
        return submit_group(parent, record, config, overrides, passthrough, launcher,
                            resuming=True, wait_for=wait_for, active=still)
    if still:
        raise ValueError(f"{len(still)} seeds of {parent} are queued or running in Slurm "
                         f"({', '.join(f'{j}: {s}' for j, s in still.items())}); wait for "
                         "them, cancel them (scancel), or resume with --launcher slurm, which "
                         "submits only the others.")
    return run_group(parent, config, seeds, jobs, overrides, passthrough, resuming=True)


def _checked_jobs(jobs: object, seeds: list[int]) -> dict[str, dict[str, str]]:
    """The record's Slurm jobs (untrusted): by seed, a job id and the node it ran on."""
    if not isinstance(jobs, dict) or not all(
            isinstance(k, str) and k.isdigit() and int(k) in seeds and isinstance(v, dict)
            and set(v) <= {"job", "node"} and JOB_ID.fullmatch(str(v.get("job", "")))
            and all(isinstance(x, str) and len(x) <= 100 and x.isprintable()
                    for x in v.values()) for k, v in jobs.items()):
        raise ValueError("'slurm' must map the group's seeds to their job ids and nodes")
    return jobs


def submit_group(parent: Path, record: dict[str, Any], config: DictConfig,
                 overrides: list[str], passthrough: list[str], launcher: Launcher, *,
                 resuming: bool, wait_for: bool, active: dict[str, str]) -> int:
    """Submit the group's unfinished seeds (neither finished nor among the ``active`` Slurm
    jobs) through ``launcher``, as one array job; record each seed's job (and, once it ran,
    its node) in ``seeds.json``."""
    jobs: dict[str, dict[str, str]] = record["slurm"]
    group = [Seed(s, parent / f"seed-{s}") for s in record["seeds"]]
    _record_nodes(group, jobs)
    queued = [s for s in group if jobs.get(str(s.seed), {}).get("job") in active]
    for seed in queued:
        job = jobs[str(seed.seed)]["job"]
        print(f"seed {seed.seed}: slurm job {job} is {active[job]}, left as it is", flush=True)
    todo = _todo([s for s in group if s not in queued], resuming)
    commands: dict[str, tuple[list[str], Path]] = {}
    for seed in todo:
        _prepare(seed, config)
        command, _ = fit_command(seed.run_dir.absolute(), [
            "trainer.enable_progress_bar=false", f"trainer.num_threads={launcher.threads}",
            *overrides], passthrough)
        commands[str(seed.seed)] = (command, parent.absolute() / f"seed-{seed.seed}.log")
    submitted = launcher.submit(commands, parent / "slurm", parallel=record["jobs"],
                                title="rltrain-seeds") if commands else {}
    for key, job in submitted.items():
        jobs[key] = {"job": job}
        print(f"seed {key}: submitted as slurm job {job}", flush=True)
    _write(parent, record)
    if wait_for and (submitted or queued):
        wait(launcher, [j["job"] for j in jobs.values()])
        _record_nodes(group, jobs)
        _write(parent, record)
    if wait_for or not (submitted or queued):
        return 1 if _summary(parent, group) else 0
    print(f"seeds in {parent}: {len(submitted)} submitted, {len(queued)} queued or running "
          f"before, {len(group) - len(todo) - len(queued)} finished; see them with squeue, "
          f"and continue with rltrain fit --resume {parent} --launcher slurm", flush=True)
    return 0


def _todo(group: list[Seed], resuming: bool) -> list[Seed]:
    """The seeds of ``group`` to run: all of a new group, the unfinished ones of a resumed
    one (the others are said to be left as they are)."""
    todo = [s for s in group if not (resuming and s.finished)]
    for done in (s for s in group if s not in todo):
        print(f"seed {done.seed}: finished before, left as it is", flush=True)
    return todo


def _record_nodes(group: list[Seed], jobs: dict[str, dict[str, str]]) -> None:
    """Note in each seed's job entry the node its run last ran on."""
    for seed in group:
        entry = jobs.get(str(seed.seed))
        if entry is not None and (host := _last_host(seed.run_dir)):
            entry["node"] = host


def _summary(parent: Path, group: list[Seed]) -> list[int]:
    """Say how many of the group's seeds finished; the unfinished ones."""
    unfinished = [s.seed for s in group if not s.finished]
    print(f"seeds in {parent}: {len(group) - len(unfinished)} of {len(group)} finished"
          + (f"; continue with rltrain fit --resume {parent}" if unfinished else ""),
          flush=True)
    return unfinished


def _last_host(run_dir: Path) -> str | None:
    """The host of the run's last writer (its lock file's record), if it can be read."""
    try:
        holder = json.loads(read_bounded(run_dir / LOCK, limit=4096))
        host = holder.get("host") if isinstance(holder, dict) else None
    except (OSError, ValueError, RecursionError):
        return None
    return host[:100] if isinstance(host, str) and host.isprintable() else None


def run_group(parent: Path, config: DictConfig, seeds: list[int], jobs: int,
              overrides: list[str], passthrough: list[str], *, resuming: bool) -> int:
    """Run the seeds ``jobs`` at a time; the first failure's exit status, else 0."""
    group = [Seed(s, parent / f"seed-{s}") for s in seeds]
    todo = _todo(group, resuming)
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    running: list[Seed] = []
    failures: list[int] = []
    with Stops(lambda: [s.process for s in running]) as stop:
        while todo or running:
            while todo and len(running) < jobs and not stop.requested:
                seed = todo.pop(0)
                if _start(seed, config, [f"trainer.num_threads={threads}", *overrides],
                          passthrough):
                    running.append(seed)
                else:
                    failures.append(EXIT_BAD_INPUT)
            time.sleep(0.2)
            for seed in [s for s in running if s.process and s.process.poll() is not None]:
                running.remove(seed)
                code = _report(seed)
                if code:
                    failures.append(code)
            if stop.requested and not running:
                break
    _summary(parent, group)
    return failures[0] if failures else (130 if stop.requested else 0)


#: The exit status of a seed whose run directory could not be prepared (the CLI's bad input).
EXIT_BAD_INPUT = 2


def _start(seed: Seed, config: DictConfig, overrides: list[str], passthrough: list[str]
           ) -> bool:
    """Start the seed's process (preparing its run directory from the group's config where it
    has no checkpoint); False, with the reason printed, when its directory cannot take it."""
    try:
        _prepare(seed, config)
        seed.log = open_log(seed.run_dir.parent / f"seed-{seed.seed}.log")
    except (OSError, ValueError) as error:
        print(f"seed {seed.seed}: failed (exit {EXIT_BAD_INPUT}): {error}", flush=True)
        return False
    command, resume = fit_command(
        seed.run_dir, ["trainer.enable_progress_bar=false", *overrides], passthrough)
    seed.process = start(command, seed.log)
    seed.started = time.monotonic()
    print(f"seed {seed.seed}: {'resumed' if resume else 'started'} in {seed.run_dir}",
          flush=True)
    return True


def _prepare(seed: Seed, config: DictConfig) -> None:
    """Write the seed's run directory with its config, unless it has a checkpoint to resume."""
    if not has_checkpoint(seed.run_dir):
        prepare_run(seed.run_dir, seed_config(config, seed.seed, seed.run_dir))


def seed_config(config: DictConfig, seed: int, run_dir: Path) -> DictConfig:
    """The group's config for one seed: its seed and run directory set."""
    made = config.copy()
    made.strategy.seed = seed
    made.trainer.run_dir = str(run_dir)
    return made


def _report(seed: Seed) -> int:
    assert seed.process is not None and seed.log is not None
    seed.log.close()
    code = seed.process.returncode
    seconds = time.monotonic() - seed.started
    if code == 0 or seed.finished:  # a process stopped after its run wrote its end
        best = summary(seed.run_dir).get("best_eval_return")
        print(f"seed {seed.seed}: done in {seconds:.0f} s"
              + (f", best evaluation {best:.2f}" if isinstance(best, float | int) else "")
              + ("" if code == 0 else f" (its process then ended: {exit_words(code)})"),
              flush=True)
        return 0
    last = last_line(seed.run_dir.parent / f"seed-{seed.seed}.log")
    print(f"seed {seed.seed}: failed ({exit_words(code)}) after {seconds:.0f} s: {last}",
          flush=True)
    return code if code > 0 else 1

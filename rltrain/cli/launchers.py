"""Where the runs of a seed group and the workers of a study run: the one seam between rltrain's
commands and a scheduler.

- ``local`` (the default): child processes of the command, ``--jobs`` at a time
  (:mod:`rltrain.cli.seeds`, :mod:`rltrain.cli.tune`).
- ``slurm``: jobs submitted through submitit (``pip install 'rltrain[cluster]'``): a seed group
  as one array job (at most ``--jobs`` of its tasks at once), a study's workers as an array of
  ``rltrain tune`` workers. The submitting command returns once they are queued (with
  ``--wait``, once they ended). Each job runs one ``rltrain`` command line, as the local
  launcher does; nothing is read back from submitit's own files (its result pickles are never
  loaded): the runs' own files say what finished, ``squeue`` what is still queued or running.

A new scheduler (Ray, Kubernetes) is one more :class:`Launcher`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

#: A Slurm job id as rltrain records it: ``JOB`` or an array task ``JOB_TASK``.
JOB_ID = re.compile(r"^\d{1,12}(_\d{1,7})?$")
#: Slurm settings ``--slurm KEY=VALUE`` may set (submitit's names, without ``slurm_``).
SLURM_KEYS = ("partition", "time", "cpus_per_task", "mem", "gpus_per_node", "account", "qos",
              "constraint", "exclude", "nodelist", "comment", "setup")
#: Minutes a job may run unless ``--slurm time=MIN`` says otherwise (submitit's default is 5).
DEFAULT_MINUTES = 24 * 60


class Launcher(Protocol):
    """Runs ``rltrain`` command lines somewhere; returns at once (a scheduler) or when they
    ended (this machine)."""

    name: str
    #: Torch threads of each run: the CPUs a job is given.
    threads: int

    def submit(self, commands: dict[str, tuple[list[str], Path]], folder: Path, *,
               parallel: int, title: str) -> dict[str, str]:
        """Queue each of ``commands`` (by key: a seed, a worker: a command line and the log it
        appends to), ``parallel`` at a time, the scheduler's files in ``folder``; the job id
        of each key."""

    def active(self, jobs: Sequence[str]) -> dict[str, str]:
        """Of ``jobs``, those still queued or running: their state and node."""


def run_command(command: list[str], log: str) -> int:
    """What a Slurm job runs (pickled by submitit, called on the node): ``command``, its output
    appended to ``log`` (as the local launcher does), its exit status raised as an error when it
    fails so that the job shows failed."""
    import os
    import socket

    from rltrain.cli.processes import open_log

    task = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
    if "SLURM_ARRAY_TASK_ID" in os.environ:
        task += "_" + os.environ["SLURM_ARRAY_TASK_ID"]
    with open_log(Path(log)) as out:
        out.write(f"rltrain: slurm job {task} on {socket.gethostname()}\n".encode())
        out.flush()
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    if code:
        raise RuntimeError(f"{command[3:5]} exited with status {code}")
    return code


class SlurmLauncher:
    """Slurm through submitit. ``settings``: the command line's ``--slurm KEY=VALUE`` (one of
    :data:`SLURM_KEYS`)."""

    name = "slurm"

    def __init__(self, settings: Sequence[str] = ()) -> None:
        try:
            import submitit
        except ImportError as error:
            raise ImportError("--launcher slurm needs submitit: pip install "
                              "'rltrain[cluster]'.") from error
        self.submitit = submitit
        self.parameters: dict[str, Any] = {"time": DEFAULT_MINUTES}
        for setting in settings:
            key, sep, value = setting.partition("=")
            if not sep or key not in SLURM_KEYS:
                raise ValueError(f"--slurm {setting!r}: write KEY=VALUE with KEY one of "
                                 f"{', '.join(SLURM_KEYS)}.")
            if key == "setup":  # shell lines before the job: each --slurm setup=... one
                self.parameters.setdefault("setup", []).append(value)
            else:
                self.parameters[key] = int(value) if key in (
                    "time", "cpus_per_task", "gpus_per_node") and value.isdigit() else value
        if not isinstance(self.parameters["time"], int):
            raise ValueError("--slurm time=MIN: minutes, a whole number.")
        cpus = self.parameters.get("cpus_per_task", 1)
        self.threads = cpus if isinstance(cpus, int) else 1

    def submit(self, commands: dict[str, tuple[list[str], Path]], folder: Path, *,
               parallel: int, title: str) -> dict[str, str]:
        executor = self.submitit.SlurmExecutor(folder=folder, python=sys.executable)
        executor.update_parameters(job_name=title, array_parallelism=parallel,
                                   stderr_to_stdout=True, **self.parameters)
        keys = list(commands)
        try:
            with executor.batch():
                jobs = [executor.submit(run_command, commands[key][0], str(commands[key][1]))
                        for key in keys]
        except Exception as error:  # sbatch's refusal (a partition, a time limit): in its words
            raise ValueError(f"Slurm refused the jobs: {str(error).strip()[-500:]}") from None
        return {key: str(job.job_id) for key, job in zip(keys, jobs, strict=True)}

    def active(self, jobs: Sequence[str]) -> dict[str, str]:
        return slurm_active(jobs)


class NoSlurm(ValueError):
    """This machine has no Slurm to ask (no ``squeue``)."""


def slurm_active(jobs: Sequence[str]) -> dict[str, str]:
    """Of the Slurm ``jobs`` (ids as a record holds them: untrusted, malformed ones ignored),
    those still queued or running, with their state and node (``squeue``)."""
    ids = [j for j in jobs if isinstance(j, str) and JOB_ID.fullmatch(j)]
    if not ids:
        return {}
    try:
        listed = subprocess.run(  # --array: each task of an array on its own line
            ["squeue", "--array", "--noheader", "--format=%i %T %N", "--states=all",
             f"--jobs={','.join(ids)}"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise NoSlurm("squeue is not installed here") from None
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ValueError(f"Cannot ask Slurm which jobs still run (squeue): {error}.") \
            from None
    if listed.returncode and "invalid job id" not in listed.stderr.lower():  # not just gone
        raise ValueError(f"Cannot ask Slurm which jobs still run (squeue): "
                         f"{listed.stderr.strip()[-300:]}.")
    found: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        job, _, rest = line.strip().partition(" ")
        state, _, node = rest.partition(" ")
        if job in ids and state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                    "SUSPENDED", "REQUEUED", "RESIZING"):
            found[job] = f"{state.lower()}{' on ' + node if node else ''}"
    return found


def make_launcher(kind: str, settings: Sequence[str]) -> SlurmLauncher | None:
    """The launcher ``--launcher`` names: ``None`` for ``local`` (the commands' own loops)."""
    if kind == "local":
        if settings:
            raise ValueError("--slurm settings need --launcher slurm.")
        return None
    return SlurmLauncher(settings)


def wait(launcher: Launcher, jobs: Sequence[str], poll: float = 5.0) -> None:
    """Return once none of ``jobs`` is queued or running."""
    while launcher.active(jobs):
        time.sleep(poll)

"""Real servers for the cluster checks, started in a temporary folder and stopped afterwards:

- a PostgreSQL cluster (Debian's ``postgresql``; ``initdb`` refuses root, so it runs as the
  ``postgres`` user when this process is root) on a free port;
- a single-node Slurm (Debian's ``slurm-wlm`` and ``munge``): ``munged``, ``slurmctld`` and
  ``slurmd`` on this host, with their own configuration (``SLURM_CONF``), sockets and ports, no
  cgroups (``proctrack/linuxproc``) and no accounting. ``slurmd`` launches jobs, so it needs
  root.

``python -m benchmarks.servers postgres|slurm`` starts one and prints how to reach it until
Ctrl-C or SIGTERM (either stops its daemons and removes its folder), for trying ``rltrain tune
--storage URL`` or ``--launcher slurm`` by hand.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _find_postgres_bin(name: str) -> str | None:
    """A PostgreSQL program: on ``PATH`` or in Debian's ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(versions[-1]) if versions else None


def _postgres_bin(name: str) -> str:
    """A PostgreSQL program's path (:func:`postgres_missing` says why there is none)."""
    return _find_postgres_bin(name) or name


def postgres_missing() -> str | None:
    """Why a PostgreSQL server cannot be started here, or ``None`` when it can."""
    if _find_postgres_bin("initdb") is None or _find_postgres_bin("pg_ctl") is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (apt install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user to run initdb as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'rltrain[cluster]')"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL server on a free localhost port with a database ``rltrain``; yields its
    URL (user ``postgres``, no password: ``trust`` authentication on localhost only)."""
    folder = Path(tempfile.mkdtemp(prefix="rltrain-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    run = [*as_user]
    subprocess.run([*run, _postgres_bin("initdb"), "-D", str(data), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*run, _postgres_bin("pg_ctl"), "-D", str(data), "-w", "-l",
                    str(folder / "server.log"), "-o",
                    f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                    "-c max_connections=200", "start"], check=True, capture_output=True)
    try:
        subprocess.run([*run, _postgres_bin("createdb"), "-h", "127.0.0.1",
                        "-p", str(port), "-U", "postgres", "rltrain"], check=True,
                       capture_output=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/rltrain"
    finally:
        subprocess.run([*run, _postgres_bin("pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def slurm_missing() -> str | None:
    """Why a single-node Slurm cannot be started here, or ``None`` when it can."""
    missing = [p for p in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")
               if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]
    if missing:
        return f"{', '.join(missing)} not installed (apt install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd launches jobs as their users, which needs root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "there is no munge user to run munged as"
    return None


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@contextlib.contextmanager
def slurm(cpus: int | None = None) -> Iterator[dict[str, str]]:
    """A single-node Slurm cluster on this host (one partition, ``debug``, of ``cpus`` CPUs,
    default all); yields the environment its client commands need (``SLURM_CONF``). Every job
    is cancelled and every daemon stopped on the way out."""
    folder = Path(tempfile.mkdtemp(prefix="rltrain-slurm-"))
    munge = folder / "munge"
    munge.mkdir()
    user = pwd.getpwnam("munge")
    os.chown(munge, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o755)
    socket_path = munge / "munge.socket"
    subprocess.run(["runuser", "-u", "munge", "--", _daemon("munged"), f"--socket={socket_path}",
                    f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'seed'}",
                    f"--log-file={munge / 'munged.log'}"], check=True, capture_output=True)
    host = socket.gethostname().split(".")[0]
    for name in ("state", "spool", "log"):
        (folder / name).mkdir()
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=rltrain", f"SlurmctldHost={host}", f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}", "SlurmUser=root", "AuthType=auth/munge",
        f"AuthInfo=socket={socket_path}", "CredType=cred/munge",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2",
        "MpiDefault=none", "KillWait=30",
        f"NodeName={host} CPUs={cpus or os.cpu_count() or 1} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        subprocess.run([_daemon("slurmctld"), "-f", str(conf)], check=True, env=env,
                       capture_output=True)
        subprocess.run([_daemon("slurmd"), "-f", str(conf)], check=True, env=env,
                       capture_output=True)
        deadline = time.monotonic() + 30
        while "idle" not in subprocess.run(["sinfo", "--noheader", "--format=%t"], env=env,
                                           capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError("Slurm's node did not come up: "
                                   + (folder / "log" / "slurmd.log").read_text()[-2000:])
            time.sleep(0.5)
        yield {"SLURM_CONF": str(conf)}
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((folder / pid_file).read_text().strip()), 15)
        time.sleep(1)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in ("postgres", "slurm"):
        sys.exit("usage: python -m benchmarks.servers postgres|slurm")
    kind = sys.argv[1]
    why = postgres_missing() if kind == "postgres" else slurm_missing()
    if why:
        sys.exit(f"cannot start {kind}: {why}")
    with (postgres() if kind == "postgres" else slurm()) as reach:
        print(reach if isinstance(reach, str) else f"export SLURM_CONF={reach['SLURM_CONF']}",
              flush=True)
        # SIGTERM (kill, or a shell that started it in the background, where SIGINT is
        # ignored) stops it as Ctrl-C does: the daemons are stopped on the way out.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()

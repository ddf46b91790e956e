"""Real servers for the cluster checks, started in a temporary folder and stopped afterwards:
a PostgreSQL cluster (Debian's ``postgresql``; ``initdb`` refuses root, so it runs as the
``postgres`` user when this process is root) on a free port.

``python -m benchmarks.servers postgres`` starts one and prints its URL until Ctrl-C, for
trying ``rltrain tune --storage URL`` by hand.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _postgres_bin(name: str) -> str | None:
    """A PostgreSQL program: on ``PATH`` or in Debian's ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(versions[-1]) if versions else None


def postgres_missing() -> str | None:
    """Why a PostgreSQL server cannot be started here, or ``None`` when it can."""
    if _postgres_bin("initdb") is None or _postgres_bin("pg_ctl") is None:
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
        subprocess.run([*run, _postgres_bin("createdb") or "createdb", "-h", "127.0.0.1",
                        "-p", str(port), "-U", "postgres", "rltrain"], check=True,
                       capture_output=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/rltrain"
    finally:
        subprocess.run([*run, _postgres_bin("pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] != "postgres":
        sys.exit("usage: python -m benchmarks.servers postgres")
    why = postgres_missing()
    if why:
        sys.exit(f"cannot start PostgreSQL: {why}")
    with postgres() as url:
        print(url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()

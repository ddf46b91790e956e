"""``python -m benchmarks.servers``, the real servers the cluster checks start: started in the
background as a script does (SIGINT ignored there), a SIGTERM stops its server and removes its
folder."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.servers import postgres_missing

ROOT = Path(__file__).resolve().parents[2]


def folder_of(port: int) -> Path:
    """The folder of the server on ``port`` (its ``postmaster.pid`` names the port): other
    tests may run servers of their own meanwhile."""
    for folder in Path(tempfile.gettempdir()).glob("rltrain-pg-*"):
        with contextlib.suppress(OSError):
            if (folder / "data" / "postmaster.pid").read_text().splitlines()[3] == str(port):
                return folder
    raise AssertionError(f"no server folder holds port {port}")


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(postgres_missing() is not None, reason=f"{postgres_missing()}")
def test_sigterm_stops_a_server_started_in_the_background() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.servers", "postgres"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # SIGINT ignored, as for `cmd &`
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert server.stdout is not None
    found = re.search(r"@127\.0\.0\.1:(\d+)/", server.stdout.readline())
    assert found is not None
    port = int(found.group(1))
    folder = folder_of(port)
    assert accepts(port)
    server.send_signal(signal.SIGINT)  # ignored in a background job
    time.sleep(0.5)
    assert server.poll() is None
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
    assert not accepts(port)  # the PostgreSQL server was stopped
    assert not folder.exists()  # and its folder removed

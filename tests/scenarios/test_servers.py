"""``python -m benchmarks.servers``, the real servers the cluster checks start: started in the
background as a script does (SIGINT ignored there), a SIGTERM stops its server and removes its
folder."""

from __future__ import annotations

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


def folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("rltrain-pg-*"))


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(postgres_missing() is not None, reason=f"{postgres_missing()}")
def test_sigterm_stops_a_server_started_in_the_background() -> None:
    before = folders()
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.servers", "postgres"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # SIGINT ignored, as for `cmd &`
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert server.stdout is not None
    found = re.search(r"@127\.0\.0\.1:(\d+)/", server.stdout.readline())
    assert found is not None
    port, made = int(found.group(1)), folders() - before
    assert accepts(port) and len(made) == 1
    server.send_signal(signal.SIGINT)  # ignored in a background job
    time.sleep(0.5)
    assert server.poll() is None
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
    assert not accepts(port)  # the PostgreSQL server was stopped
    assert not any(folder.exists() for folder in made)  # and its folder removed

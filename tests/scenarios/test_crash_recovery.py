"""SIGKILL a real training process three times (once during a checkpoint write) and resume it.

The short version of ``scripts/crash_harness.py`` (20 kills): after every kill each checkpoint
listed in the manifest loads and matches its checksum, ``resolve("last")`` works, and the next
run resumes from that checkpoint's env steps; the run then finishes with every step done.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow


def test_three_sigkills_recover_with_intact_checkpoints(tmp_path: Path) -> None:
    harness = load_script("crash_harness")
    result = harness.run(kills=3, seed=0, steps=3_000, work_dir=tmp_path, quick=True,
                         verbose=False, final_timeout=60)
    report = "\n".join([result["table"], *result["failures"]])
    assert result["kills"] == 3, report
    for record in result["records"]:
        assert record["problems"] == [], report
        assert record["resume_ok"], report
        assert record["resume_from"] is not None
        assert record["resumed_at"] == record["resume_from"], report
    assert result["recovered"] == 3, report
    # The first kill waits for a checkpoint's temporary file and kills at once: that lands
    # during the write unless the write finished within the poll interval.
    assert result["records"][0]["moment"].startswith("writing checkpoint-"), report
    final = result["final"]
    assert final["exit_code"] == 0, report
    assert final["resumed_at"] == final["expected_resume"], report
    assert final["last_checkpoint_env_steps"] == final["num_steps"], report
    assert final["summary_env_steps"] == final["num_steps"], report
    assert result["ok"], report

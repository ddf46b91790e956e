"""MuJoCo's warnings as Python warnings (rltrain/envs/mujoco_log.py), with no MUJOCO_LOG.TXT
left in the working directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mujoco")

SCRIPT = """
import warnings
import mujoco
from rltrain.envs.mujoco_log import MujocoWarning, route_mujoco_warnings
route_mujoco_warnings("HalfCheetah-v5")
model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><joint/><geom size='1'/>"
                                       "</body></worldbody></mujoco>")
data = mujoco.MjData(model)
data.qacc_warmstart[:] = float("nan")
data.qpos[:] = float("nan")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mujoco.mj_step(model, data)
print(sorted({type(w.message).__name__ for w in caught if "MuJoCo" in str(w.message)}))
"""


@pytest.mark.slow  # a fresh interpreter (3 s)
def test_mujoco_s_warnings_become_python_warnings_and_no_log_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['MujocoWarning']", done.stdout + done.stderr[-500:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()

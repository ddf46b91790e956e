"""What the hostile-input scenarios share: planted code that leaves a mark when imported, a
secret in the environment, the ``rltrain`` command as users run it, and snapshots of the files
around a run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from conftest import ROOT

from rltrain.checkpoint.manifest import MANIFEST

SECRET = "s3cr3t-from-the-environment"

#: Planted code: importing it leaves a file named after the module beside the test's folder.
EVIL = """
import pathlib
pathlib.Path({mark!r}, __name__).write_text("ran")
import gymnasium
class Agent: pass
class Strategy: pass
class Env(gymnasium.Env): pass
class Wrap(gymnasium.Wrapper): pass
gymnasium.register("Foo-v0", entry_point=Env)
"""


#: The console script pip installed beside this Python (what a user runs), else the module.
SCRIPT = ([str(Path(sys.executable).with_name("rltrain"))]
          if Path(sys.executable).with_name("rltrain").is_file()
          else [sys.executable, "-m", "rltrain.cli"])


def rltrain(*args: str | Path, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``rltrain`` command, run in ``cwd``."""
    return subprocess.run([*SCRIPT, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, check=False)


def plant(folder: Path, mark: Path, *names: str) -> None:
    """Modules in ``folder`` (``name.py``) whose import leaves ``mark/name``."""
    for name in names:
        (folder / f"{name}.py").write_text(EVIL.format(mark=str(mark)))


def secret_anywhere(folder: Path) -> list[str]:
    """The files under ``folder`` whose path or text holds :data:`SECRET`."""
    return [str(p) for p in folder.rglob("*") if SECRET in str(p) or (
        p.is_file() and SECRET.encode() in p.read_bytes())]


def snapshot(folder: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` but those under ``skip``: size and modification time."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file() and skip not in p.parents}


def load_policy(path: str, cwd: Path, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """:func:`rltrain.load_policy` of ``path`` in a Python process run in ``cwd``."""
    env = dict(env or {})
    python_path = os.pathsep.join([str(ROOT), *filter(None, [env.pop("PYTHONPATH", "")])])
    code = ("import sys, rltrain\ntry:\n    rltrain.load_policy(sys.argv[1])\n"
            "except (ValueError, OSError) as error:\n"
            "    print('refused:', error, file=sys.stderr)\n"
            "    raise SystemExit(2)\n")
    return subprocess.run([sys.executable, "-c", code, path], cwd=cwd, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "RLTRAIN_SECRET": SECRET, **env,
                               "PYTHONPATH": python_path})




def change_stored(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change a run's stored config: its ``config.yaml`` and the one in each checkpoint, the
    manifest's checksums updated to match (as someone who can write the run could)."""
    path = run / "config.yaml"
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config))
    manifest_path = run / "checkpoints" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for entry in [*manifest["checkpoints"], manifest.get("best") or {}]:
        if not entry:
            continue
        checkpoint = run / "checkpoints" / entry["file"]
        state = torch.load(checkpoint, weights_only=True)
        change(state["config"])
        torch.save(state, checkpoint)
        data = checkpoint.read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    manifest_path.write_text(json.dumps(manifest))


def victim(work: Path, *extra: str) -> Path:
    """A real, short DQN run on CartPole with two evaluations, in ``work/runs/victim``."""
    fit = rltrain("fit", "trainer.num_steps=300", "strategy.warmup_steps=100",
                  "strategy.batch_size=32", "trainer.eval_interval=150",
                  "trainer.eval_episodes=2", "trainer.return_threshold=null",
                  "agent.hidden_sizes=[16]", "trainer.enable_progress_bar=false",
                  "trainer.enable_console=false", "trainer.run_dir=runs/victim", *extra,
                  cwd=work)
    assert fit.returncode == 0, fit.stderr
    return work / "runs" / "victim"

"""A third-party package from the command line alone: MiniGrid (imported by the config, its
image wrapper applied) trains, `rltrain evaluate` reproduces the final evaluation, and
`--resume` continues the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import rltrain

from rltrain.config.files import load_stored

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

pytest.importorskip("minigrid")

MINIGRID = ["env.id=MiniGrid-Empty-5x5-v0", "env.imports=[minigrid]",
            "env.wrappers=[{_target_: minigrid.wrappers.ImgObsWrapper}]"]
QUICK = ["trainer.num_steps=300", "strategy.warmup_steps=100", "strategy.batch_size=32",
         "trainer.eval_episodes=3", "trainer.eval_interval=1000", "trainer.return_threshold=null",
         "trainer.enable_progress_bar=false", "trainer.enable_console=false",
         "trainer.logger=false"]


def test_minigrid_from_the_cli_trains_evaluates_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit = rltrain("fit", *MINIGRID, f"trainer.run_dir={run_dir}", *QUICK, cwd=tmp_path,
                  timeout=300)
    assert fit.returncode == 0, fit.stderr
    stored = load_stored(run_dir / "config.yaml")
    assert stored.env.imports == ["minigrid"]
    assert stored.env.wrappers == [{"_target_": "minigrid.wrappers.ImgObsWrapper"}]
    final = json.loads((run_dir / "summary.json").read_text())["final_metrics"]
    evaluate = rltrain("evaluate", run_dir, cwd=tmp_path, timeout=300)
    assert evaluate.returncode == 0, evaluate.stderr
    metrics = json.loads(evaluate.stdout)
    assert metrics["eval/return_mean"] == pytest.approx(final["eval/return_mean"])
    assert metrics["eval/length_mean"] == pytest.approx(final["eval/length_mean"])
    resume = rltrain("fit", "--resume", run_dir, "trainer.num_steps=400", cwd=tmp_path,
                     timeout=300)
    assert resume.returncode == 0, resume.stderr
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 400

"""The ``rltrain`` console script, run for real in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = 1500  # warm-up 1,000, two training rounds, and the final evaluation (20 episodes)


def rltrain(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rltrain.cli`` (what the ``rltrain`` script runs) in ``cwd``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "rltrain.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)


Fitted = tuple[Path, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def fitted(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    cwd = tmp_path_factory.mktemp("cli")
    run_dir = cwd / "run"
    process = rltrain("fit", "--steps", str(STEPS), "--run-dir", run_dir, "--no-tqdm", cwd=cwd)
    return run_dir, process


def test_fit_exits_0_and_leaves_a_complete_run_directory(fitted: Fitted) -> None:
    run_dir, process = fitted
    assert process.returncode == 0, process.stderr
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "checkpoints/last.pt"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == STEPS
    assert summary["gradient_steps"] == 256  # rounds of 128 at 1,024 and 1,280
    config = (run_dir / "config.yaml").read_text()
    assert "num_steps: 1500" in config
    assert "env: CartPole-v1" in config
    assert "return_threshold: 475.0" in config  # CartPole-v1's registered reward_threshold
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["event"] == "start" and rows[-1]["event"] == "end"


def test_fit_prints_console_lines_and_no_progress_bar(fitted: Fitted) -> None:
    run_dir, process = fitted
    lines = process.stdout.splitlines()
    assert lines[0] == f"training for {STEPS:,} env steps"
    assert any(line.startswith("[100.0%] env_steps=1,500/1,500 sps=") for line in lines)
    assert any(line.startswith("evaluation at 1,500 env steps: return ") for line in lines)
    assert any(line.startswith("done: 1,500 env steps, 256 gradient steps in ") for line in lines)
    assert f"run directory: {run_dir}" in lines
    assert any(line.startswith("final evaluation return: ") for line in lines)
    assert "step/s" not in process.stderr  # --no-tqdm: no bar on stderr
    assert "%|" not in process.stderr


def test_evaluate_prints_json_metrics_of_the_saved_agent(fitted: Fitted) -> None:
    run_dir, _ = fitted
    process = rltrain("evaluate", run_dir, "--episodes", "3", cwd=run_dir.parent)
    assert process.returncode == 0, process.stderr
    metrics = json.loads(process.stdout)
    assert metrics["checkpoint"].endswith(str(Path("checkpoints") / "last.pt"))
    assert metrics["eval/episodes"] == 3.0
    assert isinstance(metrics["eval/return_mean"], float)
    assert metrics["eval/return_mean"] >= 8  # no CartPole episode is shorter


def test_evaluate_with_the_runs_settings_reproduces_its_final_evaluation(fitted: Fitted) -> None:
    run_dir, _ = fitted
    process = rltrain("evaluate", run_dir, cwd=run_dir.parent)  # 20 episodes, the run's seed
    assert process.returncode == 0, process.stderr
    metrics = json.loads(process.stdout)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert metrics["eval/episodes"] == 20.0
    assert metrics["eval/return_mean"] == summary["final_metrics"]["eval/return_mean"]


def test_evaluate_a_folder_that_is_not_a_run_exits_2(tmp_path: Path) -> None:
    process = rltrain("evaluate", tmp_path, cwd=tmp_path)
    assert process.returncode == 2
    assert "No run configuration" in process.stderr


def test_fit_with_an_unknown_env_id_exits_2_suggesting_the_closest_id(tmp_path: Path) -> None:
    process = rltrain("fit", "--env", "CartPol-v1", "--steps", "100",
                      "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert process.returncode == 2
    assert "rltrain: error: Unknown Gymnasium environment id 'CartPol-v1'" in process.stderr
    assert "Did you mean 'CartPole-v1'" in process.stderr
    assert "Traceback" not in process.stderr
    assert not (tmp_path / "run").exists()


def test_fit_dqn_on_a_continuous_action_env_exits_2_naming_discrete_and_leaves_no_run(
    tmp_path: Path,
) -> None:
    process = rltrain("fit", "--env", "Pendulum-v1", "--steps", "100", cwd=tmp_path)
    assert process.returncode == 2
    assert process.stderr.startswith("rltrain: error: ")
    assert "Discrete" in process.stderr
    assert "Traceback" not in process.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/<date>-... directory


def test_fit_help_shows_the_options_and_examples(tmp_path: Path) -> None:
    process = rltrain("fit", "--help", cwd=tmp_path)
    assert process.returncode == 0
    for option in ("--env", "--steps", "--seed", "--num-envs", "--run-dir", "--target-return",
                   "--no-tqdm", "--no-console", "--no-tensorboard", "--no-jsonl"):
        assert option in process.stdout, option
    assert "examples:" in process.stdout
    assert "rltrain fit --steps 20000 --seed 3 --run-dir runs/cartpole-3" in process.stdout
    assert "rltrain evaluate runs/cartpole-3 --episodes 20" in process.stdout


def test_the_installed_rltrain_script_runs(tmp_path: Path) -> None:
    script = shutil.which("rltrain", path=str(Path(sys.executable).parent))
    assert script is not None, "the rltrain console script is not installed beside python"
    process = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60,
                             check=False, cwd=tmp_path)
    assert process.returncode == 0
    assert "fit" in process.stdout and "evaluate" in process.stdout


def test_an_unknown_command_exits_2_with_usage(tmp_path: Path) -> None:
    process = rltrain("train", cwd=tmp_path)
    assert process.returncode == 2
    assert "usage: rltrain" in process.stderr


def test_fit_resume_last_continues_the_run_to_the_new_step_count(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = rltrain("fit", "--steps", "1200", "--run-dir", run, "--no-tqdm", "--no-early-stop",
                    cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    resumed = rltrain("fit", "--resume", "last", "--run-dir", run, "--steps", "1800",
                      "--no-tqdm", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming at 1,200" in resumed.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 1800


def test_fit_resume_with_another_seed_exits_2_naming_the_flag(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert rltrain("fit", "--steps", "300", "--run-dir", run, "--no-tqdm",
                   cwd=tmp_path).returncode == 0
    resumed = rltrain("fit", "--resume", "last", "--run-dir", run, "--seed", "5",
                      cwd=tmp_path)
    assert resumed.returncode == 2
    assert "--seed 5 differs from the run being resumed" in resumed.stderr

"""The ``rltrain`` console script, run for real in subprocesses."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, rltrain
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from rltrain.cli import main

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

STEPS = 1500  # warm-up 1,000, two training rounds, and the final evaluation (20 episodes)
CONFIG = ROOT / "configs" / "dqn_cartpole.yaml"


Fitted = tuple[Path, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def fitted(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    cwd = tmp_path_factory.mktemp("cli")
    run_dir = cwd / "run"
    process = rltrain("fit", CONFIG, f"trainer.num_steps={STEPS}", f"trainer.run_dir={run_dir}",
                      "trainer.enable_progress_bar=false", "agent.lr=1e-3", cwd=cwd)
    return run_dir, process


def test_fit_exits_0_and_leaves_a_complete_run_directory(fitted: Fitted) -> None:
    run_dir, process = fitted
    assert process.returncode == 0, process.stderr
    for name in ("config.yaml", "model_summary.txt", "metrics.jsonl", "summary.json",
                 "checkpoints/last.pt"):
        assert (run_dir / name).is_file(), name
    assert list(run_dir.glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == STEPS
    assert summary["gradient_steps"] == 256  # rounds of 128 at 1,024 and 1,280
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["event"] == "start" and rows[-1]["event"] == "end"
    assert "q_network" in (run_dir / "model_summary.txt").read_text()


def test_overrides_are_in_the_saved_config_and_the_tensorboard_hparams(fitted: Fitted) -> None:
    run_dir, process = fitted
    assert process.returncode == 0, process.stderr
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.trainer.num_steps == STEPS and saved.agent.lr == 1e-3
    assert saved.trainer.return_threshold == 475.0  # from configs/dqn_cartpole.yaml
    assert saved.env.id == "CartPole-v1" and saved.agent.name == "dqn"
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    hparams = {}
    for raw in accumulator.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(raw)
        if data.HasField("session_start_info"):
            hparams = dict(data.session_start_info.hparams)
    assert hparams["trainer.num_steps"].number_value == STEPS
    assert hparams["agent.lr"].number_value == pytest.approx(1e-3)
    assert hparams["env.id"].string_value == "CartPole-v1"


def test_fit_prints_the_model_summary_console_lines_and_no_progress_bar(fitted: Fitted) -> None:
    run_dir, process = fitted
    lines = process.stdout.splitlines()
    assert lines[0] == "DQN"
    assert any(line.startswith("q_network ") and "67,586" in line for line in lines)
    assert f"training for {STEPS:,} env steps" in lines
    assert any(line.startswith("[100.0%] env_steps=1,500/1,500 sps=") for line in lines)
    assert any(line.startswith("evaluation at 1,500 env steps: return ") for line in lines)
    assert any(line.startswith("done: 1,500 env steps, 256 gradient steps in ") for line in lines)
    assert f"run directory: {run_dir}" in lines
    assert any(line.startswith("final evaluation return: ") for line in lines)
    assert "%|" not in process.stderr  # trainer.enable_progress_bar=false: no bar on stderr


def test_evaluate_prints_json_metrics_of_the_saved_agent(fitted: Fitted) -> None:
    run_dir, _ = fitted
    process = rltrain("evaluate", run_dir, "--episodes", "3", cwd=run_dir.parent)
    assert process.returncode == 0, process.stderr
    metrics = json.loads(process.stdout)
    assert Path(metrics["checkpoint"]).name == "checkpoint-1500.pt"  # last
    assert metrics["eval/episodes"] == 3.0
    assert metrics["eval/return_mean"] >= 8  # no CartPole episode is shorter


@pytest.mark.parametrize("target", ["run_dir", "checkpoint"])
def test_evaluate_reproduces_the_final_evaluation_of_the_run(fitted: Fitted, target: str) -> None:
    run_dir, _ = fitted
    path = run_dir if target == "run_dir" else run_dir / "checkpoints" / "checkpoint-1500.pt"
    process = rltrain("evaluate", path, cwd=run_dir.parent)  # 20 episodes, the run's seed
    assert process.returncode == 0, process.stderr
    metrics = json.loads(process.stdout)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert metrics["eval/episodes"] == 20.0
    assert metrics["eval/return_mean"] == summary["final_metrics"]["eval/return_mean"]


def test_evaluate_a_folder_that_is_not_a_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["evaluate", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("rltrain: error:")


@pytest.mark.parametrize(("args", "message"), [
    (["agent.lrr=1e-3"], "Unknown config key 'agent.lrr'. Did you mean 'agent.lr'?"),
    (["trainer.num_step=100"], "Did you mean 'trainer.num_steps'?"),
    (["agent.lr=fast"], "agent.lr: Value 'fast' of type 'str' could not be converted to Float"),
    (["agent.name=dqm"], "unknown agent 'dqm'. Did you mean 'dqn'?"),
    (["agent.lr=-1"], "lr must be > 0"),
    (["env.id=CartPol-v1"], "Did you mean 'CartPole-v1'"),
    (["agent.lr"], "No config file at agent.lr. An override needs a value: key=value"),
    (["+agent.lr=1"], "Cannot read the override '+agent.lr=1': write key=value"),
    (["ppo_cartpol"], "No config 'ppo_cartpol': no such file here, and no shipped config of "
                      "that name. Did you mean 'ppo_cartpole'?"),
    (["--jobs", "2"], "--jobs 2 runs that many seeds of a group at once: give --seeds"),
    (["trainer.compile=2"], "trainer.compile must be true, false or a string; got 2 (int)"),
])
def test_a_wrong_key_or_value_on_the_command_line_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str,
) -> None:
    # In-process (main() is what the script runs) to keep the suite fast; the subprocess
    # tests above and below cover the script itself.
    status = main(["fit", *args, f"trainer.run_dir={tmp_path / 'run'}"])
    stderr = capsys.readouterr().err
    assert status == 2
    assert stderr.startswith("rltrain: error: ")
    assert message in stderr
    assert not (tmp_path / "run").exists()


def test_a_typo_key_in_a_yaml_config_exits_2_with_a_suggestion(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text("trainer:\n  num_steps: 100\nagent:\n  gama: 0.9\n")
    process = rltrain("fit", config, cwd=tmp_path)
    assert process.returncode == 2
    assert "Unknown config key 'agent.gama'. Did you mean 'agent.gamma'?" in process.stderr
    assert list(tmp_path.iterdir()) == [config]  # no run directory


def test_print_config_shows_the_composed_config_and_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # where a run directory would appear
    other = tmp_path / "wide.yaml"
    other.write_text("agent:\n  hidden_sizes: [64, 64]\n")
    assert main(["fit", "dqn_cartpole", str(other), "agent.lr=5e-4", "--print-config"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.agent.hidden_sizes == [64, 64]  # the second file wins over the first
    assert printed.agent.lr == 5e-4  # the override wins over both
    assert printed.trainer.return_threshold == 475.0  # from dqn_cartpole
    assert list(tmp_path.iterdir()) == [other]


def test_fit_dqn_on_a_continuous_action_env_exits_2_naming_discrete_and_leaves_no_run(
    tmp_path: Path,
) -> None:
    process = rltrain("fit", "env.id=Pendulum-v1", "trainer.num_steps=100", cwd=tmp_path)
    assert process.returncode == 2
    (error,) = process.stderr.splitlines()
    # no DQN preset for Pendulum: DQN's own defaults, said on stdout
    assert "no shipped preset is tuned for Pendulum-v1 with dqn" in process.stdout
    assert error.startswith("rltrain: error: ")
    assert "Discrete" in error
    assert "Traceback" not in process.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/<date>-... directory


def test_list_shows_agents_strategies_and_shipped_configs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:1] == ["dqn"] for line in lines)
    assert any(line.split()[:1] == ["off_policy"] for line in lines)
    assert any(line.split()[:1] == ["dqn_cartpole"] for line in lines)
    shipped = lines[next(i for i, line in enumerate(lines) if line.startswith("shipped")) + 1:]
    assert len(shipped) >= 30
    for line in shipped:  # each a whole phrase: ended, its brackets closed
        said = line.split(maxsplit=1)[1]
        assert said.endswith(".") and said.count("(") == said.count(")"), line
    assert any("DQN on CartPole-v1, RL-Zoo's tuned hyperparameters." in line for line in lines)


def test_fit_help_shows_the_syntax_and_examples(tmp_path: Path) -> None:
    process = rltrain("fit", "--help", cwd=tmp_path)
    assert process.returncode == 0
    for option in ("CONFIG.yaml | key=value", "--print-config", "--resume", "--overwrite"):
        assert option in process.stdout, option
    assert "examples:" in process.stdout
    assert "rltrain fit configs/dqn_cartpole.yaml trainer.num_steps=20000 agent.lr=1e-3" in (
        process.stdout)
    assert "rltrain evaluate runs/cartpole-3 --episodes 20" in process.stdout


def test_the_installed_rltrain_script_runs(tmp_path: Path) -> None:
    script = shutil.which("rltrain", path=str(Path(sys.executable).parent))
    assert script is not None, "the rltrain console script is not installed beside python"
    process = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60,
                             check=False, cwd=tmp_path)
    assert process.returncode == 0
    assert "fit" in process.stdout and "evaluate" in process.stdout and "list" in process.stdout


def test_an_unknown_command_exits_2_with_usage(tmp_path: Path) -> None:
    process = rltrain("train", cwd=tmp_path)
    assert process.returncode == 2
    assert "usage: rltrain" in process.stderr


@pytest.mark.parametrize("how", ["run_dir", "last", "checkpoint"])
def test_fit_resume_continues_the_run_to_the_new_step_count(tmp_path: Path, how: str) -> None:
    run = tmp_path / "run"
    first = rltrain("fit", "trainer.num_steps=1200", f"trainer.run_dir={run}",
                    "trainer.enable_progress_bar=false", "trainer.return_threshold=null",
                    cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    resume = {"run_dir": [str(run)], "last": ["last", f"trainer.run_dir={run}"],
              "checkpoint": [str(run / "checkpoints" / "checkpoint-1200.pt")]}[how]
    resumed = rltrain("fit", "--resume", resume[0], *resume[1:], "trainer.num_steps=1800",
                      "trainer.enable_progress_bar=false", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming at 1,200" in resumed.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 1800
    assert OmegaConf.load(run / "config.yaml").trainer.num_steps == 1800


def test_fit_resume_with_another_learning_rate_exits_2_naming_the_setting(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert rltrain("fit", "trainer.num_steps=300", f"trainer.run_dir={run}",
                   "trainer.enable_progress_bar=false", cwd=tmp_path).returncode == 0
    resumed = rltrain("fit", "--resume", run, "agent.lr=0.1", cwd=tmp_path)
    assert resumed.returncode == 2
    assert "agent/lr: 0.0023 in the checkpoint, 0.1 now" in resumed.stderr


def test_fit_resume_refuses_config_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["fit", "--resume", str(tmp_path), "dqn_cartpole"]) == 2
    assert "pass only key=value overrides" in capsys.readouterr().err


def test_evaluate_finds_the_checkpoints_of_a_run_with_its_own_checkpoint_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    run, checkpoints = tmp_path / "run", tmp_path / "elsewhere"
    assert main(["fit", "trainer.num_steps=300", f"trainer.run_dir={run}",
                 f"trainer.checkpoint_dir={checkpoints}", "trainer.enable_progress_bar=false",
                 "trainer.enable_console=false", "trainer.eval_interval=null"]) == 0
    capsys.readouterr()
    # A folder outside the run, named by its stored config, needs the user's word.
    assert main(["evaluate", str(run), "--episodes", "2"]) == 2
    assert f"confirm the folder (rltrain evaluate: trainer.checkpoint_dir={checkpoints})" in (
        capsys.readouterr().err)
    assert main(["evaluate", str(run), f"trainer.checkpoint_dir={checkpoints}",
                 "--episodes", "2"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert Path(metrics["checkpoint"]).parent == checkpoints
    assert metrics["eval/episodes"] == 2.0


DREAMER_SCALARS = ("world_model/reconstruction", "world_model/reward", "world_model/continue",
                   "world_model/kl", "actor/loss", "actor/entropy", "critic/loss",
                   "imagined_return")


def test_the_shipped_dreamer_config_trains_and_shows_every_loss_part(tmp_path: Path) -> None:
    """``rltrain fit configs/dreamer_pendulum.yaml``, shortened: TensorBoard and the console show
    the world-model loss parts, the actor and critic losses, the entropy and the imagined
    return; ``rltrain evaluate`` reproduces the final evaluation."""
    run_dir = tmp_path / "run"
    config = CONFIG.parent / "dreamer_pendulum.yaml"
    process = rltrain("fit", config, "trainer.num_steps=400", "strategy.warmup_steps=200",
                      "strategy.train_interval=100", "strategy.train_steps=2",
                      "strategy.batch_size=4", "agent.sequence_length=8",
                      "trainer.eval_episodes=2", "trainer.log_interval=1",
                      f"trainer.run_dir={run_dir}", "trainer.enable_progress_bar=false",
                      cwd=tmp_path)
    assert process.returncode == 0, process.stderr
    assert process.stdout.splitlines()[0] == "Dreamer"
    status = [line for line in process.stdout.splitlines() if line.startswith("[100.0%]")]
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    for name in DREAMER_SCALARS:
        assert f" {name}=" in status[-1], name
        events = accumulator.Scalars(f"train/{name}")
        assert [event.step for event in events][-1] == 400, name
        assert all(math.isfinite(event.value) for event in events), name
    assert accumulator.Scalars("eval/return_mean")[-1].step == 400
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.agent.name == "dreamer" and saved.env.id == "Pendulum-v1"
    evaluated = rltrain("evaluate", run_dir, "--episodes", "2", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (json.loads(evaluated.stdout)["eval/return_mean"]
            == summary["final_metrics"]["eval/return_mean"])

"""Several experiment loggers at once, chosen by name from a config or the command line, and
TensorBoard's page: each hyperparameter once, the returns first, no zero speed on a resume."""

from __future__ import annotations

import csv
import functools
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import rltrain.observe.loggers
from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.config.files import ConfigError
from rltrain.config.schema import compose
from rltrain.observe.loggers import describe_logger, logger_items
from rltrain.trainer.build import build

ENV = "CartPole-v1"
QUIET: dict[str, Any] = dict(enable_progress_bar=False, enable_console=False, num_threads=1)
TINY = ["env.id=CartPole-v1", "trainer.num_steps=400", "trainer.eval_interval=200",
        "trainer.eval_episodes=2", "trainer.log_interval=100", "strategy.warmup_steps=100",
        "strategy.train_interval=50", "strategy.train_steps=2", "strategy.batch_size=16",
        "strategy.buffer_size=1000", "agent.hidden_sizes=[16]",
        "trainer.enable_progress_bar=false", "trainer.enable_console=false",
        "trainer.num_threads=1"]


def strategy() -> OffPolicyStrategy:
    return OffPolicyStrategy(OffPolicyConfig(warmup_steps=100, train_interval=50, train_steps=2,
                                             batch_size=16, buffer_size=1000, seed=0))


def fit(run_dir: Path, logger: Any, num_steps: int = 400, ckpt_path: str | None = None,
        **kwargs: Any) -> Trainer:
    trainer = Trainer(num_steps=num_steps, strategy=strategy(), run_dir=run_dir, logger=logger,
                      eval_interval=200, eval_episodes=2, log_interval=100, **QUIET, **kwargs)
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16])), ckpt_path=ckpt_path)
    return trainer


def events(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return accumulator


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_tensorboard_and_csv_at_once(tmp_path: Path) -> None:
    fit(tmp_path, ["tensorboard", "csv"])
    scalars = events(tmp_path)
    returns = scalars.Scalars("rollout/episode_return")
    assert [e.step for e in returns] == [100, 200, 300, 400]
    assert [e.step for e in scalars.Scalars("eval/return_mean")] == [200, 400]
    rows = csv_rows(tmp_path / "metrics.csv")
    training = [row for row in rows if row["rollout/episode_return"]]
    assert [int(row["step"]) for row in training] == [100, 200, 300, 400]
    assert [float(row["rollout/episode_return"]) for row in training] == pytest.approx(
        [e.value for e in returns])
    assert [int(row["step"]) for row in rows if row["eval/return_mean"]] == [200, 400]
    assert "train/loss" in rows[0] and "time/sps" in rows[0]  # one header for every row


def test_loggers_chosen_by_a_config_override_are_saved_by_name(tmp_path: Path) -> None:
    config = compose([], [*TINY, f"trainer.run_dir={tmp_path}",
                          "trainer.logger=[tensorboard,csv]"])
    assert list(config.trainer.logger) == ["tensorboard", "csv"]
    build(config).fit()
    assert (tmp_path / "metrics.csv").is_file() and list(tmp_path.glob("events.out.*"))
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["trainer"]["logger"] == ["tensorboard", "csv"]


def test_the_command_line_chooses_loggers(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from rltrain.cli import main

    assert main(["fit", *TINY, f"trainer.run_dir={tmp_path}", "trainer.logger=csv"]) == 0
    assert (tmp_path / "metrics.csv").is_file()
    assert not list(tmp_path.glob("events.out.*"))  # a list (or one name) is exactly that


def test_the_setting_is_a_list_one_logger_or_a_bool(tmp_path: Path) -> None:
    assert logger_items(False) == [] and logger_items([]) == []
    assert logger_items(True) == ["tensorboard"] and logger_items("csv") == ["csv"]
    assert logger_items(("csv", "tensorboard")) == ["csv", "tensorboard"]
    assert describe_logger(True) == ["tensorboard"] and describe_logger(False) == []
    fit(tmp_path / "none", False)
    assert sorted(p.name for p in (tmp_path / "none").glob("events.*")) == []
    assert not (tmp_path / "none" / "metrics.csv").exists()


@pytest.mark.parametrize("folder", ["tb", Path("tb"), "runs/tb"])
def test_a_folder_is_no_logger_and_the_error_names_summary_writer(folder: Any) -> None:
    with pytest.raises(ValueError, match=r"not a logger name; the names are tensorboard, csv, "
                                         r"wandb, mlflow\. .*SummaryWriter\(log_dir=\.\.\.\)"):
        Trainer(logger=folder)
    with pytest.raises(ConfigError, match="not a logger name"):
        compose([], [f"trainer.logger={folder}"])


@pytest.mark.parametrize(("logger", "message"), [
    (["tensorboard", "csvv"], "logger 'csvv' is not a logger name; the names are "
                              "tensorboard, csv, wandb, mlflow"),
    (["jsonl"], "metrics.jsonl is written by every run"),
    (["csv", "csv"], "logger names csv more than once"),
    (["tensorboard", "runs/tb"], "for another folder, pass SummaryWriter(log_dir=...)"),
])
def test_a_wrong_logger_list_is_refused_naming_it(logger: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Trainer(logger=logger)
    with pytest.raises(ConfigError, match=re.escape(message)):
        compose([], [f"trainer.logger=[{','.join(logger)}]"])


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_logger_whose_package_is_missing_is_refused_naming_it(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rltrain.observe.loggers, "find_spec", lambda package: None)
    expected = f"logger '{name}' needs the {name} package, which is not installed: pip install"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        compose([], [f"trainer.logger=[tensorboard,{name}]"])
    with pytest.raises(ValueError, match=re.escape(expected)):
        Trainer(logger=name)


class FakeWandbRun:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config, self.rows, self.exit_code = config, list[tuple[int, dict[str, float]]](), -1

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, metrics))

    def finish(self, exit_code: int) -> None:
        self.exit_code = exit_code


def test_wandb_by_name_gets_the_config_and_metrics_by_env_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[FakeWandbRun] = []

    def init(**kwargs: Any) -> FakeWandbRun:
        runs.append(FakeWandbRun(kwargs["config"]))
        assert kwargs["dir"] == str(tmp_path)
        return runs[-1]

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setattr(rltrain.observe.loggers, "find_spec", lambda package: object())
    fit(tmp_path, ["wandb"])
    (run,) = runs
    assert run.config["agent.lr"] == pytest.approx(DQNConfig().lr) and "agent/lr" not in run.config
    assert [step for step, row in run.rows if "rollout/episode_return" in row] == [100, 200, 300,
                                                                                    400]
    assert run.exit_code == 0


def test_mlflow_by_name_logs_params_and_metrics_by_env_step_in_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, Any] = {"metrics": []}
    fake = types.SimpleNamespace(
        set_tracking_uri=lambda uri: calls.update(uri=uri),
        set_experiment=lambda name: calls.update(experiment=name),
        start_run=lambda run_name: calls.update(run_name=run_name),
        log_params=lambda params: calls.update(params=params),
        log_metrics=lambda metrics, step: calls["metrics"].append((step, metrics)),
        end_run=lambda status: calls.update(status=status))
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    monkeypatch.setattr(rltrain.observe.loggers, "find_spec", lambda package: object())
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    fit(tmp_path, ["tensorboard", "mlflow"])
    assert calls["uri"] == (tmp_path / "mlruns").resolve().as_uri()
    assert calls["experiment"] == "rltrain" and calls["run_name"] == tmp_path.name
    assert calls["params"]["agent.lr"] == str(DQNConfig().lr)
    assert [step for step, row in calls["metrics"] if "eval/return_mean" in row] == [200, 400]
    assert calls["status"] == "FINISHED"


def test_an_object_logger_is_saved_by_class_and_not_made_again(tmp_path: Path) -> None:
    logger = rltrain.observe.loggers.CSVLogger(tmp_path / "mine.csv")
    fit(tmp_path / "run", [logger, "tensorboard"])
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    first, second = saved["trainer"]["logger"]
    assert "CSVLogger object (rltrain.observe.loggers) given in Python" in first["unrecorded"]
    assert second == "tensorboard"
    assert csv_rows(tmp_path / "mine.csv")
    config = compose([], [*TINY, f"trainer.run_dir={tmp_path / 'again'}"])
    config.trainer.logger = saved["trainer"]["logger"]
    with pytest.warns(UserWarning, match="CSVLogger object .* this run goes on without it"):
        build(config).fit()
    assert list((tmp_path / "again").glob("events.out.*"))


def test_one_object_logger_is_that_logger_alone(tmp_path: Path) -> None:
    logger = rltrain.observe.loggers.CSVLogger(tmp_path / "mine.csv")
    fit(tmp_path / "run", logger)  # as Lightning's logger=obj: no TensorBoard beside it
    assert csv_rows(tmp_path / "mine.csv") and not list((tmp_path / "run").glob("events.out.*"))


def hparams_keys(folder: Path) -> list[str]:
    content = events(folder).PluginTagToContent("hparams")
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    return list(data.session_start_info.hparams)


def test_each_hyperparameter_appears_once_by_its_config_name(tmp_path: Path) -> None:
    fit(tmp_path, True)
    keys = hparams_keys(tmp_path)
    assert "agent.lr" in keys and "strategy.batch_size" in keys and "trainer.dtype" in keys
    assert not [key for key in keys if "/" in key]
    assert len(keys) == len({key.replace("/", ".") for key in keys})


def _is_break(char: str) -> bool:
    return char in "/_" or char.isdigit()


def compare_tag_names(a: str, b: str) -> int:
    """TensorBoard's ``compareTagNames`` (webapp/metrics/views/utils.ts), digit runs as
    numbers."""
    i = j = 0
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if a[i].isdigit() and b[j].isdigit():
            ni, nj = i, j
            while ni < len(a) and (a[ni].isdigit() or a[ni] == "."):
                ni += 1
            while nj < len(b) and (b[nj].isdigit() or b[nj] == "."):
                nj += 1
            x, y = float(a[i:ni].rstrip(".")), float(b[j:nj].rstrip("."))
            if x != y:
                return -1 if x < y else 1
            i, j = ni, nj
            continue
        if _is_break(a[i]) and not _is_break(b[j]):
            return -1
        if _is_break(b[j]) and not _is_break(a[i]):
            return 1
        if not _is_break(a[i]) and a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def tensorboard_groups(tags: list[str]) -> list[str]:
    """The Time Series page's card groups, in its order (the first two open)."""
    groups: list[str] = []
    for tag in sorted(tags, key=functools.cmp_to_key(compare_tag_names)):
        group = tag.split("/", 1)[0]
        if group not in groups:
            groups.append(group)
    return groups


def test_tensorboard_opens_on_the_returns_and_lists_checkpoints_last(tmp_path: Path) -> None:
    fit(tmp_path, True, checkpoint_interval=200)
    tags = events(tmp_path).Tags()["scalars"]
    groups = tensorboard_groups(tags)
    assert groups == ["eval", "rollout", "time", "train", "trainer"]
    assert "trainer/checkpoint_seconds" in tags and "trainer/checkpoint_size_mb" in tags
    assert compare_tag_names("train/loss", "trainer/checkpoint_seconds") == -1


def test_speed_is_not_written_as_zero_when_a_finished_run_resumes_with_nothing_to_do(
        tmp_path: Path) -> None:
    trainer = fit(tmp_path, True)
    trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[16])), ckpt_path="last")
    speeds = events(tmp_path).Scalars("time/sps")
    assert [e.step for e in speeds] == [100, 200, 300, 400]
    assert min(e.value for e in speeds) > 0
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in lines if row["event"] == "metrics"]
    assert [row["env_steps"] for row in rows] == [100, 200, 300, 400]
    assert min(row["time/sps"] for row in rows) > 0


def test_a_resumed_run_with_steps_left_writes_its_speed(tmp_path: Path) -> None:
    fit(tmp_path, ["tensorboard", "csv"], num_steps=300)
    fit(tmp_path, ["tensorboard", "csv"], num_steps=450, ckpt_path="last")
    speeds = events(tmp_path).Scalars("time/sps")
    # Two event files, the second run's from the same process: when both are made within one
    # second, their names order by the writers' counters as text (".10" before ".9").
    assert sorted(e.step for e in speeds) == [100, 200, 300, 400, 450]
    assert min(e.value for e in speeds) > 0
    rows = [row for row in csv_rows(tmp_path / "metrics.csv") if row["time/sps"]]
    assert [int(row["step"]) for row in rows] == [100, 200, 300, 400, 450]

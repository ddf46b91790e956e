"""What each renderer really writes: TensorBoard event files, JSONL rows, console lines, tqdm."""

from __future__ import annotations

import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from conftest import small_strategy
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from rltrain import DQN, DQNConfig, Trainer
from rltrain.observe import EnvStep, EvaluationStart, EventProcessor, Metrics, Start, Subscriber
from rltrain.observe.renderers import ConsoleRenderer, JsonlRenderer, TqdmRenderer
from rltrain.strategies import RLResult

ENV = "CartPole-v1"
NUM_STEPS = 600
LOG_INTERVAL = 100
EVAL_INTERVAL = 200
EVAL_EPISODES = 2


#: The Trainer's evaluation settings in these tests (unless a test says otherwise).
EVALUATION: dict[str, Any] = dict(eval_interval=EVAL_INTERVAL, eval_episodes=EVAL_EPISODES)


@dataclass
class Run:
    run_dir: Path
    result: RLResult
    console: str
    quiet_console: str
    tqdm: str


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One short fit with all four renderers (two console renderers: every step, and hourly)."""
    run_dir = tmp_path_factory.mktemp("renderers") / "run"
    console, quiet, bar = io.StringIO(), io.StringIO(), io.StringIO()
    trainer = Trainer(
        num_steps=NUM_STEPS, strategy=small_strategy(), **EVALUATION, run_dir=run_dir,
        log_interval=LOG_INTERVAL,
        # TensorBoard and metrics.jsonl built in; the console and the bar into buffers.
        enable_progress_bar=False, enable_console=False,
        callbacks=[ConsoleRenderer(file=console, interval_seconds=0),
                   ConsoleRenderer(file=quiet, interval_seconds=3600),
                   TqdmRenderer(file=bar, refresh_seconds=0)],
    )
    result = trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[32, 32])))
    return Run(run_dir, result, console.getvalue(), quiet.getvalue(), bar.getvalue())


def strict_json(line: str) -> dict[str, Any]:
    def reject(constant: str) -> None:
        raise ValueError(f"non-strict JSON constant {constant} in {line!r}")

    row = json.loads(line, parse_constant=reject)
    assert isinstance(row, dict)
    return row


def jsonl_rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [strict_json(line) for line in lines]


def accumulator(run_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


LOG_STEPS = list(range(LOG_INTERVAL, NUM_STEPS + 1, LOG_INTERVAL))
EVAL_STEPS = list(range(EVAL_INTERVAL, NUM_STEPS + 1, EVAL_INTERVAL))


# --- TensorBoard -------------------------------------------------------------------------------


def test_tensorboard_writes_event_files_in_the_run_dir(run: Run) -> None:
    files = list(run.run_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1
    assert files[0].stat().st_size > 0


def test_tensorboard_scalars_are_logged_against_env_steps_every_log_interval(run: Run) -> None:
    acc = accumulator(run.run_dir)
    tags = set(acc.Tags()["scalars"])
    assert {"rollout/episode_return", "train/loss", "train/epsilon", "time/sps",
            "time/env_steps", "eval/return_mean", "eval/best_return"} <= tags
    for tag in ("rollout/episode_return", "time/sps", "time/env_steps"):
        assert sorted({e.step for e in acc.Scalars(tag)}) == LOG_STEPS, tag
    # The write at env step 100 comes before that step's first training round.
    for tag in ("train/loss", "train/epsilon"):
        assert sorted({e.step for e in acc.Scalars(tag)}) == LOG_STEPS[1:], tag
    for scalar in acc.Scalars("time/env_steps"):
        assert scalar.value == scalar.step
    epsilons = [e.value for e in acc.Scalars("train/epsilon")]
    assert all(0.0 < value <= 1.0 for value in epsilons)
    assert epsilons == sorted(epsilons, reverse=True)  # decays with env steps


def test_tensorboard_eval_scalars_are_at_the_evaluation_steps_with_their_returns(run: Run) -> None:
    acc = accumulator(run.run_dir)
    evaluations = [r for r in jsonl_rows(run.run_dir) if r["event"] == "evaluation"]
    scalars = acc.Scalars("eval/return_mean")
    assert [s.step for s in scalars] == EVAL_STEPS
    for scalar, row in zip(scalars, evaluations, strict=True):
        assert scalar.value == pytest.approx(sum(row["returns"]) / len(row["returns"]))
    best = [s.value for s in acc.Scalars("eval/best_return")]
    assert best == sorted(best)
    assert best[-1] == pytest.approx(run.result.summary.best_eval_return)


def test_tensorboard_has_the_hparams_plugin_data_with_strategy_and_agent_settings(
        run: Run) -> None:
    acc = accumulator(run.run_dir)
    content = acc.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(content)
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/experiment"]).experiment
    assert {m.name.tag for m in experiment.metric_infos} == {
        "eval/return_mean", "rollout/episode_return"}
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]).session_start_info
    hparams = start.hparams
    assert hparams["strategy.batch_size"].number_value == 32
    assert hparams["trainer.eval_interval"].number_value == EVAL_INTERVAL
    assert hparams["strategy.vectorization"].string_value == "sync"
    assert hparams["agent.lr"].number_value == pytest.approx(DQNConfig().lr)
    # torch's hparams() stores bools as 0/1
    assert hparams["agent.double_q"].number_value == float(DQNConfig().double_q)
    assert hparams["agent.hidden_sizes"].string_value == "[32, 32]"
    assert not [key for key in hparams if "/" in key]  # each once, by its config name


def test_tensorboard_writes_each_scalar_once_per_env_step(run: Run) -> None:
    # The run ends on a log step: the final write must not repeat it.
    acc = accumulator(run.run_dir)
    for tag in ("time/env_steps", "train/loss"):
        steps = [e.step for e in acc.Scalars(tag)]
        assert len(steps) == len(set(steps)), (tag, steps)


class StopInEvaluation(gym.Wrapper):
    """Requests a stop when an episode ends during the ``nth`` evaluation (1-based)."""

    def __init__(self, env: gym.Env, state: dict[str, Any]) -> None:
        super().__init__(env)
        self.state = state

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.state["evaluations"] == self.state["nth"] and (terminated or truncated):
            self.state["trainer"].interrupter.stop("stop during evaluation")
        return obs, reward, terminated, truncated, info


class CountEvaluations(Subscriber):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        self.state["evaluations"] += 1


def fit_stopped_in_evaluation(run_dir: Path, nth: int) -> RLResult:
    """Evaluations every 300 env steps over 20 episodes (10 sub-envs); the ``nth`` one is cut
    short when its first episode ends, so it has between 1 and 10 of its 20 returns."""
    state: dict[str, Any] = {"evaluations": 0, "nth": nth}
    trainer = Trainer(num_steps=2000, strategy=small_strategy(), eval_interval=300,
                      eval_episodes=20, run_dir=run_dir, log_interval=LOG_INTERVAL,
                      enable_progress_bar=False, enable_console=False,
                      callbacks=[CountEvaluations(state)])
    state["trainer"] = trainer
    return trainer.fit(lambda: StopInEvaluation(gym.make(ENV), state),
                       DQN(DQNConfig(hidden_sizes=[32, 32])))


def test_tensorboard_survives_a_stop_that_cuts_the_first_evaluation_short(tmp_path: Path) -> None:
    result = fit_stopped_in_evaluation(tmp_path, nth=1)
    assert result.summary.stop_reason == "stop during evaluation"
    evaluation = [r for r in jsonl_rows(tmp_path) if r["event"] == "evaluation"]
    assert len(evaluation) == 1 and evaluation[0]["complete"] is False
    assert 1 <= len(evaluation[0]["returns"]) <= 10
    assert "eval/return_mean" not in accumulator(tmp_path).Tags()["scalars"]


def test_tensorboard_writes_no_eval_scalars_for_a_cut_short_evaluation(tmp_path: Path) -> None:
    result = fit_stopped_in_evaluation(tmp_path, nth=2)
    assert result.summary.env_steps == 600
    evaluation = [r for r in jsonl_rows(tmp_path) if r["event"] == "evaluation"]
    assert [(r["env_steps"], r["complete"]) for r in evaluation] == [(300, True), (600, False)]
    assert [s.step for s in accumulator(tmp_path).Scalars("eval/return_mean")] == [300]


# --- JSONL -------------------------------------------------------------------------------------


def test_jsonl_lines_are_strict_json_objects_with_an_event_field(run: Run) -> None:
    rows = jsonl_rows(run.run_dir)
    assert rows
    assert all(row["event"] in {"start", "metrics", "evaluation", "checkpoint", "interrupted",
                                "end"} for row in rows)
    assert rows[0]["event"] == "start"
    assert rows[0]["total_env_steps"] == NUM_STEPS
    assert rows[0]["hparams"]["strategy/batch_size"] == 32


def test_jsonl_metrics_rows_come_every_log_interval_and_at_the_end(run: Run) -> None:
    rows = [r for r in jsonl_rows(run.run_dir) if r["event"] == "metrics"]
    steps = [r["env_steps"] for r in rows]
    assert steps == LOG_STEPS
    assert steps[-1] == run.result.summary.env_steps
    for row in rows:
        assert row["time/env_steps"] == row["env_steps"]
        assert "time/sps" in row
        assert "rollout/episode_return" in row
    assert all("train/loss" in row for row in rows if row["env_steps"] > 100)


def test_jsonl_has_one_metrics_row_per_env_step(run: Run) -> None:
    # The run ends on a log step: the final row must not repeat it.
    steps = [r["env_steps"] for r in jsonl_rows(run.run_dir) if r["event"] == "metrics"]
    assert len(steps) == len(set(steps)), steps


def test_jsonl_and_tensorboard_add_a_final_row_when_the_run_ends_between_log_steps(
    tmp_path: Path,
) -> None:
    trainer = Trainer(num_steps=250, strategy=small_strategy(), eval_interval=None,
                      run_dir=tmp_path, log_interval=LOG_INTERVAL,
                      enable_progress_bar=False, enable_console=False)
    result = trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[32, 32])))
    rows = jsonl_rows(tmp_path)
    metrics_rows = [r for r in rows if r["event"] == "metrics"]
    assert [r["env_steps"] for r in metrics_rows] == [100, 200, 250]
    final_loss = result.summary.final_metrics["train/loss"]
    assert metrics_rows[-1]["train/loss"] == pytest.approx(final_loss)
    assert [r["event"] for r in rows][-2:] == ["metrics", "end"]
    assert not [r for r in rows if r["event"] == "evaluation"]
    acc = accumulator(tmp_path)
    assert [s.step for s in acc.Scalars("time/env_steps")] == [100, 200, 250]
    assert "eval/return_mean" not in acc.Tags()["scalars"]


def test_jsonl_rows_stay_on_multiples_of_log_interval_after_a_resume(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    processor = EventProcessor([JsonlRenderer(path, log_interval=1000)])
    processor.emit(Start(total_env_steps=5000, start_env_steps=1500))
    for env_steps in range(1600, 3100, 100):
        processor.emit(EnvStep(env_steps=env_steps, vector_steps=env_steps))
    processor.close()
    rows = [strict_json(line) for line in path.read_text().splitlines()]
    assert [r["env_steps"] for r in rows if r["event"] == "metrics"] == [2000, 3000]


def test_jsonl_evaluation_rows_carry_the_returns_and_lengths(run: Run) -> None:
    rows = [r for r in jsonl_rows(run.run_dir) if r["event"] == "evaluation"]
    assert [r["env_steps"] for r in rows] == EVAL_STEPS
    for row in rows:
        assert len(row["returns"]) == len(row["lengths"]) == EVAL_EPISODES
        assert all(isinstance(value, float) for value in row["returns"])
        assert all(isinstance(value, int) for value in row["lengths"])
        assert row["eval/return_mean"] == pytest.approx(sum(row["returns"]) / EVAL_EPISODES)
        assert row["complete"] is True
    best = max(r["eval/return_mean"] for r in rows)
    assert best == run.result.summary.best_eval_return


def test_jsonl_last_row_is_end_with_the_summary(run: Run) -> None:
    rows = jsonl_rows(run.run_dir)
    end = rows[-1]
    assert end["event"] == "end"
    assert [r["event"] for r in rows].count("end") == 1
    summary = run.result.summary
    for field in ("env_steps", "gradient_steps", "episodes", "best_eval_return",
                  "threshold_env_steps", "threshold_seconds", "stop_reason"):
        assert end[field] == getattr(summary, field), field
    assert end["wall_time"] == pytest.approx(summary.wall_time)
    assert end["final_metrics"] == pytest.approx(summary.final_metrics)
    stored = json.loads((run.run_dir / "summary.json").read_text())
    assert {k: v for k, v in end.items() if k != "event"} == stored


class StopOnEvaluation(Subscriber):
    def __init__(self, trainer_box: list[Trainer]) -> None:
        self.trainer_box = trainer_box

    def on_evaluation_start(self, event: EvaluationStart, metrics: Metrics) -> None:
        self.trainer_box[0].interrupter.stop("stop in evaluation")


def test_jsonl_writes_non_finite_values_as_null_and_records_the_interruption(
    tmp_path: Path,
) -> None:
    box: list[Trainer] = []
    trainer = Trainer(num_steps=1000, strategy=small_strategy(), **EVALUATION, run_dir=tmp_path,
                      log_interval=LOG_INTERVAL, logger=False, enable_progress_bar=False,
                      enable_console=False, callbacks=[StopOnEvaluation(box)])
    box.append(trainer)
    result = trainer.fit(ENV, DQN(DQNConfig(hidden_sizes=[32, 32])))
    rows = jsonl_rows(tmp_path)  # strict: a NaN would raise
    evaluation = [r for r in rows if r["event"] == "evaluation"]
    assert len(evaluation) == 1
    assert evaluation[0]["returns"] == []
    assert evaluation[0]["complete"] is False
    assert evaluation[0]["eval/return_mean"] is None  # NaN in the event
    assert evaluation[0]["eval/return_std"] is None
    interrupted = [r for r in rows if r["event"] == "interrupted"]
    assert interrupted == [{"event": "interrupted", "env_steps": EVAL_INTERVAL,
                            "reason": "stop in evaluation"}]
    assert rows[-1]["event"] == "end"
    assert rows[-1]["stop_reason"] == "stop in evaluation"
    assert rows[-1]["best_eval_return"] is None
    assert result.summary.env_steps == EVAL_INTERVAL


# --- Console -----------------------------------------------------------------------------------

STATUS = re.compile(r"^\[\s*(\d+\.\d)%\] env_steps=([\d,]+)/([\d,]+) sps=[\d,]+")


def test_console_prints_the_start_line_then_status_lines_with_env_steps_and_sps(run: Run) -> None:
    lines = run.console.splitlines()
    assert lines[0] == f"training for {NUM_STEPS} env steps"
    status = [line for line in lines if STATUS.match(line)]
    # interval_seconds=0: a line at every env step, and one more at the end.
    assert len(status) == NUM_STEPS + 1
    assert all("env_steps=" in line and "sps=" in line for line in status)
    first = STATUS.match(status[0])
    assert first is not None and first.group(2) == "1" and first.group(3) == str(NUM_STEPS)
    last = STATUS.match(status[-1])
    assert last is not None and last.group(1) == "100.0" and last.group(2) == str(NUM_STEPS)
    assert "return=" in status[-1] and "eval=" in status[-1] and "loss=" in status[-1]


def test_console_prints_a_line_per_evaluation_with_its_return(run: Run) -> None:
    evaluations = [r for r in jsonl_rows(run.run_dir) if r["event"] == "evaluation"]
    lines = [line for line in run.console.splitlines() if line.startswith("evaluation at ")]
    assert len(lines) == len(EVAL_STEPS)
    for line, row in zip(lines, evaluations, strict=True):
        assert line.startswith(f"evaluation at {row['env_steps']} env steps: return "
                               f"{row['eval/return_mean']:.2f} ± {row['eval/return_std']:.2f}")
        assert line.endswith(f"over {EVAL_EPISODES} episodes")


def test_console_ends_with_a_done_line_matching_the_summary(run: Run) -> None:
    summary = run.result.summary
    last = run.console.splitlines()[-1]
    assert last.startswith(f"done: {summary.env_steps} env steps, "
                           f"{summary.gradient_steps} gradient steps in ")
    assert last.endswith(f"best evaluation return {summary.best_eval_return:.2f}")


def test_console_with_a_long_interval_prints_only_start_evaluations_saves_and_the_end(
        run: Run) -> None:
    lines = run.quiet_console.splitlines()
    saves = [line for line in lines if line.startswith("saved ")]
    assert saves[-1].split()[1].endswith("checkpoint-600.pt")
    assert all(re.fullmatch(r"saved \S+\.pt \(\d+\.\d MB in \d+\.\d\d s\)", s) for s in saves)
    lines = [line for line in lines if not line.startswith("saved ")]
    assert lines[0].startswith("training for ")
    assert sum(1 for line in lines if line.startswith("evaluation at ")) == len(EVAL_STEPS)
    status = [line for line in lines if STATUS.match(line)]
    assert len(status) == 1  # only the final status line
    assert lines[-1].startswith("done: ")
    assert len(lines) == 1 + len(EVAL_STEPS) + 2


# --- tqdm --------------------------------------------------------------------------------------


def test_tqdm_bar_reaches_the_total_and_shows_sps(run: Run) -> None:
    frames = [f for f in re.split(r"[\r\n]", run.tqdm) if f.strip()]
    assert len(frames) > 10  # refresh_seconds=0 redraws as the run goes
    final = frames[-1]
    assert "100%" in final
    assert f"{NUM_STEPS}/{NUM_STEPS}" in final
    assert re.search(r"sps=\d+", final)
    assert "return=" in final and "eval=" in final
    # The bar started at 0 and moved forward.
    counts = [int(m.group(1)) for f in frames if (m := re.search(r"\| *(\d+)/600 ", f))]
    assert counts[0] < NUM_STEPS
    assert counts == sorted(counts)


def slow_to_make() -> gym.Env[Any, Any]:
    """CartPole that takes a second to make (a simulator that loads, say)."""
    time.sleep(1.0)
    return gym.make(ENV)


def remaining_seconds(frame: str) -> float | None:
    """The ETA a tqdm frame shows (``[elapsed<remaining, rate...]``); None for ``?``."""
    match = re.search(r"\[[\d:]+<([\d:]+|\?)[,\]]", frame)
    if match is None or match.group(1) == "?":
        return None
    seconds = 0.0
    for part in match.group(1).split(":"):
        seconds = 60 * seconds + int(part)
    return seconds


@pytest.mark.slow
def test_tqdm_eta_does_not_count_the_setup_as_the_first_step(tmp_path: Path) -> None:
    # The training envs take a second to make after the bar appears. Counted as the first
    # env step's time, that second made the first ETA 2,000 x 1 s (33 min) for a run of 2 s.
    bar = io.StringIO()
    trainer = Trainer(num_steps=2_000, strategy=small_strategy(), eval_interval=None,
                      run_dir=tmp_path, logger=False, enable_progress_bar=False,
                      enable_console=False, enable_metrics_file=False,
                      callbacks=[TqdmRenderer(file=bar, refresh_seconds=0)])
    trainer.fit(slow_to_make, DQN(DQNConfig(hidden_sizes=[16])))
    frames = [f for f in re.split(r"[\r\n]", bar.getvalue()) if f.strip()]
    etas = [eta for f in frames if (eta := remaining_seconds(f)) is not None]
    assert etas, frames[:5]
    assert max(etas) < 120, [f for f in frames if (remaining_seconds(f) or 0) >= 120][:3]

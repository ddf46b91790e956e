"""``rltrain tune``: search spaces checked before any trial, real ``rltrain fit`` trials in a
real SQLite study, pruning, a study killed with SIGKILL (its trials die with it) and continued
with each trial resuming its own run directory from its checkpoint, and the best config that
``rltrain fit`` takes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import rltrain

optuna = pytest.importorskip("optuna")

from rltrain.cli.tune_record import Setup  # noqa: E402
from rltrain.cli.tune_space import parse_space  # noqa: E402
from rltrain.config.schema import compose, to_container  # noqa: E402

QUICK = ["ppo_cartpole", "trainer.num_steps=1024", "trainer.eval_interval=256",
         "trainer.eval_episodes=1", "trainer.logger=false", "strategy.num_envs=4",
         "strategy.n_steps=16", "strategy.batch_size=64", "agent.hidden_sizes=[16]"]


def study(path: Path) -> object:
    return optuna.load_study(study_name="rltrain", storage=f"sqlite:///{path / 'study.db'}")


def states(path: Path) -> list[str]:
    return [t.state.name for t in study(path).trials]  # type: ignore[attr-defined]


def runs(trials: list[object]) -> dict[int, str]:
    """Each run's (``trial-NNNN``'s) state: its latest attempt's, an attempt queued again after
    its worker stopped naming the first in Optuna's ``failed_trial``."""
    latest: dict[int, str] = {}
    for t in sorted(trials, key=lambda t: t.number):  # type: ignore[attr-defined]
        latest[t.system_attrs.get("failed_trial", t.number)] = t.state.name  # type: ignore
    return latest


@pytest.mark.parametrize(("spec", "message"), [
    ({"agent.lr": {"low": 1e-3}}, "agent.lr needs numbers low < high"),
    ({"agent.lr": {"low": 0.0, "high": 1.0, "log": True}}, "a log scale needs low > 0"),
    ({"agent.lr": {"choices": []}}, "agent.lr's choices must be a non-empty list"),
    ({"agent.lr": {"choices": [1e-3], "low": 1}}, "agent.lr's choices must be"),
    ({"agent.lr": 3e-4}, "agent.lr must be {low"),
    ({"agent.learning_rate": {"low": 1e-4, "high": 1e-3}}, "agent.learning_rate is not a config"),
    ({"agent.gamma": {"choices": [0.99, 1.5]}}, "agent.gamma=1.5 does not make a valid config"),
    ({"strategy.update_epochs": {"choices": ["many"]}}, "strategy.update_epochs='many'"),
])
def test_bad_search_spaces_are_refused_naming_the_key(spec: dict[str, object],
                                                      message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(")):
        setup = Setup(to_container(compose(["ppo_cartpole"])), dict(spec))
        parse_space(spec, "space.yaml", setup.compose)


@pytest.mark.slow
def test_a_study_runs_prunes_and_writes_the_best_config(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"  # a learning rate of 1e-12 never learns
    space.write_text("agent.lr: {choices: [1.0e-12, 0.003]}\n"
                     "agent.gamma: {low: 0.95, high: 0.99}\n")
    done = rltrain("tune", *QUICK, "trainer.num_steps=2048", "--space", space, "--trials", "4",
                   "--jobs", "1", "--prune-after", "1", "--study", "study", cwd=tmp_path,
                   timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    path = tmp_path / "study"
    trials = study(path).trials  # type: ignore[attr-defined]
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned
    for trial in pruned:  # Optuna's median rule: its best evaluation so far under the median
        step = max(trial.intermediate_values)  # of earlier completed trials' at that step
        earlier = [t.intermediate_values[step] for t in trials if t.number < trial.number
                   and t.state.name == "COMPLETE" and step in t.intermediate_values]
        best_so_far = max(trial.intermediate_values.values())
        assert step > 1 and earlier and best_so_far < float(np.median(earlier))
        summary = json.loads((path / f"trial-{trial.number:04d}" / "summary.json").read_text())
        assert summary["stop_reason"].endswith("received") and summary["env_steps"] < 2048
    best = study(path).best_trial  # type: ignore[attr-defined]
    assert best.state.name == "COMPLETE" and f"best: trial {best.number}" in done.stdout
    config = compose([str(path / "best.yaml")])
    assert config.agent.gamma == pytest.approx(best.params["agent.gamma"])
    assert config.trainer.run_dir is None and config.trainer.num_steps == 2048
    again = rltrain("tune", "--study", "study", cwd=tmp_path)  # finished: nothing runs
    assert again.returncode == 0 and "started" not in again.stdout
    assert len(states(path)) == 4
    other = rltrain("tune", "dqn_cartpole", "--study", "study", cwd=tmp_path)
    assert other.returncode == 2 and "a study of other settings" in other.stderr


@pytest.mark.slow
def test_a_killed_study_resumes_its_trials_from_their_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "study"
    steps = ["trainer.num_steps=2048", "trainer.checkpoint_interval=256",
             "trainer.return_threshold=null"]
    tune = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "tune", *QUICK, *steps, "--trials", "3",
         "--jobs", "2", "--no-pruning", "--heartbeat", "1", "--study", str(path)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while not all((path / f"trial-000{n}" / "checkpoints" / "manifest.json").exists()
                  for n in (0, 1)):
        assert time.monotonic() < deadline and tune.poll() is None
        time.sleep(0.2)
    tune.kill()  # SIGKILL to tune alone: its trials die with it
    tune.wait()
    assert states(path) == ["RUNNING", "RUNNING"]
    done = rltrain("tune", "--study", "study", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trial 0: resumed" in done.stdout and "trial 1: resumed" in done.stdout
    assert re.search(r"trial \d+: started", done.stdout)  # the third trial
    done_runs = runs(study(path).trials)
    assert len(done_runs) == 3 and {0, 1} < set(done_runs)
    assert set(done_runs.values()) == {"COMPLETE"}
    for n in (0, 1):  # one run each, continued: two segments, not two runs from scratch
        rows = (path / f"trial-000{n}" / "metrics.jsonl").read_text().splitlines()
        starts = [json.loads(r) for r in rows if '"event": "start"' in r]
        assert len(starts) == 2 and starts[1]["env_steps"] > 0
        assert json.loads((path / f"trial-000{n}" / "summary.json").read_text())[
            "env_steps"] == 2048


def test_the_space_beside_the_config_is_found_before_the_shipped_one(tmp_path: Path) -> None:
    from rltrain.cli.tune_space import SHIPPED_SPACES, space_path

    config = tmp_path / "mine.yaml"
    config.write_text("agent:\n  name: ppo\n")
    assert space_path([str(config)], "ppo", None) == SHIPPED_SPACES / "ppo.yaml"
    (tmp_path / "space.yaml").write_text("agent.lr: {low: 1.0e-4, high: 1.0e-3}\n")
    assert space_path([str(config)], "ppo", None) == tmp_path / "space.yaml"
    (tmp_path / "mine.space.yaml").write_text("agent.lr: {low: 1.0e-4, high: 1.0e-3}\n")
    assert space_path([str(config)], "ppo", None) == tmp_path / "mine.space.yaml"
    assert space_path([str(config)], "ppo", tmp_path / "x.yaml") == tmp_path / "x.yaml"
    with pytest.raises(ValueError, match=r"No search space for agent 'pqn'.*pass --space FILE"):
        space_path(["pqn_cartpole"], "pqn", None)


def test_the_auc_objective_is_the_mean_of_the_evaluations_one_per_interval(
        tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from rltrain.cli.tune_worker import objective

    # 8 sub-envs: evaluations land at 1,504, 3,000 and 4,504 env steps of an interval of 1,500
    rows = [{"event": "start", "env_steps": 0}]
    rows += [{"event": "evaluation", "env_steps": s, "eval/return_mean": r, "complete": True}
             for s, r in ((1504, 10.0), (3000, 20.0), (4504, 60.0))]
    rows += [{"event": "evaluation", "env_steps": 4504, "eval/return_mean": 500.0,
              "complete": False}, {"event": "end", "env_steps": 4504, "stop_reason": None}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = OmegaConf.create({"trainer": {"num_steps": 4504, "eval_interval": 1500}})
    assert objective(tmp_path, "auc", config) == pytest.approx(30.0)  # not 27.5: no double 3,000
    assert objective(tmp_path, "final", config) == 60.0  # not the cut-short 500
    assert objective(tmp_path, "best", config) == 60.0
    early = OmegaConf.create({"trainer": {"num_steps": 9000, "eval_interval": 1500}})
    assert objective(tmp_path, "auc", early) == pytest.approx((10 + 20 + 60 * 4) / 6)
    # a trial's process killed after it finished keeps its result: its run says it finished
    from rltrain.cli.tune_worker import finished

    assert not finished(tmp_path)  # no summary.json yet
    (tmp_path / "summary.json").write_text(json.dumps({"env_steps": 4504, "stop_reason": None}))
    assert finished(tmp_path)
    with (tmp_path / "metrics.jsonl").open("a") as file:  # resumed, then killed
        file.write(json.dumps({"event": "start", "env_steps": 4504}) + "\n")
    assert not finished(tmp_path)


def holder_pid(run_dir: Path) -> int:
    """The PID of the process writing ``run_dir`` (its lock file's record)."""
    return int(json.loads((run_dir / ".rltrain.lock").read_text().strip())["pid"])


@pytest.mark.slow
def test_a_trial_whose_own_process_is_killed_resumes_from_its_checkpoint(
        tmp_path: Path) -> None:
    import os
    import signal

    path = tmp_path / "study"
    steps = ["trainer.num_steps=2048", "trainer.checkpoint_interval=256",
             "trainer.return_threshold=null"]
    tune = subprocess.Popen(
        [sys.executable, "-m", "rltrain.cli", "tune", *QUICK, *steps, "--trials", "1",
         "--no-pruning", "--study", str(path)], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = path / "trial-0000"
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "manifest.json").exists():
        assert time.monotonic() < deadline and tune.poll() is None
        time.sleep(0.1)
    os.kill(holder_pid(run), signal.SIGKILL)  # the trial's process alone, as the OOM killer
    output, _ = tune.communicate(timeout=300)
    assert tune.returncode == 0, output
    assert "trial 0: its process was killed (SIGKILL); it resumes" in output
    assert "trial 0: resumed" in output
    assert states(path) == ["COMPLETE"]
    rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    starts = [r for r in rows if r["event"] == "start"]
    assert len(starts) == 2 and starts[1]["env_steps"] > 0  # resumed, not run again
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 2048


@pytest.mark.slow
def test_a_study_an_earlier_rltrain_left_running_is_taken_over(tmp_path: Path) -> None:
    """A trial an earlier rltrain left RUNNING (it recorded no heartbeats, and held
    ``.tune.lock`` while it tuned) is queued again once seen unmarked for a heartbeat, not
    waited on forever; while that lock is held, it is left alone (for several heartbeats)."""
    import fcntl

    path = tmp_path / "study"
    path.mkdir()
    config = compose(QUICK[:1], QUICK[1:])
    space = {"agent.lr": {"low": 1e-4, "high": 1e-3, "log": True}}
    setup = Setup(to_container(config), space, trials=1, heartbeat=2)
    (path / "tune.json").write_text(json.dumps({"format": 2, **setup.__dict__}))
    left = optuna.create_study(study_name="rltrain", storage=f"sqlite:///{path / 'study.db'}",
                               direction="maximize")
    trial = left.ask()
    trial.suggest_float("agent.lr", 1e-4, 1e-3, log=True)  # RUNNING, no heartbeat ever
    lock = (path / ".tune.lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # the earlier tune still runs: its trial is its own
    waiting = subprocess.Popen([sys.executable, "-m", "rltrain.cli", "tune", "--study",
                                str(path)], cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    time.sleep(8)
    assert waiting.poll() is None and states(path) == ["RUNNING"]
    waiting.kill()
    waiting.wait()
    lock.close()  # that tune ended
    done = rltrain("tune", "--study", "study", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trial 0: started" in done.stdout  # its run had no checkpoint: it starts
    assert runs(study(path).trials) == {0: "COMPLETE"}


@pytest.mark.slow
def test_a_refused_tune_command_writes_nothing(tmp_path: Path) -> None:
    """A bad search space is refused before the study folder exists: no ``tune.json`` to
    poison the study, so the same command, corrected, starts it."""
    space = tmp_path / "space.yaml"
    space.write_text("agent.learning_rate: {low: 1.0e-4, high: 1.0e-3}\n")
    refused = rltrain("tune", *QUICK, "--space", space, "--study", "study", cwd=tmp_path)
    assert refused.returncode == 2 and "agent.learning_rate is not a config" in refused.stderr
    assert not (tmp_path / "study").exists()
    slurm = rltrain("tune", *QUICK, "--study", "study", "--launcher", "slurm", cwd=tmp_path)
    assert slurm.returncode == 2 and "need a database they share" in slurm.stderr
    assert not (tmp_path / "study").exists()

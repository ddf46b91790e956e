"""The records beside the runs are untrusted: a seed group's ``seeds.json``, a study's
``tune.json`` and ``study.db``. ``rltrain fit --resume PARENT`` and a continued ``rltrain tune``
replay no command line from them: each run they start reads the recorded config as a stored
one, so what is planted there runs no code, resolves no environment variable and writes
nothing outside the group or study; a record rltrain did not write is refused in one line
before anything is written.

Each case copies a real group (or study), plants something, and runs the real command, from
the folder that holds ``runs/`` (where planted modules lie too)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostile import SECRET, plant, rltrain, secret_anywhere, snapshot

#: Scenario tests of whole groups and studies (subprocesses, real files).
pytestmark = pytest.mark.slow

optuna = pytest.importorskip("optuna")

QUICK = ["dqn_cartpole", "trainer.num_steps=300", "strategy.warmup_steps=100",
         "strategy.train_steps=4", "agent.hidden_sizes=[16]", "trainer.eval_interval=150",
         "trainer.eval_episodes=2", "trainer.logger=false", "trainer.enable_console=false"]
SECRET_ENV = {"RLTRAIN_SECRET": SECRET}


@dataclass
class Scene:
    """A copy of a real group or study under ``work`` (the current directory of the commands),
    planted modules named ``evil`` in ``work`` and in the copy, and a folder outside both."""

    work: Path
    folder: Path
    mark: Path
    outside: Path

    def record(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        path = self.folder / name
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    def assert_harmless(self, before: dict[str, tuple[int, int]],
                        result: Any) -> None:
        """No planted code ran, nothing outside the folder changed, no secret anywhere."""
        output = result.stdout + result.stderr
        assert sorted(p.name for p in self.mark.iterdir()) == [], output
        assert snapshot(self.work, self.folder) == before, output
        assert list(self.outside.iterdir()) == []
        assert SECRET not in output
        assert secret_anywhere(self.work) == []
        assert "Traceback" not in output and "internal error" not in output, output


def scene_of(original: Path, tmp_path: Path, name: str) -> Scene:
    work = tmp_path / "work"
    folder = work / original.parent.name / name
    shutil.copytree(original, folder, symlinks=True)
    scene = Scene(work, folder, tmp_path / "marks", tmp_path / "outside")
    scene.mark.mkdir()
    scene.outside.mkdir()
    plant(work, scene.mark, "evil", "wandb")
    plant(folder, scene.mark, "evil")
    return scene


# A seed group -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_group(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real group of two seeds, both finished."""
    work = tmp_path_factory.mktemp("group")
    done = rltrain("fit", *QUICK, "trainer.run_dir=runs/group", "--seeds", "0-1", "--jobs", "2",
                   cwd=work, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "runs" / "group"


@pytest.fixture
def group(finished_group: Path, tmp_path: Path) -> Scene:
    """The group with seed 1 never started: resuming the group starts it from the record."""
    scene = scene_of(finished_group, tmp_path, "group")
    shutil.rmtree(scene.folder / "seed-1")
    (scene.folder / "seed-1.log").unlink()
    return scene


def local_import(config: dict[str, Any]) -> None:
    config["env"]["imports"] = ["evil"]  # evil.py in the current directory


def group_namespace(config: dict[str, Any]) -> None:
    config["env"]["id"] = "runs.group.evil:Foo-v0"  # evil.py inside the group's folder


def checkpoints_outside(config: dict[str, Any], outside: Path) -> None:
    config["trainer"]["checkpoint_dir"] = str(outside)


def secret_id(config: dict[str, Any]) -> None:
    config["env"]["id"] = "${oc.env:RLTRAIN_SECRET}"


def local_logger(config: dict[str, Any]) -> None:
    config["trainer"]["logger"] = ["wandb"]  # wandb.py in the current directory


CONFIG_CASES = [(local_import, "the stored config would import 'evil'"),
                (group_namespace, "the stored config would import 'runs'"),
                (checkpoints_outside, "outside the run directory"),
                (secret_id, "Unknown Gymnasium environment id"),
                (local_logger, "wandb")]


@pytest.mark.parametrize(("change", "must"), CONFIG_CASES,
                         ids=[change.__name__ for change, _ in CONFIG_CASES])
def test_a_planted_group_config_is_a_stored_config(group: Scene, change: Callable[..., None],
                                                   must: str) -> None:
    extra = (group.outside,) if change is checkpoints_outside else ()
    group.record("seeds.json", lambda record: change(record["config"], *extra))
    before = snapshot(group.work, group.folder)
    result = rltrain("fit", "--resume", "runs/group", cwd=group.work, env=SECRET_ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    if change is local_logger:  # refused with the group's config, before any seed starts
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "the group's config is refused" in lines[0], lines
        assert "pip install wandb" in lines[0]
        group.assert_harmless(before, result)
        return
    assert "seed 0: finished before, left as it is" in result.stdout
    failed = [line for line in result.stdout.splitlines() if line.startswith("seed 1: failed")]
    assert len(failed) == 1 and must in failed[0], result.stdout
    errors = [line for line in (group.folder / "seed-1.log").read_text().splitlines()
              if line.startswith("rltrain: error")]
    assert len(errors) == 1 and must in errors[0], errors
    group.assert_harmless(before, result)


def format_one(record: dict[str, Any]) -> None:
    record.clear()
    record.update(format=1, args=["dqn_cartpole", "--import=evil", "evil.yaml"], seeds=[1],
                  jobs=1, passthrough=["--import=evil"])


def passthrough(record: dict[str, Any]) -> None:
    record["passthrough"] = ["--import=evil", "--trust=evil"]


def huge_seed(record: dict[str, Any]) -> None:
    record["seeds"] = [0, int("9" * 5000)]


def not_a_group(record: dict[str, Any]) -> None:
    record["config"] = "evil.yaml"


RECORD_CASES = [(format_one, "its format is not 2 (it was written by an earlier rltrain"),
                (passthrough, "it holds fields rltrain never writes (passthrough)"),
                (huge_seed, "an integer of 5,000 digits"),
                (not_a_group, "'config' must be a mapping")]


@pytest.mark.parametrize(("change", "must"), RECORD_CASES,
                         ids=[change.__name__ for change, _ in RECORD_CASES])
def test_a_group_record_rltrain_did_not_write_is_refused_before_anything_runs(
        group: Scene, change: Callable[[dict[str, Any]], None], must: str) -> None:
    (group.work / "evil.yaml").write_text("env:\n  imports: [evil]\n")
    if change is huge_seed:  # json.dumps would refuse to write it
        text = json.loads((group.folder / "seeds.json").read_text())
        text["seeds"] = "HUGE"
        (group.folder / "seeds.json").write_text(
            json.dumps(text).replace('"HUGE"', "[0, " + "9" * 5000 + "]"))
    else:
        group.record("seeds.json", change)
    before = snapshot(group.work, group.work / "nothing")
    result = rltrain("fit", "--resume", "runs/group", cwd=group.work, env=SECRET_ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not a group of seeds rltrain wrote" in lines[0], lines
    assert must in lines[0]
    assert snapshot(group.work, group.work / "nothing") == before
    assert sorted(p.name for p in group.mark.iterdir()) == []


def test_a_group_resumes_its_unstarted_seed_from_its_record(group: Scene) -> None:
    result = rltrain("fit", "--resume", "runs/group", cwd=group.work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seed 1: started" in result.stdout and "2 of 2 finished" in result.stdout
    summary = json.loads((group.folder / "seed-1" / "summary.json").read_text())
    assert summary["env_steps"] == 300
    seed_config = (group.folder / "seed-1" / "config.yaml").read_text()
    assert "seed: 1" in seed_config
    assert sorted(p.name for p in group.mark.iterdir()) == []


# A study ------------------------------------------------------------------------------------

STUDY = ["ppo_cartpole", "trainer.num_steps=256", "trainer.eval_interval=128",
         "trainer.eval_episodes=1", "trainer.logger=false", "strategy.num_envs=2",
         "strategy.n_steps=32", "strategy.batch_size=32", "agent.hidden_sizes=[16]",
         "trainer.enable_console=false"]


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real study of two completed trials."""
    work = tmp_path_factory.mktemp("study")
    done = rltrain("tune", *STUDY, "--trials", "2", "--jobs", "2", "--study", "studies/s",
                   "--no-pruning", cwd=work, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return work / "studies" / "s"


@pytest.fixture
def study(finished_study: Path, tmp_path: Path) -> Scene:
    return scene_of(finished_study, tmp_path, "s")


def add_running_trial(folder: Path, params: dict[str, Any]) -> None:
    """A trial the study's database says was running, with ``params``."""
    from optuna.distributions import CategoricalDistribution

    stored = optuna.load_study(study_name="rltrain", storage=f"sqlite:///{folder / 'study.db'}")
    stored.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING, params=params,
        distributions={k: CategoricalDistribution([v]) for k, v in params.items()}))


def trial_lines(stdout: str, number: int) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(f"trial {number}:")]


STUDY_CONFIG_CASES = [(local_import, "the stored config would import 'evil'"),
                      (checkpoints_outside, "outside the run directory"),
                      (secret_id, "Unknown Gymnasium environment id")]


@pytest.mark.parametrize(("change", "must"), STUDY_CONFIG_CASES,
                         ids=[change.__name__ for change, _ in STUDY_CONFIG_CASES])
def test_a_planted_study_config_is_a_stored_config(study: Scene, change: Callable[..., None],
                                                   must: str) -> None:
    extra = (study.outside,) if change is checkpoints_outside else ()
    study.record("tune.json", lambda record: change(record["config"], *extra))
    before = snapshot(study.work, study.folder)
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work,
                     env=SECRET_ENV, timeout=300)
    failed = trial_lines(result.stdout, 2)
    assert any("failed (exit 2)" in line and must in line for line in failed), result.stdout
    study.assert_harmless(before, result)


def test_trial_settings_from_the_database_are_checked_against_the_space(study: Scene) -> None:
    add_running_trial(study.folder, {"env.id": "studies.s.evil:Foo-v0"})
    before = snapshot(study.work, study.folder)
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work,
                     env=SECRET_ENV, timeout=300)
    refused = trial_lines(result.stdout, 2)
    assert refused and "invalid settings: its settings ['env.id'] are not the search space's" \
        in refused[0], result.stdout
    assert not (study.folder / "trial-0002").exists()
    study.assert_harmless(before, result)


def test_a_planted_space_gets_no_further_than_a_stored_config(study: Scene) -> None:
    study.record("tune.json", lambda record: record.update(
        space={"env.id": {"choices": ["evil:Foo-v0"]}}))
    add_running_trial(study.folder, {"env.id": "evil:Foo-v0"})
    before = snapshot(study.work, study.folder)
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work,
                     env=SECRET_ENV, timeout=300)
    failed = trial_lines(result.stdout, 2)
    assert any("the stored config would import 'evil'" in line for line in failed), \
        result.stdout
    study.assert_harmless(before, result)


def test_a_study_record_rltrain_did_not_write_is_refused_and_nothing_is_written(
        study: Scene) -> None:
    study.record("tune.json", lambda record: record.update(
        format=1, files=["evil.yaml"], overrides=[], passthrough=["--import=evil"]))
    before = snapshot(study.work, study.work / "nothing")
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work,
                     env=SECRET_ENV)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is not a study rltrain wrote: its format is not 2" in lines[0]
    assert snapshot(study.work, study.work / "nothing") == before
    assert sorted(p.name for p in study.mark.iterdir()) == []


def test_a_planted_finished_trial_cannot_write_a_best_yaml_that_runs_code(
        study: Scene) -> None:
    """A finished-looking trial the study never ran, and a study config naming a function:
    best.yaml (which the user runs as their own file) is checked as a stored config first."""
    study.record("tune.json", lambda record: record["config"]["agent"].update(
        _target_="subprocess.run", args=["touch", str(study.mark / "ran")]))
    add_running_trial(study.folder, {})
    planted = study.folder / "trial-0002"
    shutil.copytree(study.folder / "trial-0000", planted)
    rows = [{"event": "start", "env_steps": 0},
            {"event": "evaluation", "env_steps": 256, "eval/return_mean": 1000.0,
             "complete": True}, {"event": "end", "env_steps": 256, "stop_reason": None}]
    (planted / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (planted / "summary.json").write_text(json.dumps({"env_steps": 256, "stop_reason": None}))
    best_before = (study.folder / "best.yaml").read_text()
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work,
                     env=SECRET_ENV, timeout=300)
    assert "trial 2: its config is refused as a stored config" in result.stdout, result.stdout
    assert (study.folder / "best.yaml").read_text() == best_before
    assert sorted(p.name for p in study.mark.iterdir()) == []


def test_a_foreign_database_in_a_study_is_refused_in_one_line(study: Scene) -> None:
    (study.folder / "study.db").unlink()
    (study.folder / "study.db").write_bytes(b"not a database " * 100)
    result = rltrain("tune", "--study", "studies/s", "--trials", "3", cwd=study.work)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "study.db is not a study database rltrain can read" in lines[0]


def test_a_link_in_a_group_is_never_followed_and_seeds_keep_their_own_runs(
        group: Scene) -> None:
    target = group.outside / "elsewhere"
    (group.folder / "seed-1").symlink_to(target, target_is_directory=True)
    result = rltrain("fit", "--resume", "runs/group", cwd=group.work)
    assert result.returncode == 2 and "seed 1: failed" in result.stdout, result.stdout
    assert "symbolic link" in result.stdout and not target.exists()
    assert list(group.outside.iterdir()) == []
    refused = rltrain("fit", "--resume", "runs/group", "strategy.seed=3", cwd=group.work)
    assert refused.returncode == 2 and "each seed in its own run directory" in refused.stderr


def test_from_inside_the_group_a_planted_module_beside_its_record_never_runs(
        group: Scene) -> None:
    group.record("seeds.json", lambda record: local_import(record["config"]))
    before = snapshot(group.work, group.folder)
    result = rltrain("fit", "--resume", ".", cwd=group.folder, env=SECRET_ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("seed 1: failed")]
    assert len(failed) == 1 and "the stored config would import 'evil'" in failed[0]
    group.assert_harmless(before, result)

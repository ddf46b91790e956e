"""What lies in the current directory, and what is installed, is reached only by the command
line's own names: a module planted beside the runs (``wandb.py``), a planted
``*.dist-info/entry_points.txt``, and an installed module whose import has effects are never
imported for a name read from a file; and metrics files with numbers no run writes are refused
in one line naming the file and line.

Every reader runs as a real subprocess, from the folder holding ``runs/`` and from inside the
run, on a copy of a real run."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile import SECRET, change_stored, load_policy, plant, rltrain, snapshot, victim

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, short DQN run on CartPole with two evaluations."""
    return victim(tmp_path_factory.mktemp("original"), "trainer.logger=false")


@pytest.fixture
def work(original: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(original, work / "runs" / "victim", symlinks=True)
    (tmp_path / "marks").mkdir()
    return work


def marks(work: Path) -> list[str]:
    return sorted(p.name for p in (work.parent / "marks").iterdir())


def plant_plugin(folder: Path, mark: Path) -> None:
    """An ``evil_plugin`` module and the metadata of a distribution declaring it as an
    rltrain plugin, in ``folder``."""
    plant(folder, mark, "evil_plugin")
    info = folder / "evil_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rltrain.plugins]\nevil = evil_plugin\n"
                                           "[gymnasium.envs]\nevil = evil_plugin:Env\n")


def readers(work: Path, cwd: Path, path: str, env: dict[str, str] | None = None,
            *extra: str) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each command that rebuilds a run, on ``path`` from ``cwd``."""
    env = {"RLTRAIN_SECRET": SECRET, **(env or {})}
    return {
        "evaluate": rltrain("evaluate", path, "--episodes", "1", *extra, cwd=cwd, env=env),
        "export": rltrain("export", path, str(work.parent / "policy.pt2"), *extra, cwd=cwd,
                          env=env),
        "fit --resume": rltrain("fit", "--resume", path, "trainer.num_steps=400", *extra,
                                cwd=cwd, env=env),
        "load_policy": load_policy(path, cwd, env),
    }


def assert_refused(results: dict[str, subprocess.CompletedProcess[str]], must: str,
                   only: tuple[str, ...] | None = None) -> None:
    for name, result in results.items():
        if only is not None and name not in only:
            continue
        output = result.stdout + result.stderr
        assert result.returncode == 2, (name, output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and must in lines[0], (name, lines)
        assert "Traceback" not in output and SECRET not in output, (name, output)


WHERE = ["from the folder holding runs/", "from inside the run"]


@pytest.mark.parametrize("where", WHERE)
def test_a_logger_module_planted_beside_the_run_is_never_imported(work: Path,
                                                                  where: str) -> None:
    run = work / "runs" / "victim"
    for folder in (work, run):
        plant(folder, work.parent / "marks", "wandb", "mlflow")
    change_stored(run, lambda c: c["trainer"].update(logger=["tensorboard", "wandb"]))
    inside = where == "from inside the run"
    before = snapshot(work, run)
    result = rltrain("fit", "--resume", "." if inside else "runs/victim",
                     "trainer.num_steps=400", cwd=run if inside else work,
                     env={"RLTRAIN_SECRET": SECRET})
    assert marks(work) == [], result.stdout + result.stderr
    assert_refused({"fit --resume": result}, "wandb")
    assert snapshot(work, run) == before


@pytest.mark.parametrize("where", WHERE)
def test_plugin_metadata_planted_beside_the_run_is_never_read(work: Path, where: str) -> None:
    run = work / "runs" / "victim"
    for folder in (work, run):
        plant_plugin(folder, work.parent / "marks")
    change_stored(run, lambda c: c["agent"].update(name="no_such_agent"))
    inside = where == "from inside the run"
    results = readers(work, run if inside else work, "." if inside else "runs/victim")
    assert marks(work) == [], {k: r.stderr for k, r in results.items()}
    assert_refused(results, "unknown agent 'no_such_agent'")


def test_an_installed_module_is_imported_for_a_stored_config_only_when_trusted(
        work: Path) -> None:
    site = work.parent / "site"
    site.mkdir()
    plant(site, work.parent / "marks", "sideeffect")
    run = work / "runs" / "victim"
    change_stored(run, lambda c: c["env"].update(id=None, _target_="sideeffect.Env"))
    env = {"PYTHONPATH": str(site)}
    results = readers(work, work, "runs/victim", env)
    assert marks(work) == [], {k: r.stderr for k, r in results.items()}
    assert_refused(results, "the stored config would import 'sideeffect'")
    assert all("--trust sideeffect" in r.stderr for r in results.values())
    trusted = rltrain("evaluate", "runs/victim", "--episodes", "1", "--trust", "sideeffect",
                      cwd=work, env=env)
    assert marks(work) == ["sideeffect"], trusted.stderr  # the user's word imports it


def metrics_row(line: str) -> Callable[[Path], None]:
    def write(run: Path) -> None:
        with (run / "metrics.jsonl").open("a") as file:
            file.write(line + "\n")
    return write


HOSTILE_METRICS = [
    ("return of 1e308", metrics_row('{"event": "evaluation", "env_steps": 400, '
                                    '"eval/return_mean": 1e308}'), "magnitude at most 1e+15"),
    ("negative env steps", metrics_row('{"event": "evaluation", "env_steps": -400, '
                                       '"eval/return_mean": 1.0}'), "env steps not negative"),
    ("5,000-digit integer", metrics_row('{"event": "evaluation", "env_steps": '
                                        + "9" * 5000 + "}"), "integer of 5,000 digits"),
    ("line of 2 MiB", metrics_row(" " * (2 << 20)), "is longer than 1,048,576 bytes"),
]


@pytest.mark.parametrize(("plant_metrics", "must"), [(p, m) for _, p, m in HOSTILE_METRICS],
                         ids=[name for name, _, _ in HOSTILE_METRICS])
def test_metrics_no_run_writes_are_refused_naming_file_and_line(
        work: Path, plant_metrics: Callable[[Path], None], must: str) -> None:
    run = work / "runs" / "victim"
    plant_metrics(run)
    lines = len((run / "metrics.jsonl").read_bytes().splitlines())
    for command in (["compare", "runs/victim"], ["plot", "runs/victim", "--out", "c.png"]):
        result = rltrain(*command, cwd=work)
        assert result.returncode == 2, result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and must in errors[0], errors
        assert f"metrics.jsonl:{lines} " in errors[0]
    assert not (work / "c.png").exists()


def test_a_run_resumed_from_an_earlier_checkpoint_plots_its_latest_rows(work: Path) -> None:
    run = work / "runs" / "victim"
    for steps, value in ((150, 5.0), (300, 7.0)):  # the run rewound to 150, then went on
        metrics_row(json.dumps({"event": "evaluation", "env_steps": steps,
                                "eval/return_mean": value}))(run)
    result = rltrain("compare", "runs/victim", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "7.0" in result.stdout

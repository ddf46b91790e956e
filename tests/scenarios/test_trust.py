"""No file outside a run is ever touched: manifest names are untrusted, run directories are
marked, ``overwrite`` removes only rltrain's files, stored configs resolve nothing and write
nowhere else, and an unreadable manifest never costs a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import QUIET, ROOT, small

from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
from rltrain.checkpoint import MANIFEST, Checkpointer, ManifestError, read_checkpoint
from rltrain.config.files import load_stored
from rltrain.envs.make import make_vector_env
from rltrain.trainer import MARKER


def fit(run_dir: Path, num_steps: int = 200, ckpt_path: str | None = None,
        **kwargs: Any) -> Trainer:
    trainer = Trainer(num_steps=num_steps, strategy=small(), eval_interval=100, eval_episodes=2,
                      run_dir=run_dir, checkpoint_interval=50, keep_last_checkpoints=2,
                      **QUIET, **kwargs)
    trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])), ckpt_path=ckpt_path)
    return trainer


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rltrain.cli", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def plant(folder: Path, names: list[str]) -> dict[Path, str]:
    """Files a crafted manifest points at, with their contents."""
    folder.mkdir(parents=True, exist_ok=True)
    planted = {}
    for name in names:
        path = folder / name
        path.write_text(f"precious {name}\n")
        planted[path] = path.read_text()
    return planted


def edit_manifest(folder: Path, **changes: Any) -> None:
    path = folder / MANIFEST
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


@pytest.mark.slow  # a run and the command line on a hostile run directory
@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_manifest_naming_files_outside_its_folder_deletes_nothing(tmp_path: Path,
                                                                    form: str) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    outside = plant(tmp_path, ["x.pt", "y.pt", "z.pt"])
    names = ([f"../../{p.name}" for p in outside] if form == "relative"
             else [str(p) for p in outside])
    checkpoints = run_dir / "checkpoints"
    entries = [{"file": name, "env_steps": 10 * i, "sequence": i, "sha256": "0" * 64,
                "bytes": 1} for i, name in enumerate(names[:2], start=1)]
    listed = json.loads((checkpoints / MANIFEST).read_text())["checkpoints"]
    edit_manifest(checkpoints, checkpoints=entries + listed,
                  best={"file": names[2], "env_steps": 1, "eval_return": 1.0})
    # Retention and best-replacement would have unlinked the planted files.
    result = cli("fit", "--resume", str(run_dir), "trainer.num_steps=400", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "checkpoints[0] names" in result.stderr and "refusing to use" in result.stderr
    assert "Traceback" not in result.stderr
    assert {p: p.read_text() for p in outside} == outside
    with pytest.raises(ManifestError, match=r"entry best names"):
        edit_manifest(checkpoints, checkpoints=listed)
        Checkpointer(checkpoints).resolve("best")
    assert {p: p.read_text() for p in outside} == outside


def test_last_pt_never_reads_a_file_the_manifest_points_outside(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    checkpoints = run_dir / "checkpoints"
    edit_manifest(checkpoints, last="../../secret.pt")
    with pytest.raises(ManifestError, match=r"entry last names '\.\./\.\./secret\.pt'"):
        read_checkpoint(checkpoints / "last.pt")


def test_a_directory_that_is_not_a_run_is_refused_and_left_untouched(tmp_path: Path) -> None:
    project = tmp_path / "project"
    mine = plant(project, ["config.yaml", "model_summary.txt", "notes.md"])
    with pytest.raises(FileExistsError, match=r"is not an rltrain run .* holds config\.yaml"):
        fit(project)
    with pytest.raises(FileExistsError, match=r"is not an rltrain run"):
        fit(project, overwrite=True)
    assert {p: p.read_text() for p in mine} == mine
    assert sorted(p.name for p in project.iterdir()) == ["config.yaml", "model_summary.txt",
                                                          "notes.md"]


@pytest.mark.slow  # a run and the command line on a hostile run directory
def test_another_tools_checkpoints_folder_is_not_a_run(tmp_path: Path) -> None:
    folder = tmp_path / "lightning"
    theirs = plant(folder / "checkpoints", ["epoch=3.ckpt"])
    result = cli("fit", f"trainer.run_dir={folder}", "--overwrite", cwd=tmp_path)
    assert result.returncode == 2 and "is not an rltrain run" in result.stderr, result.stderr
    assert {p: p.read_text() for p in theirs} == theirs


def test_other_tools_files_beside_a_run_are_kept_and_overwrite_removes_only_rltrains(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "hydra-output"
    theirs = plant(run_dir / ".hydra", ["config.yaml", "overrides.yaml"])
    theirs |= plant(run_dir, ["app.log"])
    fit(run_dir)
    assert (run_dir / MARKER).is_file()
    theirs |= plant(run_dir / "checkpoints", ["my-export.onnx"])
    old = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*.pt"))
    with pytest.raises(FileExistsError, match="already holds a run"):
        fit(run_dir, num_steps=100)
    fit(run_dir, num_steps=100, overwrite=True)
    assert {p: p.read_text() for p in theirs} == theirs
    new = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*.pt"))
    assert new == ["checkpoint-100.pt", "checkpoint-50.pt"] and new != old
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 100


@pytest.mark.slow
def test_an_empty_run_dir_is_refused_instead_of_meaning_the_current_directory(
        tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run_dir is empty"):
        Trainer(run_dir="")
    result = cli("fit", "trainer.run_dir=''", cwd=tmp_path)
    assert result.returncode == 2 and "trainer: run_dir is empty" in result.stderr, result.stderr
    (tmp_path / "here.yaml").write_text('trainer:\n  run_dir: ""\n')
    result = cli("fit", "here.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "trainer: run_dir is empty" in result.stderr, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["here.yaml"]


def test_links_where_rltrain_writes_are_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    target = plant(tmp_path / "elsewhere", ["summary.json"])
    (run_dir / "summary.json").unlink()
    (run_dir / "summary.json").symlink_to(next(iter(target)))
    with pytest.raises(FileExistsError, match=r"symbolic links .*summary\.json"):
        fit(run_dir, num_steps=300, ckpt_path="last")
    assert {p: p.read_text() for p in target} == target


@pytest.mark.slow  # a run and the command line on a hostile run directory
def test_a_stored_config_cannot_send_checkpoints_outside_its_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    elsewhere = tmp_path / "elsewhere"
    config = (run_dir / "config.yaml").read_text().replace(
        "checkpoint_dir: null", f"checkpoint_dir: {elsewhere}")
    (run_dir / "config.yaml").write_text(config)
    result = cli("fit", "--resume", str(run_dir), "trainer.num_steps=300", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "outside the run directory" in result.stderr
    assert f"trainer.checkpoint_dir={elsewhere}" in result.stderr
    assert not elsewhere.exists()


@pytest.mark.slow  # a run and the command line on a hostile run directory
def test_a_stored_config_resolves_no_interpolation(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    config = (run_dir / "config.yaml").read_text().replace(
        "id: CartPole-v1", "id: CartPole-v1\n  note: ${oc.env:RLTRAIN_TEST_SECRET}")
    (run_dir / "config.yaml").write_text(config)
    assert load_stored(run_dir / "config.yaml").env.note == "${oc.env:RLTRAIN_TEST_SECRET}"
    result = cli("fit", "--resume", str(run_dir), "--print-config", cwd=tmp_path,
                 env={"RLTRAIN_TEST_SECRET": "hunter2-value"})
    assert "hunter2-value" not in result.stdout + result.stderr


def test_an_unreadable_manifest_warns_and_no_checkpoint_is_ever_deleted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir, num_steps=300)
    checkpoints = run_dir / "checkpoints"
    before = {p.name for p in checkpoints.glob("*-*.pt")}
    assert any(n.startswith("best-") for n in before) and len(before) >= 3
    (checkpoints / MANIFEST).write_text('{"checkpoints": [tr')  # a broken edit
    with pytest.warns(UserWarning, match=r"manifest\.json is unusable: it is not valid JSON"):
        fit(run_dir, num_steps=400, ckpt_path="last")
    # The next run sweeps the folder against the new manifest: the old files stay listed.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(run_dir, num_steps=500, ckpt_path="last")
    after = {p.name for p in checkpoints.glob("*-*.pt")}
    assert before <= after, before - after
    assert Checkpointer(checkpoints).resolve("last").name == "checkpoint-500.pt"


def test_a_manifest_of_the_wrong_json_type_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fit(run_dir)
    checkpoints = run_dir / "checkpoints"
    (checkpoints / MANIFEST).write_text("[1, 2, 3]")
    with pytest.warns(UserWarning, match=r"holds a JSON list, not an object"):
        path = Checkpointer(checkpoints).resolve("last")
    assert path.name == "checkpoint-200.pt"


def test_same_seed_same_sub_env_spaces(tmp_path: Path) -> None:
    def states(seed: int) -> list[Any]:
        envs = make_vector_env("CartPole-v1", num_envs=3, seed=seed)
        try:
            return [(e.action_space.sample(), e.observation_space.sample().tolist())
                    for e in envs.envs]  # type: ignore[attr-defined]
        finally:
            envs.close()

    assert states(7) == states(7)
    assert states(7) != states(8)
    first, second = states(7)[:2]
    assert not np.array_equal(first[1], second[1])  # sub-envs do not share a stream


def test_two_straight_runs_with_one_seed_save_identical_environments(tmp_path: Path) -> None:
    saved = []
    for name in ("a", "b"):
        Trainer(num_steps=200, strategy=OffPolicyStrategy(OffPolicyConfig(
            num_envs=2, warmup_steps=50, train_interval=25, train_steps=2, batch_size=16,
            buffer_size=1000)), eval_interval=None, run_dir=tmp_path / name, **QUIET
        ).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[16])))
        state = read_checkpoint(Checkpointer(tmp_path / name / "checkpoints").resolve("last"))
        saved.append(state["runner"]["envs"])
    assert torch.equal(saved[0], saved[1])

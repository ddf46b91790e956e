"""Bad input on the real command line: exit status 2, one line on stderr (``rltrain: error:``),
no traceback, and nothing that a file names is run, read or deleted."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rltrain
from omegaconf import OmegaConf

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

#: A real run in a few seconds: 300 env steps, no evaluation, no TensorBoard, no progress bar.
TINY = ["trainer.num_steps=300", "strategy.warmup_steps=100", "agent.hidden_sizes=[16]",
        "trainer.eval_interval=null", "trainer.logger=false", "trainer.enable_progress_bar=false"]
#: The value of RLTRAIN_TEST_SECRET: it must never show where a stored config names it.
SECRET = "s3cr3t-value-from-the-environment-7c1f"


def bad_input(process: subprocess.CompletedProcess[str]) -> str:
    """The one line a bad input prints (after checking the exit status and the rest)."""
    output = (f"exit status {process.returncode}\nstdout:\n{process.stdout}\n"
              f"stderr:\n{process.stderr}")
    assert "Traceback" not in process.stdout + process.stderr, output
    lines = process.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rltrain: error: "), output
    assert process.returncode == 2, output
    return lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory, made once (tests alter copies of it). Its run_dir comes from an
    ``${oc.env:...}`` override, which the command line resolves."""
    cwd = tmp_path_factory.mktemp("cli-errors")
    run_dir = cwd / "run"
    process = rltrain("fit", *TINY, "trainer.run_dir=${oc.env:RLTRAIN_TEST_RUN_DIR}", cwd=cwd,
                      env={"RLTRAIN_TEST_RUN_DIR": str(run_dir)})
    assert process.returncode == 0, process.stderr
    return run_dir


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run", symlinks=True))


def test_yaml_syntax_error_in_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("trainer:\n  num_steps: 300\n  run_dir: runs: x\n")
    line = bad_input(rltrain("fit", "bad.yaml", cwd=tmp_path))
    assert "bad.yaml is not a valid YAML config (line 3, column 16)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_python_tag_in_a_config_file_runs_nothing(tmp_path: Path) -> None:
    command = shlex.quote(f"touch {tmp_path / 'ran'}")
    (tmp_path / "tag.yaml").write_text(f"trainer:\n  run_dir: !!python/object/apply:os.system "
                                       f"[{command}]\n")
    line = bad_input(rltrain("fit", "tag.yaml", cwd=tmp_path))
    assert "tag.yaml" in line and "Python object tag" in line
    assert not (tmp_path / "ran").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tag.yaml"]


@pytest.mark.parametrize("override, named", [
    ("trainer.run_dir=${foo", "${foo"),
    ("trainer.run_dir=${no_such_key}", "no_such_key"),
    ("env.id=${oc.env:RLTRAIN_TEST_UNSET_VARIABLE}", "RLTRAIN_TEST_UNSET_VARIABLE"),
], ids=["malformed", "missing key", "unset environment variable"])
def test_bad_interpolation_in_an_override(override: str, named: str, tmp_path: Path) -> None:
    line = bad_input(rltrain("fit", override, cwd=tmp_path))
    assert named in line
    assert not list(tmp_path.iterdir())


def test_unknown_env_kwargs(tmp_path: Path) -> None:
    line = bad_input(rltrain("fit", *TINY, "env.kwargs={bogus: 1}", "trainer.run_dir=run",
                             cwd=tmp_path))
    assert "bogus" in line and "env.kwargs" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is not None,
                    reason="needs an environment whose package is missing (Box2D is installed)")
def test_environment_whose_package_is_missing(tmp_path: Path) -> None:
    line = bad_input(rltrain("fit", *TINY, "env.id=LunarLander-v3", "trainer.run_dir=run",
                             cwd=tmp_path))
    assert "LunarLander-v3" in line and "Box2D" in line
    assert not list(tmp_path.iterdir())


def test_run_directory_whose_config_is_not_yaml(run: Path, tmp_path: Path) -> None:
    run_dir = copy_of(run, tmp_path)
    (run_dir / "config.yaml").write_text("trainer:\n  num_steps: [300\nenv:\n  id: CartPole-v1\n")
    line = bad_input(rltrain("fit", "--resume", run_dir, cwd=tmp_path))
    assert "config.yaml is not a valid YAML config (line" in line
    # evaluate reads the config its checkpoint holds, never config.yaml
    assert rltrain("evaluate", run_dir, cwd=tmp_path).returncode == 0


def test_evaluate_a_checkpoint_of_random_bytes(tmp_path: Path) -> None:
    (tmp_path / "random.pt").write_bytes(random.Random(0).randbytes(4096))
    line = bad_input(rltrain("evaluate", "random.pt", cwd=tmp_path))
    assert "random.pt" in line


def test_a_manifest_naming_files_outside_its_folder_reads_and_deletes_nothing(
        run: Path, tmp_path: Path) -> None:
    run_dir = copy_of(run, tmp_path)
    planted = {run_dir / "outside": "in the run directory", tmp_path / "outside": "beside it"}
    for path, text in planted.items():
        path.write_text(text)
    manifest = run_dir / "checkpoints" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["checkpoints"][0]["file"] = "../outside"
    data["last"] = "../outside"
    manifest.write_text(json.dumps(data))
    line = bad_input(rltrain("fit", "--resume", run_dir, "trainer.num_steps=600", cwd=tmp_path))
    assert "checkpoints[0]" in line and "'../outside'" in line
    for path, text in planted.items():
        assert path.read_text() == text


def test_an_oc_env_interpolation_in_an_override_resolves(run: Path) -> None:
    assert (run / "checkpoints" / "last.pt").is_file()
    assert OmegaConf.load(run / "config.yaml").trainer.run_dir == str(run)


def test_a_stored_config_never_resolves_oc_env(run: Path, tmp_path: Path) -> None:
    run_dir = copy_of(run, tmp_path)
    config = run_dir / "config.yaml"
    stored = config.read_text()
    assert "  kwargs: {}\n" in stored
    config.write_text(stored.replace("  kwargs: {}\n",
                                     "  kwargs:\n    note: ${oc.env:RLTRAIN_TEST_SECRET}\n"))
    secret = {"RLTRAIN_TEST_SECRET": SECRET}
    printed = rltrain("fit", "--resume", run_dir, "--print-config", cwd=tmp_path, env=secret)
    assert printed.returncode == 0, printed.stderr
    assert SECRET not in printed.stdout + printed.stderr
    assert "oc.env:RLTRAIN_TEST_SECRET" in printed.stdout  # shown as the text it is
    # Resuming for real passes the text, not the variable, to the environment (which refuses it).
    line = bad_input(rltrain("fit", "--resume", run_dir, cwd=tmp_path, env=secret))
    assert "oc.env:RLTRAIN_TEST_SECRET" in line and SECRET not in line
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_processes_sharing_stderr_never_run_their_lines_together(tmp_path: Path) -> None:
    # As the ranks under torchrun do: two processes write rltrain's lines into one pipe, both at
    # once (each waits for the other to be ready, then writes for half a second).
    script = """import pathlib, sys, time
from rltrain.cli.app import say
name, folder = sys.argv[1], pathlib.Path(sys.argv[2])
(folder / name).touch()
while len(list(folder.iterdir())) < 2: time.sleep(0.001)
end, i = time.monotonic() + 0.5, 0
while time.monotonic() < end:
    say(f"rltrain: error: {name} {'x' * 200} {i}")
    i += 1
"""
    read_end, write_end = os.pipe()
    writers = [subprocess.Popen([sys.executable, "-c", script, name, str(tmp_path)],
                                stderr=write_end) for name in ("rank-0", "rank-1")]
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        lines = stream.read().splitlines()
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    line = re.compile(r"rltrain: error: rank-[01] x{200} \d+")
    assert len(lines) > 1000 and [text for text in lines if not line.fullmatch(text)] == []


@pytest.mark.parametrize("override", ["agent.name=dqnn", "agent.lrr=1"])
def test_a_refused_override_prints_no_preset_line_first(tmp_path: Path, override: str) -> None:
    """The preset line ("starting from ...") is said only of a config that is valid: an
    unknown agent or key is refused with nothing before the error."""
    result = rltrain("fit", override, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stdout == "", result.stdout
    assert "starting from" not in result.stderr and "preset" not in result.stderr.split(":")[0]

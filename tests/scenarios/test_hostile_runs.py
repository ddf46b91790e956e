"""A run directory is untrusted input: every command that reads one (``evaluate``, ``export``,
``fit --resume``, ``plot`` and :func:`rltrain.load_policy`) runs no code from it, resolves no
interpolation, writes no file outside it, and refuses what it cannot use in one clear line.

Each case plants something in a copy of a real run, then runs each reader as a real
subprocess, from the folder holding ``runs/`` and, for planted code, from inside the run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hostile import EVIL, SECRET, load_policy, rltrain, snapshot, victim

from rltrain.checkpoint.manifest import MANIFEST

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, short DQN run on CartPole with two evaluations."""
    return victim(tmp_path_factory.mktemp("original"))


@dataclass
class Planted:
    """A copy of the run with something planted: ``work`` holds ``runs/victim``."""

    work: Path
    mark: Path

    @property
    def run(self) -> Path:
        return self.work / "runs" / "victim"

    def config(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the run's stored config: ``config.yaml`` and the one in its checkpoint."""
        path = self.run / "config.yaml"
        config = yaml.safe_load(path.read_text())
        change(config)
        path.write_text(yaml.safe_dump(config))
        self.checkpoint(lambda state: change(state["config"]))

    def checkpoint(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Change what the run's checkpoint holds, its manifest updated to match (the file
        and its links, ``last`` and ``best``, are one file on disk)."""
        checkpoint = self.run / "checkpoints" / "checkpoint-300.pt"
        state = torch.load(checkpoint, weights_only=True)
        change(state)
        torch.save(state, checkpoint)
        data = checkpoint.read_bytes()
        path = self.run / "checkpoints" / MANIFEST
        manifest = json.loads(path.read_text())
        for entry in (manifest["checkpoints"][0], manifest["best"]):
            entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        path.write_text(json.dumps(manifest))

    def code(self) -> None:
        text = EVIL.format(mark=str(self.mark))
        (self.run / "evil.py").write_text(text)
        (self.run / "evilpkg").mkdir()
        (self.run / "evilpkg" / "__init__.py").write_text(text)
        (self.run / "evilpkg" / "sub.py").write_text(text)


@pytest.fixture
def planted(original: Path, tmp_path: Path) -> Planted:
    work, mark = tmp_path / "work", tmp_path / "marks"
    mark.mkdir()
    shutil.copytree(original, work / "runs" / "victim", symlinks=True)
    return Planted(work, mark)


def readers(planted: Planted, path: str, cwd: Path
            ) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each command that reads a run directory, run on ``path`` from ``cwd``."""
    env = {"RLTRAIN_SECRET": SECRET}
    return {
        "evaluate": rltrain("evaluate", path, "--episodes", "1", cwd=cwd, env=env),
        "export": rltrain("export", path, str(planted.work / "policy.pt2"), cwd=cwd, env=env),
        "fit --resume": rltrain("fit", "--resume", path, "trainer.num_steps=400", cwd=cwd,
                                env=env),
        "plot": rltrain("plot", path, "--out", str(planted.work / "curves.png"), cwd=cwd,
                        env=env),
        "load_policy": load_policy(path, cwd),
    }


def assert_refused_cleanly(planted: Planted, results: dict[str, subprocess.CompletedProcess[str]],
                           before: dict[str, tuple[int, int]], *, must: str,
                           unused: tuple[str, ...] = ("plot",)) -> None:
    """No planted code ran, no secret leaked, nothing changed outside the run but the
    outputs asked for, the readers in ``unused`` (which never build the planted part: plot
    builds nothing; export and load_policy no env when the checkpoint stores its spaces)
    succeeded, and every other one refused in one line naming ``must``."""
    assert sorted(p.name for p in planted.mark.iterdir()) == []
    for name, result in results.items():
        output = result.stdout + result.stderr
        assert SECRET not in output, (name, output)
        assert "Traceback" not in output and "internal error" not in output, (name, output)
        if name in unused:
            assert result.returncode == 0, (name, output)
            continue
        assert result.returncode == 2, (name, output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and must in lines[0], (name, lines)
    after = snapshot(planted.work, planted.run)
    for output in ("curves.png", "policy.pt2"):
        after.pop(str(planted.work / output), None)
    assert after == before
    assert not any(SECRET in str(p) for p in planted.work.parent.rglob("*"))


def namespace_imports(config: dict[str, Any]) -> None:
    config["env"]["imports"] = ["runs.victim.evil"]


def namespace_agent(config: dict[str, Any]) -> None:
    config["agent"] = {"_target_": "runs.victim.evil.Agent"}


def namespace_env_id(config: dict[str, Any]) -> None:
    config["env"]["id"] = "runs.victim.evil:Foo-v0"


def namespace_env_target(config: dict[str, Any]) -> None:
    config["env"].update(id=None, _target_="runs.victim.evil.Env")


def namespace_wrapper(config: dict[str, Any]) -> None:
    config["env"]["wrappers"] = [{"_target_": "runs.victim.evil.Wrap"}]


def package_init(config: dict[str, Any]) -> None:
    config["strategy"] = {"_target_": "runs.victim.evilpkg.sub.Strategy"}


PLANTED_FROM_PARENT = [namespace_imports, namespace_agent, namespace_env_id,
                       namespace_env_target, namespace_wrapper, package_init]


def inside_package(config: dict[str, Any]) -> None:
    config["agent"] = {"_target_": "evilpkg.sub.Agent"}


def inside_imports(config: dict[str, Any]) -> None:
    config["env"]["imports"] = ["evil"]


def inside_env_id(config: dict[str, Any]) -> None:
    config["env"]["id"] = "evil:Foo-v0"


PLANTED = ([(change, "from the folder holding runs/") for change in PLANTED_FROM_PARENT]
           + [(change, "from inside the run")
              for change in (inside_package, inside_imports, inside_env_id)])


@pytest.mark.parametrize(("change", "where"), PLANTED,
                         ids=[f"{change.__name__}, {where}" for change, where in PLANTED])
def test_code_planted_in_a_run_never_runs(planted: Planted,
                                          change: Callable[[dict[str, Any]], None],
                                          where: str) -> None:
    planted.code()
    planted.config(change)
    before = snapshot(planted.work, planted.run)
    inside = where == "from inside the run"
    results = readers(planted, "." if inside else "runs/victim",
                      planted.run if inside else planted.work)
    if inside:
        results.pop("plot")  # its output would land inside the run
    assert_refused_cleanly(planted, results, before, must="the stored config would import")


#: The readers that build no env from a checkpoint that stores its spaces.
ENV_UNUSED = ("plot", "export", "load_policy")


def interpolation(config: dict[str, Any]) -> None:
    config["env"]["id"] = "\\${oc.env:RLTRAIN_SECRET}"  # escaped once: still taken literally


def plain_interpolation(config: dict[str, Any]) -> None:
    config["env"]["id"] = "${oc.env:RLTRAIN_SECRET}"


@pytest.mark.parametrize("change", [interpolation, plain_interpolation],
                         ids=lambda f: f.__name__)
def test_a_stored_interpolation_is_never_resolved(
        planted: Planted, change: Callable[[dict[str, Any]], None]) -> None:
    planted.config(change)
    before = snapshot(planted.work, planted.run)
    results = readers(planted, "runs/victim", planted.work)
    assert_refused_cleanly(planted, results, before, must="Unknown Gymnasium environment id",
                           unused=ENV_UNUSED)
    assert "${oc.env" in results["evaluate"].stderr


def video_outside(planted: Planted) -> str:
    planted.config(lambda c: c["env"].__setitem__("wrappers", [
        {"_target_": "gymnasium.wrappers.RecordVideo", "video_folder": str(planted.work / "v")}]))
    return "outside the run directory"


def video_prefix_escape(planted: Planted) -> str:
    planted.config(lambda c: c["env"].__setitem__("wrappers", [
        {"_target_": "gymnasium.wrappers.RecordVideo", "video_folder": "runs/victim/videos",
         "name_prefix": "../../../escaped"}]))
    return "outside the run directory"


def foreign_wrapper(planted: Planted) -> str:
    planted.config(lambda c: c["env"].__setitem__("wrappers", [
        {"_target_": "minigrid.wrappers.ImgObsWrapper"}]))
    return "neither Gymnasium's, rltrain's nor the environment's package"


def manifest_outside(planted: Planted) -> str:
    path = planted.run / "checkpoints" / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["checkpoints"][0]["file"] = "../../../../outside.pt"
    path.write_text(json.dumps(manifest))
    return "not a plain file name of this folder"


def broadcast_bounds(planted: Planted) -> str:
    """A checkpoint whose observation bounds are stride-0 views of one number: a small file
    that would make a space of a billion float64 elements."""
    huge = [1 << 27]

    def broadcast(state: dict[str, Any]) -> None:
        state["spaces"]["observation"].update(
            shape=huge, dtype="float64", low=torch.zeros(1, dtype=torch.float64).expand(*huge),
            high=torch.ones(1, dtype=torch.float64).expand(*huge))

    planted.checkpoint(broadcast)
    return "a broadcast view"


@pytest.mark.parametrize("plant", [video_outside, video_prefix_escape, foreign_wrapper,
                                   manifest_outside], ids=lambda f: f.__name__)
def test_hostile_wrappers_and_manifests_are_refused_in_one_line(
        planted: Planted, plant: Callable[[Planted], str]) -> None:
    must = plant(planted)
    before = snapshot(planted.work, planted.run)
    results = readers(planted, "runs/victim", planted.work)
    assert_refused_cleanly(planted, results, before, must=must,
                           unused=("plot",) if plant is manifest_outside else ENV_UNUSED)
    assert not (planted.work / "v").exists() and not list(planted.work.rglob("escaped*"))


def test_stride_zero_space_bounds_are_refused_before_any_allocation(planted: Planted) -> None:
    must = broadcast_bounds(planted)
    checkpoint = str(planted.run / "checkpoints" / "checkpoint-300.pt")
    for result in (rltrain("export", checkpoint, str(planted.work / "p.pt2"), cwd=planted.work),
                   load_policy(checkpoint, planted.work)):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and must in lines[0], result.stderr
    assert not (planted.work / "p.pt2").exists()


def test_the_run_itself_still_evaluates_exports_resumes_and_plots(planted: Planted) -> None:
    """The control: the same readers accept the untouched copy."""
    results = readers(planted, "runs/victim", planted.work)
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr)
    assert (planted.work / "policy.pt2").is_file() and (planted.work / "curves.png").is_file()


def test_yaml_aliases_in_a_stored_config_are_refused(planted: Planted) -> None:
    """A billion-laughs config: a few hundred bytes that expand beyond memory."""
    laughs = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        laughs.append(f"{'abcdefghij'[i]}: &{'abcdefghij'[i]} [" + ", ".join(
            [f"*{'abcdefghij'[i - 1]}"] * 9) + "]")
    text = (planted.run / "config.yaml").read_text() + "\n".join(laughs) + "\n"
    (planted.run / "config.yaml").write_text(text)
    result = rltrain("fit", "--resume", "runs/victim", cwd=planted.work)
    assert result.returncode == 2 and "uses YAML aliases" in result.stderr, result.stderr
    plot = rltrain("plot", "runs/victim", "--out", "c.png", cwd=planted.work)
    assert plot.returncode == 2 and "uses YAML aliases" in plot.stderr, plot.stderr


def test_a_checkpoint_config_escapes_every_interpolation_whatever_its_backslashes() -> None:
    from omegaconf import OmegaConf

    from rltrain.config.files import literal_config

    for value in ["${oc.env:HOME}", "\\${oc.env:HOME}", "\\\\${oc.env:HOME}", "a\\", "${",
                  "\\${${x}}", "x}${y", "${oc.create:{a: 1}}"]:
        stored = {"env": {"id": value, "imports": [value]}}
        config = literal_config(stored)
        assert OmegaConf.to_container(config, resolve=True) == stored, value


def test_evaluate_refuses_a_stored_checkpoint_dir_outside_the_run_as_load_policy_does(
        planted: Planted) -> None:
    elsewhere = planted.work / "elsewhere"
    planted.config(lambda c: c["trainer"].__setitem__("checkpoint_dir", str(elsewhere)))
    shutil.move(str(planted.run / "checkpoints"), elsewhere)
    for result in (rltrain("evaluate", "runs/victim", cwd=planted.work),
                   load_policy("runs/victim", planted.work)):
        assert result.returncode == 2, result.stderr
        assert "outside the run directory" in result.stderr, result.stderr
    ok = rltrain("evaluate", str(elsewhere / "checkpoint-300.pt"), cwd=planted.work)
    assert ok.returncode == 0, ok.stderr

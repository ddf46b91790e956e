"""A checkpoint folder is always resumable, or restartable with a message that says how.

Issue 26, findings 5 and 6, with real checkpoints, processes and signals:

* a step saved again (a run resumed and stopped at the same step, or resumed from an older
  checkpoint) is written under a new name, the manifest switched to it, and only then the old
  file deleted: a SIGKILL in between leaves ``last`` and ``best`` intact; and when the file
  ``last`` or ``best`` names is broken all the same, the newest intact checkpoint is used, with
  a warning naming both;
* under torchrun, a rank killed during the first save leaves a lone shard: that is no
  checkpoint, so a new ``rltrain fit`` takes the directory (saying so), ``--resume`` says there
  is nothing to resume and gives the command to start again, and that command works.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, ROOT, dqn, small

from rltrain import Trainer
from rltrain.checkpoint import Checkpointer, atomic_save, read_checkpoint
from rltrain.checkpoint.io import LocalFiles
from rltrain.checkpoint.manifest import read_manifest
from rltrain.observe import EventRecorder, Start
from rltrain.runtime.distributed import TORCHRUN_VARIABLES

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def environment() -> dict[str, str]:
    """This checkout's rltrain, one thread per process, no torchrun variables inherited."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def run(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, env=environment(), text=True,
                          capture_output=True, timeout=timeout)


#: What a rank sometimes prints when it aborts in torch's teardown at exit, after the run
#: ended (seen without these changes too: 2 of 12 plain two-rank runs on a 2-core machine).
TEARDOWN_ABORT = "terminate called without an active exception"


def assert_finished(done: subprocess.CompletedProcess[str]) -> None:
    """A torchrun ``rltrain fit`` ran to its end: exit status 0, or rank 0 reported the run
    done and a rank then aborted at exit in torch's teardown (the run's files are checked
    apart)."""
    output = done.stdout + done.stderr
    ended = "run directory:" in done.stdout and TEARDOWN_ABORT in output
    assert done.returncode == 0 or ended, output[-5000:]


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None,
        callbacks: tuple[Any, ...] = ()) -> Trainer:
    """A small DQN run on CartPole, saved and evaluated every 200 env steps."""
    trainer = Trainer(num_steps=num_steps, strategy=small(), run_dir=run_dir,
                      eval_interval=200, eval_episodes=2, checkpoint_interval=200,
                      callbacks=callbacks, **QUIET)
    trainer.fit("CartPole-v1", dqn(), ckpt_path=ckpt_path)
    return trainer


@contextlib.contextmanager
def no_warnings() -> Iterator[None]:
    """Any warning inside is an error (resolving and loading here must not warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@contextlib.contextmanager
def no_checkpoint_warning() -> Iterator[None]:
    """No warning about a checkpoint inside (other warnings, a library's, are let be)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    said = [str(w.message) for w in caught if "checkpoint" in str(w.message).lower()]
    assert said == [], said


# --- finding 6: a step saved again never writes over a listed file ---------------------------


def test_a_step_saved_again_goes_to_a_new_file_and_no_listed_file_is_written_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fit(tmp_path, 400)
    folder = tmp_path / "checkpoints"
    first = folder / "checkpoint-400.pt"
    assert read_manifest(LocalFiles(folder)).last == first.name
    replaced: list[str] = []
    rename = os.replace

    def watched(source: Any, target: Any) -> None:
        listed = read_manifest(LocalFiles(folder)).names()  # at the moment of the rename
        if Path(target).parent == folder and Path(target).name in listed:
            replaced.append(Path(target).name)
        rename(source, target)

    monkeypatch.setattr(os, "replace", watched)
    fit(tmp_path, 400, ckpt_path="last")  # resumed at its end: saves step 400 again
    fit(tmp_path, 400, ckpt_path="last")  # and again
    monkeypatch.undo()
    assert replaced == []
    manifest = read_manifest(LocalFiles(folder))
    assert [e.file for e in manifest.checkpoints if e.env_steps == 400] == [manifest.last]
    assert manifest.last == "checkpoint-400.pt"  # checkpoint-400.v2.pt, then a free name again
    assert not (folder / "checkpoint-400.v2.pt").exists()  # deleted once no longer listed
    with no_warnings():
        assert Checkpointer(folder).resolve("last") == first


#: Run in a child process: save ``which`` (last or best) of a real checkpoint folder again, at
#: the same env steps with other weights, and SIGKILL the process once the new file is written,
#: before the manifest names it (the window in which the old code had replaced the listed file).
RESAVE_AND_DIE = """
import os, signal, sys
from pathlib import Path
import torch
from rltrain.checkpoint import Checkpointer, read_checkpoint

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

folder, which = Path(sys.argv[1]), sys.argv[2]
checkpointer = Checkpointer(folder)
state = read_checkpoint(checkpointer.resolve(which))
state["agent"] = {k: v + 0.5 if torch.is_floating_point(v) else v
                  for k, v in state["agent"].items()}
steps = state["progress"]["env_steps"]
Checkpointer._write_manifest = die
if which == "last":
    checkpointer.save(state, env_steps=steps)
else:
    checkpointer.save_best(state, env_steps=steps, eval_return=1e9)
sys.exit("the save finished: it was not killed")
"""


@pytest.mark.parametrize("which", ["last", "best"])
def test_sigkill_while_a_step_is_saved_again_leaves_last_and_best_intact(
        tmp_path: Path, which: str) -> None:
    fit(tmp_path, 400)
    folder = tmp_path / "checkpoints"
    before = {w: Checkpointer(folder).resolve(w) for w in ("last", "best")}
    assert len([p for p in folder.glob("best-*.pt")]) == 1  # the only best
    killed = run(sys.executable, "-c", RESAVE_AND_DIE, str(folder), which, cwd=tmp_path)
    assert killed.returncode == -9, killed.stderr[-2000:]
    with no_warnings():
        for w in ("last", "best"):
            path = Checkpointer(folder).resolve(w)
            assert path == before[w]
            assert read_checkpoint(folder / f"{w}.pt")["progress"] == \
                read_checkpoint(path)["progress"]
    recorder = EventRecorder()
    with no_checkpoint_warning():
        fit(tmp_path, 600, ckpt_path="last", callbacks=(recorder,))
    assert recorder.of(Start)[0].start_env_steps == 400


def overwrite_in_place(path: Path) -> None:
    """What the old code's kill left: a listed file written over by a complete save of other
    contents, the manifest not yet switched."""
    state = read_checkpoint(path)
    atomic_save({**state, "saved_again": True}, path)


def test_a_broken_last_or_best_falls_back_to_the_newest_intact_checkpoint_with_a_warning(
        tmp_path: Path) -> None:
    fit(tmp_path, 600)
    folder = tmp_path / "checkpoints"
    manifest = read_manifest(LocalFiles(folder))
    assert manifest.best is not None and manifest.last == "checkpoint-600.pt"
    best = folder / manifest.best.file
    overwrite_in_place(folder / "checkpoint-600.pt")
    overwrite_in_place(best)
    older = folder / "checkpoint-400.pt"
    said = (r"Skipping checkpoint .*{}: (it has .* bytes where the manifest says|its SHA-256 "
            r"checksum does not match the manifest's).*Using {} instead")
    with pytest.warns(UserWarning, match=said.format("checkpoint-600\\.pt", re.escape(str(older)))):
        assert Checkpointer(folder).resolve("last") == older
    with pytest.warns(UserWarning, match=said.format(re.escape(best.name), re.escape(str(older)))
                      + r" \(the newest intact checkpoint, not the best evaluation's\)"):
        assert Checkpointer(folder).resolve("best") == older
    for link in ("last.pt", "best.pt"):  # the links read what resolve picks
        with pytest.warns(UserWarning, match="Skipping checkpoint"):
            assert read_checkpoint(folder / link)["progress"]["env_steps"] == 400
    # The command line: evaluate best, with the warning, from the intact checkpoint.
    done = run(sys.executable, "-m", "rltrain.cli", "evaluate", str(tmp_path), "--checkpoint",
               "best", "--episodes", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(rf"rltrain: warning: Skipping checkpoint .*{re.escape(best.name)}.*Using "
                     rf".*checkpoint-400\.pt instead", done.stderr), done.stderr[-2000:]
    assert json.loads(done.stdout)["checkpoint"] == str(older)
    # Resuming: from the newest intact checkpoint, with the warning; the run then ends intact.
    recorder = EventRecorder()
    with pytest.warns(UserWarning, match=r"Skipping checkpoint .*checkpoint-600\.pt"):
        fit(tmp_path, 800, ckpt_path="last", callbacks=(recorder,))
    assert recorder.of(Start)[0].start_env_steps == 400
    with no_warnings():
        assert read_checkpoint(Checkpointer(folder).resolve("last"))["progress"][
            "env_steps"] == 800


def test_a_run_whose_checkpoints_are_all_broken_is_refused_with_the_advice_to_overwrite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rltrain.cli import main

    run_dir = tmp_path / "run"
    tiny = [f"trainer.run_dir={run_dir}", "trainer.num_steps=300", "trainer.logger=false",
            "trainer.enable_progress_bar=false", "trainer.enable_console=false",
            "agent.hidden_sizes=[16]", "strategy.warmup_steps=100", "trainer.eval_episodes=2"]
    assert main(["fit", *tiny]) == 0
    for path in (run_dir / "checkpoints").glob("*-*.pt"):
        path.write_bytes(path.read_bytes()[:100])  # every checkpoint truncated
    capsys.readouterr()
    assert main(["fit", *tiny]) == 2
    said = capsys.readouterr().err
    assert "already holds a run" in said and "that cannot be resumed" in said, said
    assert "every checkpoint in it is unusable" in said and "--resume" not in said, said
    assert "replace the run with overwrite=True (add --overwrite to this command" in said, said
    assert main(["fit", "--resume", str(run_dir)]) == 2
    said = capsys.readouterr().err
    assert re.search(r"No intact last checkpoint in .*every checkpoint in it is unusable .*"
                     r"There is nothing to resume: start the run again, with overwrite=True "
                     rf"and no ckpt_path \(rltrain fit --overwrite {re.escape(str(run_dir))}"
                     rf"/config\.yaml trainer\.run_dir={re.escape(str(run_dir))}", said), said
    (run_dir / "notes.txt").write_text("mine")
    assert main(["fit", "--overwrite", *tiny]) == 0
    assert (run_dir / "notes.txt").read_text() == "mine"
    with no_warnings():
        Checkpointer(run_dir / "checkpoints").resolve("last")


# --- finding 5: a rank killed during the first save of a run of two processes -----------------

#: A two-rank DQN run saved every 256 env steps (the first save: checkpoint-256).
DISTRIBUTED = ["dqn_cartpole", "trainer.num_steps=512", "trainer.checkpoint_interval=256",
               "trainer.eval_interval=256", "trainer.eval_episodes=2",
               "trainer.enable_progress_bar=false", "trainer.logger=false",
               "agent.hidden_sizes=[16]"]


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory written by ``torchrun --nproc-per-node=2 -m rltrain.cli fit``."""
    out = tmp_path_factory.mktemp("distributed")
    run_dir = out / "run"
    done = run(*TORCHRUN, "-m", "rltrain.cli", "fit", *DISTRIBUTED, f"trainer.run_dir={run_dir}",
               cwd=out)
    assert_finished(done)
    return run_dir


def killed_during_first_save(source: Path, run_dir: Path) -> None:
    """``source``'s run as a SIGKILL of rank 1 during its first save leaves it: rank 0's shard
    of checkpoint-256 written, rank 1's half-written temporary file, no checkpoint, no
    manifest, no summary (a user's file beside them)."""
    shutil.copytree(source, run_dir)
    folder = run_dir / "checkpoints"
    shard1 = (folder / "checkpoint-256.rank1.pt").read_bytes()
    for path in folder.iterdir():
        if path.name != "checkpoint-256.rank0.pt":
            path.unlink()
    (folder / ".checkpoint-256.rank1.pt.k3j2x9.tmp").write_bytes(shard1[: len(shard1) // 2])
    (run_dir / "summary.json").unlink()
    (run_dir / "notes.txt").write_text("mine")


def assert_restarted(run_dir: Path, done: subprocess.CompletedProcess[str]) -> None:
    """The run started again: it ended, its checkpoint is complete, the lone shard is gone and
    the user's file stayed."""
    assert_finished(done)
    folder = run_dir / "checkpoints"
    assert not list(folder.glob(".*.tmp"))
    with no_warnings():
        last = Checkpointer(folder).resolve("last")
    assert last.name == "checkpoint-512.pt"
    assert sorted(p.name for p in folder.glob("checkpoint-256*")) == [
        "checkpoint-256.pt", "checkpoint-256.rank0.pt", "checkpoint-256.rank1.pt"]
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 512


def assert_resumable(run_dir: Path) -> None:
    """``rltrain fit --resume`` under torchrun continues the run from its last checkpoint."""
    done = run(*TORCHRUN, "-m", "rltrain.cli", "fit", "--resume", str(run_dir),
               "trainer.num_steps=768", cwd=run_dir.parent)
    assert_finished(done)
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 768


def test_a_lone_shard_is_no_checkpoint_and_resume_says_how_to_start_again(
        distributed_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    killed_during_first_save(distributed_run, run_dir)
    left = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    done = run(sys.executable, "-m", "rltrain.cli", "fit", "--resume", str(run_dir), cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stderr
    assert "Traceback" not in said
    assert re.search(
        r"rltrain: error: No checkpoint: No intact last checkpoint in .*checkpoints: it holds "
        r"only what saves that did not finish left \(\.checkpoint-256\.rank1\.pt\.k3j2x9\.tmp, "
        r"checkpoint-256\.rank0\.pt\): a process of the run was stopped during a save, before "
        r"any checkpoint was complete\. There is nothing to resume: start the run again", said)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == left  # untouched
    # The command it gives, under torchrun as the run was: the run starts again.
    advice = re.search(r"\(rltrain fit (--overwrite \S+ trainer\.run_dir=\S+),", said)
    assert advice is not None, said
    done = run(*TORCHRUN, "-m", "rltrain.cli", "fit", *advice.group(1).split(), cwd=tmp_path)
    assert_restarted(run_dir, done)
    assert_resumable(run_dir)


def test_a_new_fit_takes_a_directory_whose_only_checkpoint_file_is_a_lone_shard(
        distributed_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    killed_during_first_save(distributed_run, run_dir)
    done = run(*TORCHRUN, "-m", "rltrain.cli", "fit", *DISTRIBUTED, f"trainer.run_dir={run_dir}",
               cwd=tmp_path)
    assert "already holds a run" not in done.stderr
    assert re.search(r"rltrain: warning: .*run holds no complete checkpoint, only what a save "
                     r"that did not finish left in .*checkpoints \(\.checkpoint-256\.rank1\.pt\."
                     r"k3j2x9\.tmp, checkpoint-256\.rank0\.pt\): the run it belongs to stopped "
                     r"before its first checkpoint and cannot be resumed\. Starting a new run "
                     r"there", done.stderr), done.stderr[-3000:]
    assert_restarted(run_dir, done)
    assert_resumable(run_dir)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real file system of 64 KiB (tmpfs), mounted for the test; skipped where mounting is
    not allowed."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_full_disk_while_saving_says_no_space_left_and_leaves_nothing(
        small_disk: Path) -> None:
    state = {"weights": torch.randn(100_000)}  # 400 KB: more than the disk holds
    with pytest.raises(OSError) as caught:
        atomic_save(state, small_disk / "checkpoint-1.pt")
    assert caught.value.errno == errno.ENOSPC
    assert "No space left on device" in str(caught.value)
    assert "checkpoint-1.pt" in str(caught.value) and "unexpected pos" not in str(caught.value)
    assert list(small_disk.iterdir()) == []  # no half-written file, no temporary file

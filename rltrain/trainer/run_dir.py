"""Run directories: marked as rltrain's, one writer at a time, and only rltrain's files touched.

A run directory holds a marker file (:data:`MARKER`) written when the run starts, and a lock
file (:data:`LOCK`) that the writing process holds locked (``flock``) for the run's life; the
kernel releases it when that process ends, however it ends. A directory that holds files with
rltrain's names but no marker is not a run: it is refused rather than overwritten, and
``overwrite`` removes only the files rltrain writes, never the rest of a folder. A marked folder
with neither a checkpoint nor a ``summary.json`` (a run that failed or was killed before its
first save) holds no run either: nothing in it can be resumed, so a new run takes it, removing
the files the failed one left (rltrain's only). What a save that did not finish left (a rank's
shard without the checkpoint it belongs to, a temporary file) is not a checkpoint: a new run
takes such a folder too, saying what it removes. A run whose checkpoints are all broken is
refused with the advice to replace it (``overwrite``), never to resume it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from rltrain.checkpoint import MANIFEST, Checkpointer, ManifestError, atomic_write_text
from rltrain.checkpoint.intact import find_intact, unfinished_saves, what_is_left
from rltrain.checkpoint.io import LocalFiles
from rltrain.checkpoint.manifest import (
    BEST_NAME,
    CHECKPOINT_NAME,
    LINKS,
    SHARD_NAME,
    TEMPORARY_NAME,
)
from rltrain.config.files import save_config
from rltrain.settings.targets import within
from rltrain.trainer.outputs import stopped_on_refused_loss

#: Written in every run directory when its first run starts: what makes a folder a run.
MARKER = ".rltrain-run.json"
#: Held locked by the process writing the run (its PID, host and start time inside).
LOCK = ".rltrain.lock"
#: The files rltrain writes at the top of a run directory (``--overwrite`` removes these).
RUN_FILES = ("config.yaml", "model_summary.txt", "metrics.jsonl", "metrics.csv",
             "summary.json")
TENSORBOARD_FILE = re.compile(r"events\.out\.tfevents\..+")


class RunDirectoryLocked(OSError):
    """Another process is writing to this run directory."""


@dataclass(frozen=True)
class RunDirectory:
    """What a folder holds, as rltrain sees it.

    Attributes:
        path: The folder.
        marked: It holds :data:`MARKER` (an rltrain run, or a folder prepared for one).
        ours: rltrain's files in it (top-level names, and ``checkpoints``).
    """

    path: Path
    marked: bool
    ours: tuple[str, ...]

    @classmethod
    def inspect(cls, path: Path) -> RunDirectory:
        if not path.is_dir():
            return cls(path, False, ())
        names = sorted(p.name for p in path.iterdir())
        ours = tuple(n for n in names if n in RUN_FILES or n == "checkpoints"
                     or TENSORBOARD_FILE.fullmatch(n))
        return cls(path, MARKER in names, ours)

    @property
    def legacy_run(self) -> bool:
        """A run written before runs were marked: its config and a checkpoint manifest."""
        return ("config.yaml" in self.ours
                and (self.path / "checkpoints" / MANIFEST).is_file())

    @property
    def holds_summary(self) -> bool:
        """It holds a finished run's ``summary.json`` (and is rltrain's). Whether it holds a
        run also depends on its checkpoints (:func:`saved_checkpoints`), which may be in a
        folder of their own."""
        return "summary.json" in self.ours and (self.marked or self.legacy_run)


@contextlib.contextmanager
def open_run(run_dir: Path, *, checkpoint_dir: Path, resuming: bool,
             overwrite: bool) -> Iterator[None]:
    """Take ``run_dir`` for one run: refuse a folder that is not rltrain's, lock it (and a
    ``checkpoint_dir`` outside it) for as long as the ``with`` block runs, refuse a run already
    there unless ``resuming`` it or told to ``overwrite`` it (then rltrain's files only are
    removed), and mark it. Nothing is created or changed before the checks that need no lock
    have passed."""
    folders = [run_dir] + ([checkpoint_dir] if not within(checkpoint_dir, run_dir) else [])
    _refuse_foreign(RunDirectory.inspect(run_dir))
    if len(folders) == 2:
        _refuse_foreign_checkpoints(checkpoint_dir)
    for folder in folders:  # before the lock file is touched: nothing written on refusal
        refuse_if_locked(folder)
    if not (resuming or overwrite):
        _refuse_existing_run(run_dir, checkpoint_dir)
    with contextlib.ExitStack() as stack:
        for folder in folders:
            _make_dir(folder)
            stack.enter_context(_locked(folder))
        if not resuming and not overwrite:  # again under the lock: another run may have
            _refuse_existing_run(run_dir, checkpoint_dir)  # started meanwhile
            _say_unfinished(run_dir, checkpoint_dir)
        if not resuming:  # what a run left, or one that failed before its first save
            remove_run_files(run_dir, checkpoint_dir)
        for folder in folders:
            if not (folder / MARKER).exists():
                _mark(folder)
        _check_writable(run_dir)
        yield


def _refuse_existing_run(run_dir: Path, checkpoint_dir: Path) -> None:
    """Refuse a run directory holding a run: a checkpoint, or a finished run's summary. A
    directory of a run that failed before its first complete save holds neither: nothing to
    resume. The refusal says to resume the run only when one of its checkpoints is intact."""
    existing = RunDirectory.inspect(run_dir)
    if not saved_checkpoints(checkpoint_dir) and (not existing.holds_summary
                                                  or stopped_on_refused_loss(run_dir)):
        return  # nothing to resume: a run that failed (or a refused loss stopped) unsaved
    held = [*existing.ours] if existing.marked or existing.legacy_run else []
    held += [] if within(checkpoint_dir, run_dir) else [str(checkpoint_dir)]
    problem = _why_not_resumable(checkpoint_dir)
    if problem is None:
        raise FileExistsError(
            f"{run_dir} already holds a run ({', '.join(held)}). Resume it with "
            f"ckpt_path='last' (rltrain fit --resume {run_dir}), replace it with "
            "overwrite=True (--overwrite), or choose another run directory.")
    raise FileExistsError(
        f"{run_dir} already holds a run ({', '.join(held)}) that cannot be resumed: its "
        f"checkpoint folder {checkpoint_dir} {problem}. There is nothing to resume: replace the "
        "run with overwrite=True (add --overwrite to this command; it removes rltrain's files "
        "from the run directory, no other file), or choose another run directory.")


def _why_not_resumable(checkpoint_dir: Path) -> str | None:
    """Why no checkpoint in ``checkpoint_dir`` can be resumed (None when one can, or when its
    manifest is refused: resuming then says why)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unreadable manifest: resuming warns of it
            manifest = Checkpointer(checkpoint_dir).manifest()
    except ManifestError:
        return None
    store = LocalFiles(checkpoint_dir)
    name, skipped = find_intact(store, manifest, "last")
    if name is not None:
        return None
    return what_is_left(store, skipped) or "holds no checkpoint"


def _say_unfinished(run_dir: Path, checkpoint_dir: Path) -> None:
    """Warn that a new run takes ``run_dir`` although its checkpoint folder holds what a save
    that did not finish left (removed with the failed run's other files)."""
    parts = unfinished_saves(LocalFiles(checkpoint_dir))
    if parts and not saved_checkpoints(checkpoint_dir):
        warnings.warn(
            f"{run_dir} holds no complete checkpoint, only what a save that did not finish "
            f"left in {checkpoint_dir} ({', '.join(parts[:4])}"
            f"{f' and {len(parts) - 4} more' if len(parts) > 4 else ''}): the run it belongs "
            "to stopped before its first checkpoint and cannot be resumed. Starting a new run "
            "there; the files the failed run left are removed (rltrain's only).", stacklevel=4)


def prepare_run(run_dir: Path, config: DictConfig) -> None:
    """Make ``run_dir`` a run that has not started: marked as rltrain's, holding ``config`` as
    its ``config.yaml``, which ``rltrain fit --resume RUN_DIR`` starts from (the runs of a seed
    group or a study: each reads its config as any stored config, untrusted). A folder that is
    not rltrain's, is being written or holds a run is refused, and nothing is written then."""
    if run_dir.is_symlink():
        raise FileExistsError(f"{run_dir} is a symbolic link; rltrain never writes a run "
                              "through a link. Remove it.")
    _refuse_foreign(RunDirectory.inspect(run_dir))
    refuse_if_locked(run_dir)
    _refuse_existing_run(run_dir, run_dir / "checkpoints")
    _make_dir(run_dir)
    remove_run_files(run_dir, run_dir / "checkpoints")  # what a run that never saved left
    if not (run_dir / MARKER).exists():
        _mark(run_dir)
    save_config(config, run_dir / "config.yaml")


def not_started(run_dir: Path, checkpoint_dir: Path) -> bool:
    """Whether ``run_dir`` is a run :func:`prepare_run` made that has not started: marked as
    rltrain's, holding its config and no other file of rltrain's, no checkpoint file."""
    folder = RunDirectory.inspect(run_dir)
    return (folder.marked and folder.ours == ("config.yaml",)
            and not checkpoint_files(checkpoint_dir))


def checkpoint_files(directory: Path) -> list[Path]:
    """rltrain's files in a checkpoint folder: checkpoints, links, manifest, temporary files."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _is_checkpoint_file(p.name))


def saved_checkpoints(directory: Path) -> list[Path]:
    """The checkpoints in a checkpoint folder (``checkpoint-*.pt``, ``best-*.pt`` and the
    ``last``/``best`` links): what a run can be resumed from; not its manifest, temporary
    files or shards (a shard is part of its checkpoint; without it, what a save that did not
    finish left)."""
    return [path for path in checkpoint_files(directory)
            if path.name in LINKS or CHECKPOINT_NAME.fullmatch(path.name)
            or BEST_NAME.fullmatch(path.name)]


def remove_run_files(run_dir: Path, checkpoint_dir: Path) -> None:
    """Delete the files rltrain writes in ``run_dir`` and ``checkpoint_dir`` (an emptied
    ``checkpoints`` folder too); every other file stays."""
    for path in checkpoint_files(checkpoint_dir):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: it holds files rltrain did not write
        if checkpoint_dir == run_dir / "checkpoints":
            checkpoint_dir.rmdir()
    for name in RunDirectory.inspect(run_dir).ours:
        path = run_dir / name
        if name != "checkpoints" and (path.is_symlink() or path.is_file()):
            path.unlink()


def _is_checkpoint_file(name: str) -> bool:
    return bool(name in (MANIFEST, *LINKS) or CHECKPOINT_NAME.fullmatch(name)
                or BEST_NAME.fullmatch(name) or SHARD_NAME.fullmatch(name)
                or TEMPORARY_NAME.fullmatch(name))


def _refuse_foreign(folder: RunDirectory) -> None:
    """Refuse a folder holding rltrain's file names that rltrain did not mark as a run."""
    path = folder.path
    _refuse_odd(path)
    links = [n for n in ("checkpoints", MARKER, LOCK, *RUN_FILES) if (path / n).is_symlink()]
    if links:
        raise FileExistsError(
            f"{path} holds symbolic links where rltrain writes its own files "
            f"({', '.join(links)}); rltrain never writes through a link in a run directory. "
            "Remove the links or choose another run_dir.")
    if folder.marked or not folder.ours or folder.legacy_run:
        return
    raise FileExistsError(
        f"{path} is not an rltrain run (it has no {MARKER}) but holds "
        f"{', '.join(folder.ours)}, which rltrain would overwrite. rltrain only writes into a "
        "new or empty directory, a directory of other tools' files, or its own runs: choose "
        "another run_dir, or move those files away.")


def _refuse_foreign_checkpoints(path: Path) -> None:
    """Refuse a checkpoint folder holding checkpoint file names but neither rltrain's marker nor
    its manifest."""
    _refuse_odd(path)
    found = checkpoint_files(path)
    if found and not (path / MARKER).exists() and not (path / MANIFEST).is_file():
        raise FileExistsError(
            f"{path} holds {', '.join(p.name for p in found[:5])} but is not an rltrain "
            f"checkpoint folder (no {MARKER} or {MANIFEST}); rltrain will not overwrite or "
            "delete files it did not write. Choose another checkpoint_dir.")


def _refuse_odd(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file, not a directory. Choose a directory that "
                              "exists or does not exist yet.")


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PermissionError(
            f"Cannot write to the run directory {path}: {error}. Choose a run_dir you can "
            "write to (run_dir=..., or trainer.run_dir=... on the command line).") from error


def _check_writable(run_dir: Path) -> None:
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise PermissionError(
            f"Cannot write to the run directory {run_dir}: {error}. Choose a run_dir you can "
            "write to (run_dir=..., or trainer.run_dir=... on the command line).") from error


def _mark(folder: Path) -> None:
    from rltrain._version import __version__

    atomic_write_text(folder / MARKER, json.dumps(
        {"format": 1, "rltrain": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        indent=2) + "\n")


#: Bytes of the lock file's holder record: written whole in one write, padded with spaces, so a
#: reader sees the previous holder's record or the new one, never an empty or partial file.
HOLDER_BYTES = 256


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock file locked, or raise :class:`RunDirectoryLocked` naming the
    process that holds it. The lock file itself is never deleted (so every process locks the
    same file)."""
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise PermissionError(f"Cannot create the lock file {path}: {error}. Choose a run_dir "
                              "you can write to.") from error
    try:
        if not _try_lock(fd, fcntl.LOCK_EX, patience=0.2):  # a probe's lock lasts microseconds
            raise _in_use(folder, fd)
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": time.strftime("%Y-%m-%d %H:%M:%S")})
        os.pwrite(fd, record.encode()[:HOLDER_BYTES].ljust(HOLDER_BYTES), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def refuse_if_locked(folder: Path) -> None:
    """Raise :class:`RunDirectoryLocked` when a process holds ``folder``'s lock, writing nothing
    (the lock file is opened read-only and only tried)."""
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # no lock file: no run has held this folder
    try:
        if not _try_lock(fd, fcntl.LOCK_SH, patience=0.0):
            raise _in_use(folder, fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _try_lock(fd: int, kind: int, patience: float) -> bool:
    """``flock(fd, kind)`` without blocking, tried again for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _in_use(folder: Path, fd: int) -> RunDirectoryLocked:
    return RunDirectoryLocked(
        f"{folder} is in use by another rltrain run ({_holder(fd)}); one process writes a run "
        "directory at a time. Wait for that run to end, stop it, or choose another run "
        "directory.")


def _holder(fd: int, patience: float = 1.0) -> str:
    """Who holds the lock, from its record. The holder writes the record just after it locks:
    a record that is missing, or names a process that is gone (the previous holder's), is
    read again for up to ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while True:
        try:
            holder = json.loads(os.pread(fd, HOLDER_BYTES, 0).decode())
            pid, host = int(holder["pid"]), str(holder["host"])[:64]
            current = host != socket.gethostname() or _alive(pid)
            if current or time.monotonic() > deadline:
                return f"PID {pid} on {host}, since {str(holder['since'])[:32]}"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "its PID could not be read from the lock file"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True

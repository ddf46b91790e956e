"""Checkpoint files: written atomically (a temporary file synced, then renamed into place) and
hashed while written; read back with ``torch.load(weights_only=True)``, so loading runs no code;
checked against what a manifest lists; and the newest intact one found (:func:`resolve_intact`:
``last`` or ``best``, or the newest intact checkpoint when that one is broken, and what to say
when none is intact).

A checkpoint is intact when its file matches the manifest's size and SHA-256 and every shard it
lists is there (each shard's own checksum is in the checkpoint, checked when a rank loads it).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from rltrain.checkpoint.manifest import (
    BEST_NAME,
    CHECKPOINT_NAME,
    SHARD_NAME,
    TEMPORARY_NAME,
    Entry,
    Manifest,
    step_of,
)


def check_entry(path: Path, entry: Entry) -> str | None:
    """Why ``path`` does not match its manifest ``entry`` (None when it does)."""
    if not path.is_file():
        return "the file is missing"
    if entry.sha256 is None:
        return None
    size = path.stat().st_size
    if size != entry.bytes:
        return (f"it has {size:,} bytes where the manifest says {entry.bytes:,} (truncated, or "
                "written over after it was listed)")
    if file_sha256(path) != entry.sha256:
        return "its SHA-256 checksum does not match the manifest's"
    return None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex (what the manifest records)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: How torch names a global its safe unpickler refused (2.6 to 2.13 wordings).
_BLOCKED_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)")


def torch_load(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``, its failures as a ``ValueError`` that names the
    file and never passes on torch's advice to load with ``weights_only=False``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notes about pickle protocols: not the user's
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = _BLOCKED_GLOBAL.search(str(error))
        if found is None:
            raise ValueError(
                f"{path} is not an rltrain checkpoint: it is not a file of tensors and plain "
                "data (its pickle uses an instruction a checkpoint never holds; nothing in it "
                "ran). It was not written by rltrain, or it was altered.") from error
        raise ValueError(
            f"{path} holds objects a checkpoint must not contain (it names {found.group(1)}; "
            "only tensors and plain data are loaded, so nothing in it ran). It was not written "
            "by rltrain, or it was altered.") from error
    except Exception as error:  # torch raises RuntimeError, EOFError, OSError, UnicodeError...
        detail = str(error).splitlines()[0].rstrip(". ") if str(error) else ""
        if not detail.startswith("PytorchStreamReader"):  # torch's internals, or its unsafe
            detail = "its bytes are not a torch checkpoint archive"  # weights_only advice
        raise ValueError(f"{path} is not a readable checkpoint (truncated, corrupt, or not a "
                         f"checkpoint file): {detail}.") from error


class _HashingWriter:
    """A binary file that also hashes and counts what is written to it."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.sha256 = hashlib.sha256()
        self.size = 0
        #: The error a write raised (``torch.save`` reports it as its own "unexpected pos").
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        try:
            return self.file.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.file.flush()


def atomic_save(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """``torch.save`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Returns ``{"sha256": ..., "bytes": ...}`` of what was written (hashed while writing).
    """
    result: dict[str, Any] = {}

    def write(file: BinaryIO) -> None:
        writer = _HashingWriter(file)
        try:
            torch.save(state, writer)  # type: ignore[arg-type]
        except RuntimeError:  # a failed write (a full disk) as torch words it: say the cause
            if writer.error is not None:
                raise writer.error from None
            raise
        result.update(sha256=writer.sha256.hexdigest(), bytes=writer.size)

    atomic_write(path, write)
    return result


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through ``write`` into a temporary file beside ``path``, sync it and rename
    it over ``path``: readers see the old file or the whole new one, never a part; a symbolic
    link at ``path`` is replaced, not followed. A failed write (a full disk) leaves ``path`` as
    it was and removes the temporary file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a checkpoint is as readable as other files
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        if str(path) in str(error):
            raise
        raise OSError(error.errno, f"Cannot write {path}: {error.strerror or error}") from error
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write` of UTF-8 text."""
    data = text.encode("utf-8")
    atomic_write(path, lambda file: file.write(data))


#: What ``checkpoint-200.rank1.pt`` is a part of: ``checkpoint-200.pt``.
_RANK_SUFFIX = re.compile(r"\.rank\d{1,6}\.pt$")


def resolve_intact(directory: Path, manifest: Manifest, which: str) -> Path:
    """The newest intact checkpoint of ``directory`` for ``which`` (``"last"``, ``"best"``).

    Tried in order: for ``last``, the listed checkpoints (newest written first), the files
    found without a usable manifest (most env steps first), then the best; for ``best``, the
    best, then the checkpoints as for ``last`` (only when a best was saved). A file tried and
    found broken is named in one warning with the file used instead. Raises
    ``FileNotFoundError`` saying what the folder holds and what to do when none is intact.
    """
    path, skipped = find_intact(directory, manifest, which)
    if path is None:
        raise FileNotFoundError(nothing_intact(directory, which, skipped))
    _warn_fallback(directory, which, skipped, path)
    return path


def find_intact(directory: Path, manifest: Manifest, which: str
                ) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The checkpoint :func:`resolve_intact` picks (None when none is intact), and the files
    it tried first, each with what is wrong with it; warns of nothing."""
    skipped: list[tuple[Path, str]] = []
    for entry in candidates(manifest, which):
        path = directory / entry.file
        problem = entry_problem(directory, entry)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def candidates(manifest: Manifest, which: str) -> list[Entry]:
    """The checkpoints ``which`` may resolve to, in the order they are tried."""
    checkpoints = [*reversed(manifest.checkpoints), *_recovered(manifest, CHECKPOINT_NAME)]
    bests = [*([manifest.best] if manifest.best is not None else []),
             *_recovered(manifest, BEST_NAME)]
    if which == "best":
        return [*bests, *checkpoints] if bests else []
    return [*checkpoints, *bests]


def _recovered(manifest: Manifest, pattern: re.Pattern[str]) -> list[Entry]:
    names = sorted((n for n in manifest.recovered if pattern.fullmatch(n)), key=step_of,
                   reverse=True)
    return [Entry(name, step_of(name)) for name in names]


def entry_problem(directory: Path, entry: Entry) -> str | None:
    """Why checkpoint ``entry`` of ``directory`` cannot be loaded (None when it can)."""
    problem = check_entry(directory / entry.file, entry)
    if problem is not None:
        return problem
    missing = [name for name in entry.files()[1:] if not (directory / name).is_file()]
    if missing:
        return (f"its per-rank part{'s' if len(missing) > 1 else ''} {', '.join(missing[:3])}"
                f"{' (and more)' if len(missing) > 3 else ''} "
                f"{'are' if len(missing) > 1 else 'is'} missing")
    return None


def _warn_fallback(directory: Path, which: str, skipped: list[tuple[Path, str]],
                   used: Path) -> None:
    """Warn when ``which`` resolved to another file than the one it names."""
    wanted_best = which == "best"
    is_best = BEST_NAME.fullmatch(used.name) is not None
    if not skipped and wanted_best == is_best:
        return
    kind = ("the best evaluation's checkpoint" if is_best
            else "the newest intact checkpoint" + (", not the best evaluation's"
                                                   if wanted_best else ""))
    if skipped:
        broken = "; ".join(f"{path}: {problem}" for path, problem in skipped)
        said = f"Skipping checkpoint {broken}. Using {used} instead ({kind})."
    else:
        said = f"No {which} checkpoint in {directory}; using {used} instead ({kind})."
    warnings.warn(said, stacklevel=4)


def unfinished_saves(directory: Path) -> list[str]:
    """What saves that did not finish left in ``directory``: shards without the checkpoint they
    belong to (a process stopped during a save of a run of several), and temporary files."""
    if not directory.is_dir():
        return []
    names = {p.name for p in directory.iterdir() if not p.is_dir()}
    orphans = [n for n in names
               if SHARD_NAME.fullmatch(n) and _RANK_SUFFIX.sub(".pt", n) not in names]
    return sorted(orphans + [n for n in names if TEMPORARY_NAME.fullmatch(n)])


def nothing_intact(directory: Path, which: str, skipped: list[tuple[Path, str]]) -> str:
    """The error when no checkpoint of ``directory`` is intact: what it holds, what to do."""
    head = f"No intact {which} checkpoint in {directory}"
    held = what_is_left(directory, skipped)
    if held is not None:
        return f"{head}: {held}. {restart_advice(directory)}"
    if which == "best" and directory.is_dir() and any(
            CHECKPOINT_NAME.fullmatch(p.name) for p in directory.iterdir()):
        return (f"{head}: no evaluation was saved as best (keep_best=False, or no evaluation "
                "ran). Use 'last', or a checkpoint file.")
    return (f"{head}. Checkpoints are written to <run_dir>/checkpoints/ while training "
            "(last: checkpoint-<env_steps>.pt, best: best-<env_steps>.pt); a run stopped "
            "before its first save has none, and nothing to resume: start it again without "
            "ckpt_path (rltrain fit without --resume).")


def what_is_left(directory: Path, skipped: list[tuple[Path, str]]) -> str | None:
    """What a checkpoint folder without an intact checkpoint holds, when it holds something:
    broken checkpoints (``skipped``: :func:`find_intact`'s), or what unfinished saves left."""
    if skipped:
        broken = "; ".join(f"{path.name}: {problem}" for path, problem in skipped)
        return f"every checkpoint in it is unusable ({broken})"
    parts = unfinished_saves(directory)
    if parts:
        return (f"it holds only what saves that did not finish left ({_listing(parts)}): a "
                "process of the run was stopped during a save, before any checkpoint was "
                "complete")
    return None


def restart_advice(directory: Path) -> str:
    """What to do with a run whose checkpoint folder ``directory`` has nothing to resume."""
    run = directory.parent if directory.name == "checkpoints" else Path("<run_dir>")
    return ("There is nothing to resume: start the run again, with overwrite=True and no "
            f"ckpt_path (rltrain fit --overwrite {run / 'config.yaml'} trainer.run_dir={run}, "
            "under torchrun as before if it ran there), which removes rltrain's files from the "
            "run directory and its checkpoint folder (no other file).")


def _listing(names: list[str], most: int = 4) -> str:
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")

"""Which checkpoint of a store can be resumed: files checked against what the manifest lists,
and the newest intact one found (:func:`resolve_intact`: ``last`` or ``best``, or the newest
intact checkpoint when that one is broken, and what to say when none is intact).

A checkpoint is intact when its file matches the manifest's size and SHA-256 and every shard it
lists is there (each shard's own checksum is in the checkpoint, checked when a rank loads it).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from rltrain.checkpoint.io import CheckpointIO
from rltrain.checkpoint.manifest import (
    BEST_NAME,
    CHECKPOINT_NAME,
    SHARD_NAME,
    TEMPORARY_NAME,
    Entry,
    Manifest,
    step_of,
)


def check_entry(store: CheckpointIO, name: str, entry: Entry) -> str | None:
    """Why file ``name`` of ``store`` does not match its manifest ``entry`` (None when it
    does)."""
    size = store.size(name)
    if size is None:
        return "the file is missing"
    if entry.sha256 is None:
        return None
    if size != entry.bytes:
        return (f"it has {size:,} bytes where the manifest says {entry.bytes:,} (truncated, or "
                "written over after it was listed)")
    if store.sha256(name) != entry.sha256:
        return "its SHA-256 checksum does not match the manifest's"
    return None


#: What ``checkpoint-200.rank1.pt`` is a part of: ``checkpoint-200.pt``.
_RANK_SUFFIX = re.compile(r"\.rank\d{1,6}\.pt$")


def resolve_intact(store: CheckpointIO, manifest: Manifest, which: str) -> str:
    """The name of the newest intact checkpoint of ``store`` for ``which`` (``"last"``,
    ``"best"``).

    Tried in order: for ``last``, the listed checkpoints (newest written first), the files
    found without a usable manifest (most env steps first), then the best; for ``best``, the
    best, then the checkpoints as for ``last`` (only when a best was saved). A file tried and
    found broken is named in one warning with the file used instead. Raises
    ``FileNotFoundError`` saying what the folder holds and what to do when none is intact.
    """
    name, skipped = find_intact(store, manifest, which)
    if name is None:
        raise FileNotFoundError(nothing_intact(store, which, skipped))
    _warn_fallback(store, which, skipped, name)
    return name


def find_intact(store: CheckpointIO, manifest: Manifest, which: str
                ) -> tuple[str | None, list[tuple[str, str]]]:
    """The checkpoint :func:`resolve_intact` picks (None when none is intact), and the files
    it tried first, each with what is wrong with it; warns of nothing."""
    skipped: list[tuple[str, str]] = []
    for entry in candidates(manifest, which):
        problem = entry_problem(store, entry)
        if problem is None:
            return entry.file, skipped
        skipped.append((entry.file, problem))
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


def entry_problem(store: CheckpointIO, entry: Entry) -> str | None:
    """Why checkpoint ``entry`` of ``store`` cannot be loaded (None when it can)."""
    problem = check_entry(store, entry.file, entry)
    if problem is not None:
        return problem
    missing = [name for name in entry.files()[1:] if store.size(name) is None]
    if missing:
        return (f"its per-rank part{'s' if len(missing) > 1 else ''} {', '.join(missing[:3])}"
                f"{' (and more)' if len(missing) > 3 else ''} "
                f"{'are' if len(missing) > 1 else 'is'} missing")
    return None


def _warn_fallback(store: CheckpointIO, which: str, skipped: list[tuple[str, str]],
                   used: str) -> None:
    """Warn when ``which`` resolved to another file than the one it names."""
    wanted_best = which == "best"
    is_best = BEST_NAME.fullmatch(used) is not None
    if not skipped and wanted_best == is_best:
        return
    kind = ("the best evaluation's checkpoint" if is_best
            else "the newest intact checkpoint" + (", not the best evaluation's"
                                                   if wanted_best else ""))
    if skipped:
        broken = "; ".join(f"{store.where(name)}: {problem}" for name, problem in skipped)
        said = f"Skipping checkpoint {broken}. Using {store.where(used)} instead ({kind})."
    else:
        said = (f"No {which} checkpoint in {store.location}; using {store.where(used)} instead "
                f"({kind}).")
    warnings.warn(said, stacklevel=4)


def unfinished_saves(store: CheckpointIO) -> list[str]:
    """What saves that did not finish left in ``store``: shards without the checkpoint they
    belong to (a process stopped during a save of a run of several), and temporary files."""
    names = set(store.names())
    orphans = [n for n in names
               if SHARD_NAME.fullmatch(n) and _RANK_SUFFIX.sub(".pt", n) not in names]
    return sorted(orphans + [n for n in names if TEMPORARY_NAME.fullmatch(n)])


def nothing_intact(store: CheckpointIO, which: str, skipped: list[tuple[str, str]]) -> str:
    """The error when no checkpoint of ``store`` is intact: what it holds, what to do."""
    head = f"No intact {which} checkpoint in {store.location}"
    held = what_is_left(store, skipped)
    if held is not None:
        return f"{head}: {held}. {restart_advice(store)}"
    if which == "best" and any(CHECKPOINT_NAME.fullmatch(n) for n in store.names()):
        return (f"{head}: no evaluation was saved as best (keep_best=False, or no evaluation "
                "ran). Use 'last', or a checkpoint file.")
    return (f"{head}. Checkpoints are written to <run_dir>/checkpoints/ while training "
            "(last: checkpoint-<env_steps>.pt, best: best-<env_steps>.pt); a run stopped "
            "before its first save has none, and nothing to resume: start it again without "
            "ckpt_path (rltrain fit without --resume).")


def what_is_left(store: CheckpointIO, skipped: list[tuple[str, str]]) -> str | None:
    """What a checkpoint folder without an intact checkpoint holds, when it holds something:
    broken checkpoints (``skipped``: :func:`find_intact`'s), or what unfinished saves left."""
    if skipped:
        broken = "; ".join(f"{name}: {problem}" for name, problem in skipped)
        return f"every checkpoint in it is unusable ({broken})"
    parts = unfinished_saves(store)
    if parts:
        return (f"it holds only what saves that did not finish left ({_listing(parts)}): a "
                "process of the run was stopped during a save, before any checkpoint was "
                "complete")
    return None


def restart_advice(store: CheckpointIO) -> str:
    """What to do with a run whose checkpoint folder has nothing to resume."""
    directory = Path(store.location)
    run = directory.parent if directory.name == "checkpoints" else Path("<run_dir>")
    return ("There is nothing to resume: start the run again, with overwrite=True and no "
            f"ckpt_path (rltrain fit --overwrite {run / 'config.yaml'} trainer.run_dir={run}, "
            "under torchrun as before if it ran there), which removes rltrain's files from the "
            "run directory and its checkpoint folder (no other file).")


def _listing(names: list[str], most: int = 4) -> str:
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")

"""A checkpoint folder's ``manifest.json``, read as untrusted input.

The manifest names the checkpoint files rltrain wrote in its folder, with their checksums. Every
name and number in it is checked before it is used: a name must be one of rltrain's own plain
file names in the folder (``checkpoint-<env_steps>.pt``, ``best-<env_steps>.pt``, and
``checkpoint-<env_steps>.v<n>.pt``, ``best-<env_steps>.v<n>.pt`` for a step saved again), never
a path, so that a crafted manifest cannot make retention delete, or loading read, a file
elsewhere.

A file the manifest lists is never written over: a step saved again (a run resumed and stopped
at the same step, or resumed from an older checkpoint) is written under a new revision's name
(:func:`fresh_name`), the manifest switched to it, and only then the old file deleted.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from rltrain.checkpoint.io import CheckpointIO

#: Version of the checkpoint layout written by :func:`~rltrain.checkpoint.training_state`.
CHECKPOINT_FORMAT = 1
#: The file listing a checkpoint folder's checkpoints with their checksums.
MANIFEST = "manifest.json"

#: The names of the files rltrain writes in a checkpoint folder (its temporary files start
#: with a dot and end in ``.tmp``: ``.checkpoint-200.pt.k3j2.tmp``).
#: A step saved again gets a revision, ``checkpoint-200.v2.pt``: a listed file is never
#: written over.
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d{1,18})(?:\.v\d{1,6})?\.pt")
BEST_NAME = re.compile(r"best-(\d{1,18})(?:\.v\d{1,6})?\.pt")
#: One rank's part of a checkpoint of a run of several processes (its envs, storage, random
#: streams): ``checkpoint-200.rank1.pt`` beside ``checkpoint-200.pt``.
SHARD_NAME = re.compile(r"(?:checkpoint|best)-(\d{1,18})(?:\.v\d{1,6})?\.rank(\d{1,6})\.pt")
#: Most shards one checkpoint may list (a bound on what a manifest can make rltrain look for).
MAX_SHARDS = 100_000
#: Most revisions of one step (a bound on the names :func:`fresh_name` tries).
MAX_REVISION = 999_999
TEMPORARY_NAME = re.compile(
    r"\.(?:(?:checkpoint|best)-\d{1,18}(?:\.v\d{1,6})?(?:\.rank\d{1,6})?\.pt|manifest\.json"
    r"|last\.pt|best\.pt)\..+\.tmp")
LINKS = ("last.pt", "best.pt")


class ManifestError(ValueError):
    """A manifest names something that is not one of its folder's checkpoint files."""


@dataclass(frozen=True)
class Entry:
    """One checkpoint file listed in the manifest.

    Attributes:
        file: Its plain name in the folder (``checkpoint-200.pt``, ``best-200.pt``).
        env_steps: Env steps done when it was taken.
        sequence: Its place in the order of writing (``last`` is the highest).
        sha256: The SHA-256 of its bytes, as hex; None for a file listed without one.
        bytes: Its size; None with ``sha256``.
        eval_return: The evaluation return it was saved for (``best`` only).
        shards: The per-rank files beside it (:func:`shard_name`), one per rank of the run
            of several processes that wrote it; 0 for a run of one process.
    """

    file: str
    env_steps: int
    sequence: int = 0
    sha256: str | None = None
    bytes: int | None = None
    eval_return: float | None = None
    shards: int = 0

    def files(self) -> list[str]:
        """The file and its shards."""
        return [self.file, *(shard_name(self.file, rank) for rank in range(self.shards))]

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "env_steps": self.env_steps}
        if self.shards:
            data["shards"] = self.shards
        if not BEST_NAME.fullmatch(self.file):
            data["sequence"] = self.sequence
        if self.eval_return is not None:
            data["eval_return"] = self.eval_return
        if self.sha256 is not None:
            data.update(sha256=self.sha256, bytes=self.bytes)
        return data


@dataclass
class Manifest:
    """What a checkpoint folder holds.

    Attributes:
        checkpoints: The kept ``checkpoint-*.pt`` files, oldest written first.
        last: The newest written of them (its name).
        best: The best evaluation's checkpoint.
        recovered: Files found in the folder when its manifest could not be read: listed so
            that nothing deletes them, and tried when no listed checkpoint is intact.
        fallback: True when the manifest on disk could not be read and this one was made from
            the files in the folder instead (not saved).
    """

    checkpoints: list[Entry] = field(default_factory=list)
    last: str | None = None
    best: Entry | None = None
    recovered: list[str] = field(default_factory=list)
    fallback: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"format": CHECKPOINT_FORMAT,
                "checkpoints": [e.as_json() for e in self.checkpoints],
                "last": self.last, "best": None if self.best is None else self.best.as_json(),
                "recovered": list(self.recovered)}

    def names(self) -> set[str]:
        """Every file name the manifest lists (kept checkpoints, best, recovered)."""
        listed = {name for e in self.checkpoints for name in e.files()} | set(self.recovered)
        if self.best is not None:
            listed.update(self.best.files())
        return listed

    def entries(self, name: str) -> list[Entry]:
        """The entries of file ``name`` (empty when it is not listed)."""
        entries = [*self.checkpoints, *([self.best] if self.best is not None else [])]
        return [e for e in entries if e.file == name]


def read_manifest(store: CheckpointIO) -> Manifest:
    """The manifest of ``store``: empty when there is none and no checkpoint file either;
    else, when there is none or it cannot be read (with a warning), made from the checkpoint
    files in the folder, which are then never deleted. Raises :class:`ManifestError` when it
    names anything but a checkpoint file of the folder."""
    try:
        text = store.read_bytes(MANIFEST).decode("utf-8")
    except FileNotFoundError:
        if any(CHECKPOINT_NAME.fullmatch(n) or BEST_NAME.fullmatch(n) for n in store.names()):
            # A crash before the first manifest, or a deleted one: the files are kept, silently.
            return _fallback(store, "", warn=False)
        return Manifest()
    except (OSError, UnicodeDecodeError) as error:
        return _fallback(store, f"it cannot be read ({error})")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        return _fallback(store, f"it is not valid JSON ({str(error)[:200]})")
    try:
        return parse_manifest(data, store.where(MANIFEST))
    except _Malformed as error:
        return _fallback(store, str(error))


class _Malformed(Exception):
    """The manifest's JSON does not have the manifest's shape."""


def parse_manifest(data: Any, path: str) -> Manifest:
    """Check a manifest's JSON: its shape (else ``_Malformed``) and every name in it (else
    :class:`ManifestError`, naming the entry)."""
    if not isinstance(data, dict):
        raise _Malformed(f"it holds a JSON {type(data).__name__}, not an object")
    listed = data.get("checkpoints", [])
    if not isinstance(listed, list):
        raise _Malformed("its 'checkpoints' is not a list")
    checkpoints = [_entry(item, f"checkpoints[{i}]", path, CHECKPOINT_NAME)
                   for i, item in enumerate(listed)]
    best = data.get("best")
    best_entry = None if best is None else _entry(best, "best", path, BEST_NAME)
    last = data.get("last")
    if last is not None and (not isinstance(last, str)
                             or last not in {e.file for e in checkpoints}):
        _refuse(path, "last", last, "one of the files its 'checkpoints' lists")
    recovered = data.get("recovered", [])
    if not isinstance(recovered, list):
        raise _Malformed("its 'recovered' is not a list")
    for i, name in enumerate(recovered):
        if not (isinstance(name, str) and (CHECKPOINT_NAME.fullmatch(name)
                                           or BEST_NAME.fullmatch(name))):
            _refuse(path, f"recovered[{i}]", name, "a checkpoint file of this folder")
    return Manifest(checkpoints, last, best_entry, list(recovered))


def _entry(item: Any, where: str, path: str, pattern: re.Pattern[str]) -> Entry:
    if not isinstance(item, dict):
        raise _Malformed(f"its {where} is a JSON {type(item).__name__}, not an object")
    name = item.get("file")
    kind = "checkpoint-<env_steps>.pt" if pattern is CHECKPOINT_NAME else "best-<env_steps>.pt"
    matched = pattern.fullmatch(name) if isinstance(name, str) else None
    if matched is None or not isinstance(name, str):
        _refuse(path, where, name, f"a plain file name of this folder ({kind})")
    numbers = {key: item.get(key) for key in ("env_steps", "sequence", "bytes", "shards")}
    for key, value in numbers.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
            raise _Malformed(f"its {where} has {key}={value!r}, not a count")
    digest, eval_return = item.get("sha256"), item.get("eval_return")
    if digest is not None and not (isinstance(digest, str)
                                   and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise _Malformed(f"its {where} has a sha256 that is not 64 hex digits")
    if (digest is None) != (numbers["bytes"] is None):
        raise _Malformed(f"its {where} has one of sha256 and bytes without the other")
    if eval_return is not None and (not isinstance(eval_return, (int, float))
                                    or not math.isfinite(eval_return)):
        raise _Malformed(f"its {where} has eval_return={eval_return!r}, not a number")
    if (numbers["shards"] or 0) > MAX_SHARDS:
        raise _Malformed(f"its {where} lists {numbers['shards']} shards, more than "
                         f"{MAX_SHARDS:,}")
    steps = int(matched.group(1))
    return Entry(name, numbers["env_steps"] if numbers["env_steps"] is not None else steps,
                 numbers["sequence"] or 0, digest, numbers["bytes"],
                 None if eval_return is None else float(eval_return), numbers["shards"] or 0)


def _refuse(path: str, where: str, name: Any, expected: str) -> NoReturn:
    raise ManifestError(
        f"{path}: its entry {where} names {name!r}, which is not {expected}; refusing to use "
        "this manifest (rltrain only reads and deletes its own files in the checkpoint folder). "
        "It was altered or not written by rltrain: restore it, or move it away to resume from "
        "the checkpoint files in the folder.")


def _fallback(store: CheckpointIO, why: str, *, warn: bool = True) -> Manifest:
    found = [n for n in store.names() if (CHECKPOINT_NAME.fullmatch(n) or BEST_NAME.fullmatch(n))
             and store.is_plain(n)]
    if not warn:
        return Manifest(recovered=sorted(found, key=step_of), fallback=True)
    warnings.warn(
        f"{store.where(MANIFEST)} is unusable: {why}. Using the checkpoint files in the folder "
        f"instead ({', '.join(sorted(found, key=step_of)) or 'none'}), unchecked; none of "
        "them will be deleted.", stacklevel=3)
    return Manifest(recovered=sorted(found, key=step_of), fallback=True)


def fresh_name(kind: str, env_steps: int, listed: set[str]) -> str:
    """The name of a new ``kind`` (``"checkpoint"``, ``"best"``) file for ``env_steps`` that is
    not ``listed`` (:meth:`Manifest.names`): ``checkpoint-200.pt`` the first time, else the first
    free revision (``checkpoint-200.v2.pt``, ``.v3``...). Its shards' names follow from it."""
    for revision in range(1, MAX_REVISION + 1):
        name = f"{kind}-{env_steps}.pt" if revision == 1 else f"{kind}-{env_steps}.v{revision}.pt"
        if name not in listed:
            return name
    raise ValueError(f"{kind} at {env_steps} env steps was saved {MAX_REVISION:,} times: "
                     "the manifest lists every revision's name.")


def shard_name(name: str, rank: int) -> str:
    """The file of rank ``rank``'s part of checkpoint ``name``: ``checkpoint-200.rank1.pt``."""
    return f"{name.removesuffix('.pt')}.rank{rank}.pt"


def step_of(name: str) -> int:
    """The env steps in a checkpoint file's name (``checkpoint-200.pt``: 200)."""
    found = CHECKPOINT_NAME.fullmatch(name) or BEST_NAME.fullmatch(name)
    return int(found.group(1)) if found else -1


def with_entry(manifest: Manifest, entry: Entry, keep_last: int) -> tuple[Manifest, list[str]]:
    """``manifest`` with ``entry`` as its newest checkpoint and ``last``, keeping the newest
    ``keep_last`` checkpoints; returns it and the names of the checkpoints dropped (to delete,
    once it is written): those retention drops, and an earlier save of ``entry``'s step, which
    it replaces. Recovered files are never dropped."""
    steps = step_of(entry.file)
    replaced = [e for e in manifest.checkpoints if step_of(e.file) == steps]
    kept = [e for e in manifest.checkpoints if step_of(e.file) != steps] + [entry]
    old = replaced + kept[:-keep_last]
    dropped = [name for e in old if e.sha256 is not None for name in e.files()
               if name not in entry.files()]  # never the file just written
    unchecked = [e.file for e in old if e.sha256 is None]  # not known to be rltrain's: kept
    recovered = [n for n in [*manifest.recovered, *unchecked] if n != entry.file]
    updated = replace(manifest, checkpoints=kept[-keep_last:], last=entry.file, fallback=False,
                      recovered=recovered)
    return updated, dropped

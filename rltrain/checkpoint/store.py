"""The checkpoint folder: :class:`Checkpointer` saves, keeps and finds checkpoints through a
manifest; the files themselves are written and read by :mod:`rltrain.checkpoint.files`."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from rltrain.checkpoint.files import (
    atomic_save,
    atomic_write,
    check_entry,
    resolve_intact,
    torch_load,
)
from rltrain.checkpoint.manifest import (
    BEST_NAME,
    CHECKPOINT_NAME,
    MANIFEST,
    MAX_SHARDS,
    SHARD_NAME,
    TEMPORARY_NAME,
    Entry,
    Manifest,
    fresh_name,
    read_manifest,
    shard_name,
    with_entry,
)
from rltrain.runtime.distributed import SINGLE, DistributedContext


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one save wrote.

    Attributes:
        path: The checkpoint file.
        env_steps: Env steps done when it was taken.
        size_bytes: Its size on disk.
        seconds: Wall-clock seconds the save took (serialising, writing, syncing).
    """

    path: Path
    env_steps: int
    size_bytes: int
    seconds: float


class Checkpointer:
    """Writes checkpoints atomically, with checksums, and keeps the last few and the best.

    Each save writes ``checkpoint-<env_steps>.pt`` beside its final name, syncs it to disk and
    renames it into place, then rewrites ``manifest.json`` the same way. The manifest lists every
    kept checkpoint with its SHA-256 and size, names the ``last`` one and the ``best`` one
    (``best-<env_steps>.pt``, written when an evaluation beats the best so far, with
    ``best.pt`` linked to it). ``last.pt`` is a hard link to the newest checkpoint, for
    convenience; :meth:`resolve` reads the manifest. A file the manifest lists is never written
    over: a step saved again is written as a new revision (``checkpoint-<env_steps>.v2.pt``),
    the manifest switched to it, then the old file deleted. A crash at any moment leaves the
    previous checkpoints and manifest intact, and a file whose checksum does not match is
    reported and skipped in favour of the newest good one.

    The manifest is untrusted input (:mod:`rltrain.checkpoint.manifest`): only rltrain's own
    file names in this folder are ever read or deleted, and nothing is deleted while the
    manifest cannot be read.

    Args:
        directory: Where checkpoints go (created on first save).
        interval: Env steps between saves; None saves only at the end (and on a stop).
        keep_last: How many ``checkpoint-*.pt`` files to keep (older ones are deleted; ``best.pt``
            is kept apart). Default 3.
        keep_best: Save the best evaluation's agent as ``best``. Default True.
        config: The run's configuration (plain dicts), stored in every checkpoint as
            ``"config"``. Default None.
        distributed: The run's processes. With several, every rank calls each save with its
            own parts (``shard``): each writes ``<checkpoint>.rank<r>.pt``, then rank 0 writes
            the shared parts, with every shard's checksum, and the manifest; a checkpoint is
            complete (and ``last``) only once the manifest lists it. Default: one process.
    """

    def __init__(self, directory: str | Path, *, interval: int | None = None,
                 keep_last: int = 3, keep_best: bool = True,
                 config: Mapping[str, Any] | None = None,
                 distributed: DistributedContext = SINGLE) -> None:
        if interval is not None and interval < 1:
            raise ValueError(
                f"checkpoint interval must be >= 1 env step (or None); got {interval}."
            )
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 checkpoint; got {keep_last}.")
        self.directory = Path(directory)
        self.interval = interval
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.config = config
        self.distributed = distributed
        self._swept = False

    def due(self, previous_env_steps: int, env_steps: int) -> bool:
        """True when an interval boundary lies in ``(previous_env_steps, env_steps]``."""
        if self.interval is None:
            return False
        return env_steps // self.interval > previous_env_steps // self.interval

    def path(self, env_steps: int) -> Path:
        """Where the checkpoint taken at ``env_steps`` is written the first time (a step saved
        again gets a new revision's name: :meth:`fresh_path`)."""
        return self.directory / f"checkpoint-{env_steps}.pt"

    def fresh_path(self, kind: str, env_steps: int) -> Path:
        """Where a new ``kind`` (``"checkpoint"``, ``"best"``) file for ``env_steps`` goes: a
        name the manifest does not list, chosen by rank 0 for every rank (their shards follow
        it), so that no save ever writes over a listed file."""
        return self.distributed.on_main(lambda: self.directory / fresh_name(
            kind, env_steps, self.manifest().names()))

    def save(self, state: dict[str, Any], *, env_steps: int,
             shard: dict[str, Any] | None = None) -> SavedCheckpoint:
        """Write ``state`` as ``checkpoint-<env_steps>.pt``, make it ``last``, apply retention.
        ``shard``: this rank's own parts, in a run of several processes (every rank calls)."""
        start = time.perf_counter()
        self._prepare()
        path = self.fresh_path("checkpoint", env_steps)
        state, shards = self._write_shards(state, shard, path)

        def write() -> SavedCheckpoint:
            manifest = self.manifest()
            # Order by writing, not by env steps: a run resumed from an older checkpoint (best)
            # starts a new timeline whose checkpoints are the newest, whatever their steps.
            sequence = 1 + max((e.sequence for e in manifest.checkpoints), default=0)
            written = atomic_save(self._with_config(state), path)
            entry = Entry(path.name, env_steps, sequence, shards=shards, **written)
            manifest, dropped = with_entry(manifest, entry, self.keep_last)
            self._write_manifest(manifest)
            self._link(path, "last.pt")
            for name in dropped:
                (self.directory / name).unlink(missing_ok=True)
            return SavedCheckpoint(path, env_steps, written["bytes"],
                                   time.perf_counter() - start)

        return self.distributed.on_main(write)

    def save_best(self, state: dict[str, Any], *, env_steps: int, eval_return: float,
                  shard: dict[str, Any] | None = None) -> SavedCheckpoint:
        """Write ``state`` as ``best-<env_steps>.pt``, make it ``best`` (and ``best.pt``), then
        delete the previous best: the manifest always names an intact best. ``shard``: as for
        :meth:`save`."""
        start = time.perf_counter()
        self._prepare()
        path = self.fresh_path("best", env_steps)
        state, shards = self._write_shards(state, shard, path)

        def write() -> SavedCheckpoint:
            written = atomic_save(self._with_config(state), path)
            entry = Entry(path.name, env_steps, eval_return=eval_return, shards=shards,
                          **written)
            manifest = self.manifest()
            previous = manifest.best
            recovered = [n for n in manifest.recovered if n != path.name]
            self._write_manifest(replace(manifest, best=entry, recovered=recovered))
            self._link(path, "best.pt")
            if (previous is not None and previous.file != path.name
                    and previous.sha256 is not None):
                for name in previous.files():
                    (self.directory / name).unlink(missing_ok=True)
            return SavedCheckpoint(path, env_steps, written["bytes"],
                                   time.perf_counter() - start)

        return self.distributed.on_main(write)

    def _write_shards(self, state: dict[str, Any], shard: dict[str, Any] | None,
                      path: Path) -> tuple[dict[str, Any], int]:
        """This rank's ``shard`` beside ``path``, and ``state`` with every rank's shard
        checksum (what rank 0 writes); ``(state, 0)`` without a shard."""
        if shard is None:
            return state, 0
        context = self.distributed
        name = shard_name(path.name, context.rank)
        written = {"file": name, **atomic_save(shard, self.directory / name)}
        shards = context.all_gather_object(written)
        return {**state, "world_size": context.world_size, "shards": shards}, len(shards)

    @staticmethod
    def with_shard(path: str | Path, state: dict[str, Any],
                   distributed: DistributedContext = SINGLE) -> dict[str, Any]:
        """``state`` (read from checkpoint ``path``) with this rank's own parts from its shard
        merged in, verified against the checksum ``state`` lists. Raises ``ValueError`` when
        the checkpoint was written by a run of another world size: its per-rank parts (envs,
        storage, random streams) fit only as many processes."""
        path = Path(path)
        saved_world = state.get("world_size", 1)
        shards = state.get("shards", [])
        if (not isinstance(saved_world, int) or isinstance(saved_world, bool)
                or not 1 <= saved_world <= MAX_SHARDS or not isinstance(shards, list)
                or len(shards) != (saved_world if saved_world > 1 else 0)):
            raise ValueError(f"{path} has no valid world size and shards; it was not written "
                             "by rltrain, or it was altered.")
        if saved_world != distributed.world_size:
            raise ValueError(
                f"{path} was written by a run of {saved_world} process(es) and this run has "
                f"{distributed.world_size}: each rank's environments, experience storage and "
                "random streams are saved for its own rank, so it resumes with the same world "
                f"size only. Resume with {_launch(saved_world)}, or start a new run (evaluate "
                "and load_checkpoint take it at any world size).")
        if saved_world == 1 or state.get("shard_rank") == distributed.rank:
            return state
        expected = shards[distributed.rank]
        name = expected.get("file") if isinstance(expected, dict) else None
        found = SHARD_NAME.fullmatch(name) if isinstance(name, str) else None
        if found is None or not isinstance(name, str) or int(found.group(2)) != distributed.rank:
            raise ValueError(f"{path} names {name!r} as rank {distributed.rank}'s shard, which "
                             "is not a shard file of its folder; it was not written by rltrain, "
                             "or it was altered.")
        # The checkpoint's own folder: a link (last.pt) resolves to the file it names.
        shard_path = path.resolve().parent / name
        problem = check_entry(shard_path, Entry(name, 0, sha256=expected.get("sha256"),
                                                bytes=expected.get("bytes")))
        if problem is not None:
            raise ValueError(f"{shard_path} (rank {distributed.rank}'s part of {path.name}) "
                             f"is unusable: {problem}. Resume from another checkpoint.")
        own = torch_load(shard_path)
        if not isinstance(own, dict):
            raise ValueError(f"{shard_path} is not an rltrain checkpoint shard.")
        return {**state, **own, "shard_rank": distributed.rank}

    def _with_config(self, state: dict[str, Any]) -> dict[str, Any]:
        return state if self.config is None else {**state, "config": dict(self.config)}

    def manifest(self) -> Manifest:
        """The folder's manifest (see :func:`~rltrain.checkpoint.manifest.read_manifest`)."""
        if not self.directory.is_dir():
            return Manifest()
        return read_manifest(self.directory)

    def resolve(self, which: str) -> Path:
        """The newest intact checkpoint for ``which`` (``"last"`` or ``"best"``).

        When the one the manifest names is missing, fails its checksum or lacks a shard, the
        newest intact one is used instead, with a warning naming both (for ``best``: the
        newest intact checkpoint; without a usable manifest the files in the folder are tried,
        most env steps first). Raises ``FileNotFoundError`` saying what the folder holds and
        what to do when no checkpoint is intact (:func:`~rltrain.checkpoint.files.resolve_intact`).
        """
        return resolve_intact(self.directory, self.manifest(), which)

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """Read a checkpoint with ``torch.load(weights_only=True)``: tensors and plain data only.

        When the file is listed in its folder's manifest, its checksum is verified first.
        ``last.pt`` and ``best.pt`` read the file :meth:`resolve` picks (the newest intact one,
        with a warning, when the one the manifest names is broken). Anything else than a
        readable checkpoint is a ``ValueError`` naming the file.
        """
        path, checked = Path(path), False
        folder = Checkpointer(path.parent)
        manifest = folder.manifest() if (path.parent / MANIFEST).exists() else Manifest()
        if path.name in ("last.pt", "best.pt") and (manifest.checkpoints or manifest.best
                                                    or manifest.recovered):
            # The links can lag a save behind after a crash: read what the manifest names,
            # or the newest intact checkpoint when that one is broken (with a warning).
            try:
                path = resolve_intact(path.parent, manifest, path.name.removesuffix(".pt"))
                checked = True
            except FileNotFoundError:
                if not path.is_file():
                    raise
        if not path.is_file():
            raise FileNotFoundError(
                f"No checkpoint at {path}. Checkpoints are written to <run_dir>/checkpoints/ "
                "(last.pt, best.pt, checkpoint-<env_steps>.pt).")
        entries = [] if checked else manifest.entries(path.name)
        if entries:
            problems = [check_entry(path, entry) for entry in entries]
            problem = None if None in problems else problems[0]
            if problem is not None:
                raise ValueError(f"{path} is corrupt: {problem}. Resume from another "
                                 "checkpoint (ckpt_path='last' picks the newest intact one).")
        state = torch_load(path)
        if not isinstance(state, dict):
            raise ValueError(f"{path} is not an rltrain checkpoint: it holds a "
                             f"{type(state).__name__}, not a training state.")
        return state

    def sweep(self) -> None:
        """Delete what a crash can leave behind: rltrain's temporary files, and checkpoint files
        the manifest does not list (written but never recorded). Called before a run's first
        save; one run writes to a checkpoint folder at a time (the run directory's lock).
        Nothing is deleted when there is no usable manifest: nothing then says which files are
        garbage."""
        if not (self.directory / MANIFEST).is_file():
            return
        manifest = self.manifest()
        if manifest.fallback:
            return
        listed = manifest.names()
        for path in self.directory.iterdir():
            name = path.name
            garbage = TEMPORARY_NAME.fullmatch(name) or (
                (CHECKPOINT_NAME.fullmatch(name) or BEST_NAME.fullmatch(name)
                 or SHARD_NAME.fullmatch(name)) and name not in listed)
            if garbage and not path.is_dir():
                path.unlink(missing_ok=True)

    def _prepare(self) -> None:
        """Before the first save: the folder made and swept (by rank 0, before any rank
        writes its shard)."""
        if not self._swept:
            def prepare() -> None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self.sweep()

            self.distributed.on_main(prepare)
            self._swept = True

    def _write_manifest(self, manifest: Manifest) -> None:
        data = (json.dumps(manifest.as_json(), indent=2) + "\n").encode()
        atomic_write(self.directory / MANIFEST, lambda file: file.write(data))

    def _link(self, path: Path, name: str) -> None:
        """Point ``name`` (``last.pt``, ``best.pt``) at ``path``: a hard link swapped in
        atomically, or an atomic copy where the filesystem has no hard links."""
        alias = self.directory / name
        link = alias.with_name(f".{name}.{os.getpid()}.tmp")
        link.unlink(missing_ok=True)
        try:
            os.link(path, link)
            os.replace(link, alias)
        except OSError:
            link.unlink(missing_ok=True)
            def copy(file: BinaryIO) -> None:
                with path.open("rb") as source:
                    shutil.copyfileobj(source, file)

            atomic_write(alias, copy)


def _launch(world_size: int) -> str:
    return ("one process (python or rltrain fit, without torchrun)" if world_size == 1
            else f"{world_size} processes (torchrun --nproc-per-node=... with "
                 f"{world_size} in all)")

"""The checkpoint policy: :class:`Checkpointer` decides when to save, what to keep (the last few,
the best) and which checkpoint to resume, through a manifest; the files themselves live in a
store (:mod:`rltrain.checkpoint.io`: local files by default), and a run of several processes
writes shards (:mod:`rltrain.checkpoint.sharded`)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rltrain.checkpoint.intact import check_entry, resolve_intact
from rltrain.checkpoint.io import CheckpointIO, LocalFiles
from rltrain.checkpoint.manifest import (
    BEST_NAME,
    CHECKPOINT_NAME,
    LINKS,
    MANIFEST,
    SHARD_NAME,
    TEMPORARY_NAME,
    Entry,
    Manifest,
    fresh_name,
    read_manifest,
    with_entry,
)
from rltrain.checkpoint.sharded import with_shard, write_shard
from rltrain.runtime.cadence import crossed
from rltrain.runtime.distributed import SINGLE, DistributedContext
from rltrain.settings.base import Bounds, check_setting

#: Env steps between checkpoints (``TrainerConfig.checkpoint_interval``).
CHECKPOINT_INTERVAL = Bounds(ge=1, unit="env steps", none="to save only at the end")
#: ``checkpoint-*.pt`` files kept (``TrainerConfig.keep_last_checkpoints``).
KEEP_LAST = Bounds(ge=1, unit="checkpoints")


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one save wrote.

    Attributes:
        path: The checkpoint file (where its store holds it).
        env_steps: Env steps done when it was taken.
        size_bytes: Its size in bytes.
        seconds: Wall-clock seconds the save took (serialising, writing, syncing).
    """

    path: Path
    env_steps: int
    size_bytes: int
    seconds: float


class Checkpointer:
    """Saves checkpoints atomically, with checksums, and keeps the last few and the best.

    Each save writes ``checkpoint-<env_steps>.pt`` atomically, then rewrites ``manifest.json``
    the same way. The manifest lists every kept checkpoint with its SHA-256 and size, names the
    ``last`` one and the ``best`` one (``best-<env_steps>.pt``, written when an evaluation
    beats the best so far, with ``best.pt`` pointing at it). ``last.pt`` points at the newest
    checkpoint, for convenience; :meth:`resolve` reads the manifest. A file the manifest lists
    is never written over: a step saved again is written as a new revision
    (``checkpoint-<env_steps>.v2.pt``), the manifest switched to it, then the old file
    deleted. A crash at any moment leaves the previous checkpoints and manifest intact, and a
    file whose checksum does not match is reported and skipped in favour of the newest good
    one.

    The manifest is untrusted input (:mod:`rltrain.checkpoint.manifest`): only rltrain's own
    file names in this folder are ever read or deleted, and nothing is deleted while the
    manifest cannot be read. Every read goes through :meth:`read`.

    Args:
        directory: Where checkpoints go (a local folder, created on first save); or give
            ``store``.
        interval: Env steps between saves; None saves only at the end (and on a stop).
        keep_last: How many ``checkpoint-*.pt`` files to keep (older ones are deleted; the
            best is kept apart). Default 3.
        keep_best: Save the best evaluation's agent as ``best``. Default True.
        config: The run's configuration (plain dicts), stored in every checkpoint as
            ``"config"``. Default None.
        distributed: The run's processes. With several, every rank calls each save with its
            own parts (``shard``): each writes ``<checkpoint>.rank<r>.pt``, then rank 0 writes
            the shared parts, with every shard's checksum, and the manifest; a checkpoint is
            complete (and ``last``) only once the manifest lists it. Default: one process.
        store: Where the files live (:class:`~rltrain.checkpoint.io.CheckpointIO`). Default:
            :class:`~rltrain.checkpoint.io.LocalFiles` in ``directory``.
    """

    def __init__(self, directory: str | Path | None = None, *, interval: int | None = None,
                 keep_last: int = 3, keep_best: bool = True,
                 config: Mapping[str, Any] | None = None,
                 distributed: DistributedContext = SINGLE,
                 store: CheckpointIO | None = None) -> None:
        check_setting("checkpoint_interval", interval, CHECKPOINT_INTERVAL)
        check_setting("keep_last_checkpoints", keep_last, KEEP_LAST)
        if store is None:
            if directory is None:
                raise ValueError("A Checkpointer needs a directory or a store.")
            store = LocalFiles(directory)
        self.store = store
        #: The local folder of a :class:`~rltrain.checkpoint.io.LocalFiles` store; None for
        #: another store.
        self.directory = store.directory if isinstance(store, LocalFiles) else None
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
        return crossed(previous_env_steps, env_steps, self.interval) > 0

    def fresh_name(self, kind: str, env_steps: int) -> str:
        """The name a new ``kind`` (``"checkpoint"``, ``"best"``) file for ``env_steps``
        takes: one the manifest does not list, chosen by rank 0 for every rank (their shards
        follow it), so that no save ever writes over a listed file."""
        return self.distributed.on_main(lambda: fresh_name(kind, env_steps,
                                                           self.manifest().names()))

    def save(self, state: dict[str, Any], *, env_steps: int,
             shard: dict[str, Any] | None = None) -> SavedCheckpoint:
        """Write ``state`` as ``checkpoint-<env_steps>.pt``, make it ``last``, apply retention.
        ``shard``: this rank's own parts, in a run of several processes (every rank calls)."""
        start = time.perf_counter()
        self._prepare()
        name = self.fresh_name("checkpoint", env_steps)
        state, shards = self._with_shards(state, shard, name)

        def write() -> SavedCheckpoint:
            manifest = self.manifest()
            # Order by writing, not by env steps: a run resumed from an older checkpoint (best)
            # starts a new timeline whose checkpoints are the newest, whatever their steps.
            sequence = 1 + max((e.sequence for e in manifest.checkpoints), default=0)
            written = self.store.save(self._with_config(state), name)
            entry = Entry(name, env_steps, sequence, shards=shards, **written)
            manifest, dropped = with_entry(manifest, entry, self.keep_last)
            self._write_manifest(manifest)
            self.store.alias(name, "last.pt")
            for old in dropped:
                self.store.remove(old)
            return self._saved(name, env_steps, written["bytes"], start)

        return self.distributed.on_main(write)

    def save_best(self, state: dict[str, Any], *, env_steps: int, eval_return: float,
                  shard: dict[str, Any] | None = None) -> SavedCheckpoint:
        """Write ``state`` as ``best-<env_steps>.pt``, make it ``best`` (and ``best.pt``), then
        delete the previous best: the manifest always names an intact best. ``shard``: as for
        :meth:`save`."""
        start = time.perf_counter()
        self._prepare()
        name = self.fresh_name("best", env_steps)
        state, shards = self._with_shards(state, shard, name)

        def write() -> SavedCheckpoint:
            written = self.store.save(self._with_config(state), name)
            entry = Entry(name, env_steps, eval_return=eval_return, shards=shards, **written)
            manifest = self.manifest()
            previous = manifest.best
            recovered = [n for n in manifest.recovered if n != name]
            self._write_manifest(replace(manifest, best=entry, recovered=recovered))
            self.store.alias(name, "best.pt")
            if previous is not None and previous.file != name and previous.sha256 is not None:
                for old in previous.files():
                    self.store.remove(old)
            return self._saved(name, env_steps, written["bytes"], start)

        return self.distributed.on_main(write)

    def _saved(self, name: str, env_steps: int, size: int, start: float) -> SavedCheckpoint:
        return SavedCheckpoint(Path(self.store.where(name)), env_steps, size,
                               time.perf_counter() - start)

    def _with_shards(self, state: dict[str, Any], shard: dict[str, Any] | None,
                     name: str) -> tuple[dict[str, Any], int]:
        if shard is None:
            return state, 0
        return write_shard(self.store, self.distributed, state, shard, name)

    def _with_config(self, state: dict[str, Any]) -> dict[str, Any]:
        return state if self.config is None else {**state, "config": dict(self.config)}

    def manifest(self) -> Manifest:
        """The store's manifest (see :func:`~rltrain.checkpoint.manifest.read_manifest`)."""
        return read_manifest(self.store)

    def resolve(self, which: str) -> Path:
        """The newest intact checkpoint for ``which`` (``"last"`` or ``"best"``).

        When the one the manifest names is missing, fails its checksum or lacks a shard, the
        newest intact one is used instead, with a warning naming both (for ``best``: the
        newest intact checkpoint; without a usable manifest the files in the folder are tried,
        most env steps first). Raises ``FileNotFoundError`` saying what the folder holds and
        what to do when no checkpoint is intact (:func:`~rltrain.checkpoint.intact.resolve_intact`).
        """
        return Path(self.store.where(resolve_intact(self.store, self.manifest(), which)))

    def read(self, name: str) -> dict[str, Any]:
        """Checkpoint ``name`` of the store, read with ``torch.load(weights_only=True)``:
        tensors and plain data only. Every checkpoint read goes through here.

        When the file is listed in the manifest, its checksum is verified first. ``last.pt``
        and ``best.pt`` read the file :meth:`resolve` picks (the newest intact one, with a
        warning, when the one the manifest names is broken). Anything else than a readable
        checkpoint is a ``ValueError`` naming the file.
        """
        store, checked = self.store, False
        manifest = self.manifest() if store.size(MANIFEST) is not None else Manifest()
        if name in LINKS and (manifest.checkpoints or manifest.best or manifest.recovered):
            # The links can lag a save behind after a crash: read what the manifest names,
            # or the newest intact checkpoint when that one is broken (with a warning).
            try:
                name = resolve_intact(store, manifest, name.removesuffix(".pt"))
                checked = True
            except FileNotFoundError:
                if store.size(name) is None:
                    raise
        if store.size(name) is None:
            raise FileNotFoundError(
                f"No checkpoint at {store.where(name)}. Checkpoints are written to "
                "<run_dir>/checkpoints/ (last.pt, best.pt, checkpoint-<env_steps>.pt).")
        entries = [] if checked else manifest.entries(name)
        if entries:
            problems = [check_entry(store, name, entry) for entry in entries]
            problem = None if None in problems else problems[0]
            if problem is not None:
                raise ValueError(f"{store.where(name)} is corrupt: {problem}. Resume from "
                                 "another checkpoint (ckpt_path='last' picks the newest intact "
                                 "one).")
        state = store.load(name)
        if not isinstance(state, dict):
            raise ValueError(f"{store.where(name)} is not an rltrain checkpoint: it holds a "
                             f"{type(state).__name__}, not a training state.")
        return state

    def sweep(self) -> None:
        """Delete what a crash can leave behind: rltrain's temporary files, and checkpoint files
        the manifest does not list (written but never recorded). Called before a run's first
        save; one run writes to a checkpoint folder at a time (the run directory's lock).
        Nothing is deleted when there is no usable manifest: nothing then says which files are
        garbage."""
        if self.store.size(MANIFEST) is None:
            return
        manifest = self.manifest()
        if manifest.fallback:
            return
        listed = manifest.names()
        for name in self.store.names():
            if TEMPORARY_NAME.fullmatch(name) or (
                    (CHECKPOINT_NAME.fullmatch(name) or BEST_NAME.fullmatch(name)
                     or SHARD_NAME.fullmatch(name)) and name not in listed):
                self.store.remove(name)

    def _prepare(self) -> None:
        """Before the first save: the folder made and swept (by rank 0, before any rank
        writes its shard)."""
        if not self._swept:
            def prepare() -> None:
                self.store.prepare()
                self.sweep()

            self.distributed.on_main(prepare)
            self._swept = True

    def _write_manifest(self, manifest: Manifest) -> None:
        self.store.write_bytes(MANIFEST, (json.dumps(manifest.as_json(), indent=2) + "\n"
                                          ).encode())


def read_checkpoint(path: str | Path, checkpointer: Checkpointer | None = None,
                    distributed: DistributedContext | None = None,
                    state: dict[str, Any] | None = None) -> dict[str, Any]:
    """Checkpoint file ``path``, read as :meth:`Checkpointer.read` reads (checksums verified,
    tensors and plain data only): from ``checkpointer``'s store when it holds ``path``, else
    from the local folder it lies in; ``state``: what the file holds when it was read already
    (the command line reads a checkpoint's config first). With ``distributed``, this rank's own
    parts from its shard are merged in (:func:`~rltrain.checkpoint.sharded.with_shard`; refused
    when another world size wrote it). The one way a checkpoint is read back: resuming,
    loading an agent or a policy, reading a run's config."""
    path = Path(path)
    if checkpointer is not None and checkpointer.store.holds(path):
        store: CheckpointIO = checkpointer.store
        state = checkpointer.read(path.name) if state is None else state
    else:  # a link (last.pt) names the file whose folder holds its shards
        store = LocalFiles(path.resolve().parent)
        state = Checkpointer(path.parent).read(path.name) if state is None else state
    return state if distributed is None else with_shard(store, path.name, state, distributed)

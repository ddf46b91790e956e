"""Checkpoints: the policy of what is saved and kept (:mod:`.store`) over a storage seam
(:mod:`.io`: local files written atomically with checksums, :mod:`.files`, by default), which
checkpoint is intact (:mod:`.intact`), shards of a run of several processes (:mod:`.sharded`),
a manifest read as untrusted input (:mod:`.manifest`), and what a checkpoint holds
(:mod:`.state`)."""

from rltrain.checkpoint.files import atomic_save, atomic_write, atomic_write_text, file_sha256
from rltrain.checkpoint.io import CheckpointIO, LocalFiles
from rltrain.checkpoint.manifest import CHECKPOINT_FORMAT, MANIFEST, ManifestError
from rltrain.checkpoint.state import (
    LoadedCheckpoint,
    Stateful,
    load_agent,
    training_state,
)
from rltrain.checkpoint.store import Checkpointer, SavedCheckpoint, read_checkpoint

__all__ = [
    "CHECKPOINT_FORMAT",
    "MANIFEST",
    "CheckpointIO",
    "Checkpointer",
    "LoadedCheckpoint",
    "LocalFiles",
    "ManifestError",
    "SavedCheckpoint",
    "Stateful",
    "atomic_save",
    "atomic_write",
    "atomic_write_text",
    "file_sha256",
    "load_agent",
    "read_checkpoint",
    "training_state",
]

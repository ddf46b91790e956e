"""Checkpoints: files written atomically with checksums (:mod:`.files`), the folder and its
retention (:mod:`.store`), a manifest read as untrusted input (:mod:`.manifest`), and what a
checkpoint holds (:mod:`.state`)."""

from rltrain.checkpoint.files import atomic_save, atomic_write, atomic_write_text, file_sha256
from rltrain.checkpoint.manifest import CHECKPOINT_FORMAT, MANIFEST, ManifestError
from rltrain.checkpoint.state import (
    LoadedCheckpoint,
    Stateful,
    load_agent,
    restore_progress,
    resume,
    training_state,
)
from rltrain.checkpoint.store import Checkpointer, SavedCheckpoint

__all__ = [
    "CHECKPOINT_FORMAT",
    "MANIFEST",
    "Checkpointer",
    "LoadedCheckpoint",
    "ManifestError",
    "SavedCheckpoint",
    "Stateful",
    "atomic_save",
    "atomic_write",
    "atomic_write_text",
    "file_sha256",
    "load_agent",
    "restore_progress",
    "resume",
    "training_state",
]

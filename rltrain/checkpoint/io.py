"""The storage seam of checkpoints (Lightning's ``CheckpointIO``): where a checkpoint folder's
files live. :class:`LocalFiles` (files written atomically and synced) is the default; another
store (an object store, a key-value store, memory) is one subclass of :class:`CheckpointIO`.

The :class:`~rltrain.checkpoint.store.Checkpointer` decides what is written and kept (cadence,
retention, the best, the manifest, shards); a store only holds named files. Every name it is
given is one of rltrain's own (``checkpoint-100.pt``, ``manifest.json``), checked before.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, BinaryIO

import torch

from rltrain.checkpoint.files import atomic_save, atomic_write, file_sha256, torch_load


class CheckpointIO(ABC):
    """Named files in one place: the checkpoint folder of a run.

    A store implements four methods: :meth:`write_bytes` (atomic: a reader sees the whole new
    file or the old one, never a part), :meth:`read_bytes`, :meth:`names` and :meth:`remove`.
    The rest is built on them and may be overridden where the place does better (a local
    folder streams, hashes while writing, links instead of copying): :meth:`save`,
    :meth:`load` (tensors and plain data only: no code runs), :meth:`size`, :meth:`sha256`,
    :meth:`alias`, and :attr:`location`, what messages and events name.
    """

    @property
    def location(self) -> str:
        """Where the files are, for messages and events (a folder's path, a URL). Default:
        the store's class name."""
        return f"<{type(self).__name__}>"

    def where(self, name: str) -> str:
        """Where file ``name`` is, for messages and events (and the path a checkpoint is
        resumed from)."""
        return f"{self.location}/{name}"

    def holds(self, path: str | Path) -> bool:
        """Whether ``path`` names a file of this store (as :meth:`where` names them)."""
        return Path(self.where(Path(path).name)) == Path(path)

    @abstractmethod
    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``data`` as file ``name``, atomically."""

    @abstractmethod
    def read_bytes(self, name: str) -> bytes:
        """The bytes of file ``name``; ``FileNotFoundError`` when there is none."""

    @abstractmethod
    def names(self) -> list[str]:
        """The names of the files held (empty when the place does not exist yet)."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Delete file ``name`` (nothing when there is none)."""

    def save(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        """Serialise ``state`` (``torch.save``) as file ``name``, atomically; returns
        ``{"sha256": hex, "bytes": size}`` of what was written."""
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        self.write_bytes(name, data)
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def load(self, name: str) -> Any:
        """File ``name`` deserialised with ``torch.load(weights_only=True)``; a ``ValueError``
        naming the file when it is not a readable checkpoint."""
        try:
            data = self.read_bytes(name)
        except OSError as error:
            raise ValueError(f"{self.where(name)} is not a readable checkpoint: {error}.") \
                from error
        return torch_load(self.where(name), data)

    def size(self, name: str) -> int | None:
        """The size of file ``name`` in bytes; None when there is no such file."""
        try:
            return len(self.read_bytes(name))
        except FileNotFoundError:
            return None

    def sha256(self, name: str) -> str:
        """The SHA-256 of file ``name``'s bytes, as hex."""
        return hashlib.sha256(self.read_bytes(name)).hexdigest()

    def alias(self, name: str, alias: str) -> None:
        """Make ``alias`` (``last.pt``, ``best.pt``) hold what ``name`` holds. Default: a
        copy."""
        self.write_bytes(alias, self.read_bytes(name))

    def is_plain(self, name: str) -> bool:
        """Whether ``name`` is a file of this place's own (not a link to elsewhere): what a
        folder without a usable manifest may be recovered from. Default True."""
        return True

    def prepare(self) -> None:
        """Make the place before the first write (a folder). Default: nothing."""
        return None


class LocalFiles(CheckpointIO):
    """Checkpoint files in a local folder, each written to a temporary file beside its final
    name, synced to disk and renamed into place; ``last.pt`` and ``best.pt`` are hard links.

    Args:
        directory: The folder (created on the first write).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    @property
    def location(self) -> str:
        return str(self.directory)

    def where(self, name: str) -> str:
        return str(self.directory / name)

    def save(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        return atomic_save(state, self.directory / name)

    def load(self, name: str) -> Any:
        return torch_load(self.directory / name)

    def write_bytes(self, name: str, data: bytes) -> None:
        atomic_write(self.directory / name, lambda file: file.write(data))

    def read_bytes(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return [path.name for path in self.directory.iterdir() if not path.is_dir()]

    def size(self, name: str) -> int | None:
        path = self.directory / name
        return path.stat().st_size if path.is_file() else None

    def sha256(self, name: str) -> str:
        return file_sha256(self.directory / name)

    def remove(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def is_plain(self, name: str) -> bool:
        path = self.directory / name
        return not path.is_symlink() and path.is_file()

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def alias(self, name: str, alias: str) -> None:
        """A hard link swapped in atomically, or an atomic copy where the filesystem has no
        hard links."""
        path, target = self.directory / name, self.directory / alias
        link = target.with_name(f".{alias}.{os.getpid()}.tmp")
        link.unlink(missing_ok=True)
        try:
            os.link(path, link)
            os.replace(link, target)
        except OSError:
            link.unlink(missing_ok=True)

            def copy(file: BinaryIO) -> None:
                with path.open("rb") as source:
                    shutil.copyfileobj(source, file)

            atomic_write(target, copy)

"""Local checkpoint files: written atomically (a temporary file synced, then renamed into place)
and hashed while written; read back with ``torch.load(weights_only=True)``, so loading runs no
code. :class:`~rltrain.checkpoint.io.LocalFiles` stores a checkpoint folder with them."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex (what the manifest records)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: How torch names a global its safe unpickler refused (2.6 to 2.13 wordings).
_BLOCKED_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)")


def torch_load(path: Path | str, data: bytes | None = None) -> Any:
    """``torch.load(path, weights_only=True)`` (of ``data``, the file's bytes read from a
    store, when given), its failures as a ``ValueError`` that names the file and never passes
    on torch's advice to load with ``weights_only=False``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notes about pickle protocols: not the user's
            return torch.load(path if data is None else io.BytesIO(data), map_location="cpu",
                              weights_only=True)
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

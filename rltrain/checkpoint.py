"""Saving the agent to disk while it trains: atomic files, loaded without running code."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import torch

from rltrain.envs import EnvInit, env_factory

if TYPE_CHECKING:
    from rltrain.agents.base import LearningAgent
    from rltrain.components import Progress, RLComponents


#: Version of the checkpoint layout written by :func:`training_state`.
CHECKPOINT_FORMAT = 1
#: The file listing a checkpoint folder's checkpoints with their checksums.
MANIFEST = "manifest.json"


def _version() -> str:
    from rltrain import __version__

    return __version__


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
    ``best.pt`` linked to it). ``last.pt`` is a hard link
    to the newest checkpoint, for convenience; :meth:`resolve` reads the manifest. A crash at any
    moment leaves the previous checkpoints and manifest intact, and a file whose checksum does not
    match is reported and skipped in favour of the newest good one.

    Args:
        directory: Where checkpoints go (created on first save).
        interval: Env steps between saves; None saves only at the end (and on a stop).
        keep_last: How many ``checkpoint-*.pt`` files to keep (older ones are deleted; ``best.pt``
            is kept apart). Default 3.
        keep_best: Save the best evaluation's agent as ``best``. Default True.
        config: The run's configuration (plain dicts), stored in every checkpoint as
            ``"config"``. Default None.
    """

    def __init__(self, directory: str | Path, *, interval: int | None = None,
                 keep_last: int = 3, keep_best: bool = True,
                 config: Mapping[str, Any] | None = None) -> None:
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
        self._swept = False

    def due(self, previous_env_steps: int, env_steps: int) -> bool:
        """True when an interval boundary lies in ``(previous_env_steps, env_steps]``."""
        if self.interval is None:
            return False
        return env_steps // self.interval > previous_env_steps // self.interval

    def path(self, env_steps: int) -> Path:
        """Where the checkpoint taken at ``env_steps`` is written."""
        return self.directory / f"checkpoint-{env_steps}.pt"

    def save(self, state: dict[str, Any], *, env_steps: int) -> SavedCheckpoint:
        """Write ``state`` as ``checkpoint-<env_steps>.pt``, make it ``last``, apply retention."""
        start = time.perf_counter()
        self._prepare()
        path = self.path(env_steps)
        manifest = self.manifest()
        # Order by writing, not by env steps: a run resumed from an older checkpoint (best)
        # starts a new timeline whose checkpoints are the newest, whatever their step counts.
        sequence = 1 + max((int(e.get("sequence", 0)) for e in manifest["checkpoints"]),
                           default=0)
        entry = {"file": path.name, "env_steps": env_steps, "sequence": sequence,
                 **atomic_save(self._with_config(state), path)}
        kept = [e for e in manifest["checkpoints"] if e["file"] != path.name] + [entry]
        manifest["checkpoints"], dropped = kept[-self.keep_last:], kept[:-self.keep_last]
        manifest["last"] = path.name
        self._write_manifest(manifest)
        self._link(path, "last.pt")
        for old in dropped:
            (self.directory / old["file"]).unlink(missing_ok=True)
        return SavedCheckpoint(path, env_steps, int(entry["bytes"]),
                               time.perf_counter() - start)

    def save_best(self, state: dict[str, Any], *, env_steps: int,
                  eval_return: float) -> SavedCheckpoint:
        """Write ``state`` as ``best-<env_steps>.pt``, make it ``best`` (and ``best.pt``), then
        delete the previous best: the manifest always names an intact best."""
        start = time.perf_counter()
        self._prepare()
        path = self.directory / f"best-{env_steps}.pt"
        entry = {"file": path.name, "env_steps": env_steps, "eval_return": eval_return,
                 **atomic_save(self._with_config(state), path)}
        manifest = self.manifest()
        previous = manifest.get("best")
        manifest["best"] = entry
        self._write_manifest(manifest)
        self._link(path, "best.pt")
        if previous and previous["file"] != path.name:
            (self.directory / str(previous["file"])).unlink(missing_ok=True)
        return SavedCheckpoint(path, env_steps, int(entry["bytes"]),
                               time.perf_counter() - start)

    def _with_config(self, state: dict[str, Any]) -> dict[str, Any]:
        return state if self.config is None else {**state, "config": dict(self.config)}

    def manifest(self) -> dict[str, Any]:
        """The manifest (an empty one when there is none or it cannot be read)."""
        path = self.directory / MANIFEST
        try:
            manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"format": CHECKPOINT_FORMAT, "checkpoints": [], "last": None, "best": None}
        return manifest

    def resolve(self, which: str) -> Path:
        """The newest intact checkpoint for ``which`` (``"last"`` or ``"best"``).

        A listed file that is missing or fails its checksum is reported with a warning and the
        next newest is tried; without a readable manifest the ``checkpoint-*.pt`` files are tried
        newest first.
        """
        manifest = self.manifest()
        if which == "best":
            candidates = [manifest["best"]] if manifest.get("best") else []
        else:
            candidates = list(reversed(manifest["checkpoints"]))  # newest written first
        if not manifest["checkpoints"] and which == "last":
            candidates = [{"file": p.name} for p in sorted(
                self.directory.glob("checkpoint-*.pt"),
                key=lambda p: -int(p.stem.split("-")[1]))]
        for entry in candidates:
            path = self.directory / str(entry["file"])
            problem = _check(path, entry)
            if problem is None:
                return path
            warnings.warn(f"Skipping checkpoint {path}: {problem}. Trying an older one.",
                          stacklevel=2)
        raise FileNotFoundError(
            f"No intact {which} checkpoint in {self.directory}. Checkpoints are written to "
            "<run_dir>/checkpoints/ while training (last: checkpoint-<env_steps>.pt, best: "
            "best-<env_steps>.pt).")

    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """Read a checkpoint with ``torch.load(weights_only=True)``: tensors and plain data only.

        When the file is listed in its folder's manifest, its checksum is verified first.
        """
        path = Path(path)
        folder = Checkpointer(path.parent)
        if path.name in ("last.pt", "best.pt"):
            # The links can lag a save behind after a crash: read what the manifest names.
            named = folder.manifest().get(path.stem)
            if isinstance(named, dict):
                named = named.get("file")
            if named and (path.parent / str(named)).is_file():
                path = path.parent / str(named)
        if not path.is_file():
            raise FileNotFoundError(
                f"No checkpoint at {path}. Checkpoints are written to <run_dir>/checkpoints/ "
                "(last.pt, best.pt, checkpoint-<env_steps>.pt).")
        entries = folder.listed(path.name)
        if entries:
            problems = [_check(path, entry) for entry in entries]
            problem = None if None in problems else problems[0]
            if problem is not None:
                raise ValueError(f"{path} is corrupt: {problem}. Resume from another "
                                 "checkpoint (ckpt_path='last' picks the newest intact one).")
        try:
            state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
            what = f"it names {found.group(1)}" if found else str(error).splitlines()[-1]
            raise ValueError(
                f"{path} holds objects a checkpoint must not contain ({what}; only tensors and "
                "plain data are loaded, so nothing in it ran). It was not written by rltrain, "
                "or it was altered."
            ) from error
        except (RuntimeError, EOFError, OSError) as error:
            raise ValueError(f"{path} is not a readable checkpoint (truncated or corrupt?): "
                             f"{error}") from error
        return state

    def listed(self, name: str) -> list[dict[str, Any]]:
        """The manifest entries of file ``name`` (empty when it is not listed)."""
        manifest = self.manifest()
        entries = [dict(e) for e in manifest["checkpoints"]]
        if manifest.get("best"):
            entries.append(dict(manifest["best"]))
        return [e for e in entries if e["file"] == name]

    def sweep(self) -> None:
        """Delete what a crash can leave behind: temporary files, and checkpoint files the
        manifest does not list (written but never recorded). Called before a run's first save;
        one run writes to a checkpoint folder at a time."""
        try:
            manifest = json.loads((self.directory / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # without a readable manifest nothing says which files are garbage
        listed = {str(e["file"]) for e in manifest["checkpoints"]}
        if manifest.get("best"):
            listed.add(str(manifest["best"]["file"]))
        for path in self.directory.glob(".*.tmp"):
            path.unlink(missing_ok=True)
        for path in [*self.directory.glob("checkpoint-*.pt"), *self.directory.glob("best-*.pt")]:
            if path.name not in listed:
                path.unlink(missing_ok=True)

    def _prepare(self) -> None:
        if not self._swept:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.sweep()
            self._swept = True

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        data = (json.dumps(manifest, indent=2) + "\n").encode()
        _atomic_write(self.directory / MANIFEST, lambda file: file.write(data))

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

            _atomic_write(alias, copy)


def _check(path: Path, entry: dict[str, Any]) -> str | None:
    """Why ``path`` does not match its manifest ``entry`` (None when it does)."""
    if not path.is_file():
        return "the file is missing"
    if "sha256" not in entry:
        return None
    size = path.stat().st_size
    if size != int(entry["bytes"]):
        return f"it has {size:,} bytes where the manifest says {int(entry['bytes']):,} (truncated?)"
    if file_sha256(path) != entry["sha256"]:
        return "its SHA-256 checksum does not match the manifest's"
    return None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex (what the manifest records)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Stateful(Protocol):
    """Anything a checkpoint holds: it turns itself into tensors and plain data and back."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


def training_state(agent: LearningAgent, parts: Mapping[str, Stateful], progress: Progress,
                   hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint: the union of ``parts``' state dicts, the counters and what made the run.

    ``parts`` names every component with state (``"agent"``, ``"optimization"``, ``"buffer"``,
    ``"runner"``, ``"random"``, ``"metrics"`` for the off-policy strategy); ``hparams`` are the
    strategy's and agent's settings, compared on resume.
    """
    return {
        "format": CHECKPOINT_FORMAT,
        "agent_class": type(agent).__name__,
        "versions": {"rltrain": _version(), "torch": str(torch.__version__)},
        "hparams": dict(hparams),
        "progress": dataclasses.asdict(progress),
        **{name: part.state_dict() for name, part in parts.items()},
    }


def restore_progress(components: RLComponents) -> None:
    """Set ``components.progress`` to the counters saved in ``components.checkpoint``."""
    if components.checkpoint is None:
        raise ValueError("restore_progress needs components.checkpoint (a file to resume from).")
    saved = Checkpointer.load(components.checkpoint)["progress"]
    for name, value in saved.items():
        setattr(components.progress, name, int(value))


def resume(components: RLComponents, agent: LearningAgent,
           parts: Mapping[str, Stateful]) -> None:
    """Load every part saved in ``components.checkpoint`` (the counters were restored by the
    strategy template, :func:`restore_progress`, before the Start event)."""
    path = components.checkpoint
    if path is None:
        raise ValueError("resume needs components.checkpoint (a file to resume from).")
    state = Checkpointer.load(path)
    if state.get("agent_class") != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {state.get('agent_class')} checkpoint, not a {type(agent).__name__}."
        )
    missing = [name for name in parts if name not in state]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)} state; it was saved by another "
                         "strategy or an older rltrain.")
    for name, part in parts.items():
        try:
            part.load_state_dict(state[name])
        except pickle.UnpicklingError as error:
            raise ValueError(f"{path}: refusing to load its {name} state: {error}") from error
        except ValueError as error:  # the part's own message says what does not match
            raise ValueError(f"{path}: {error}") from error
        except (RuntimeError, KeyError) as error:
            raise ValueError(f"{path}: its {name} state does not fit this run (saved with other "
                             f"settings or on another environment?): {error}") from error


class _HashingWriter:
    """A binary file that also hashes and counts what is written to it."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def atomic_save(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """``torch.save`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Returns ``{"sha256": ..., "bytes": ...}`` of what was written (hashed while writing).
    """
    result: dict[str, Any] = {}

    def write(file: BinaryIO) -> None:
        writer = _HashingWriter(file)
        torch.save(state, writer)  # type: ignore[arg-type]
        result.update(sha256=writer.sha256.hexdigest(), bytes=writer.size)

    _atomic_write(path, write)
    return result


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_agent(agent: LearningAgent, path: str | Path, env: EnvInit) -> dict[str, Any]:
    """Load a checkpoint's networks into ``agent``, building it for ``env``'s spaces first.

    Returns the whole checkpoint (counters and optimizer states included). Raises ``ValueError``
    when the checkpoint holds another agent type or networks of other shapes.
    """
    state = Checkpointer.load(path)
    saved_class = state.get("agent_class")
    if saved_class != type(agent).__name__:
        raise ValueError(
            f"{path} holds a {saved_class} checkpoint; it cannot be loaded into a "
            f"{type(agent).__name__}. Build a {saved_class} to load it."
        )
    probe = env_factory(env)()
    try:
        agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                    device=agent.device, progress=agent.progress)
    finally:
        probe.close()
    try:
        agent.load_state_dict(state["agent"])
    except RuntimeError as error:
        raise ValueError(
            f"The networks in {path} do not fit this {type(agent).__name__} (were they trained "
            f"with other sizes or on another environment?): {error}"
        ) from error
    return state

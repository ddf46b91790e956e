"""What ``scripts/crash_harness.py`` checks in a checkpoint folder after each kill: the
temporary files of a write in progress, whether every checkpoint the manifest lists loads and
matches it, where a resume would start, and files neither listed nor temporary."""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

from rltrain.checkpoint import MANIFEST, Checkpointer, file_sha256, read_checkpoint

#: Temporary files of a write in progress, by kind.
TMP_PATTERNS = {
    "link": re.compile(r"^\.(last|best)\.pt\.\d+\.tmp$"),  # last.pt / best.pt swapped in
    "checkpoint": re.compile(r"^\.checkpoint-\d+\.pt\..*\.tmp$"),
    "best": re.compile(r"^\.best(-\d+)?\.pt\..*\.tmp$"),
    "manifest": re.compile(r"^\.manifest\.json\..*\.tmp$"),
}
#: Convenience links to the last and best checkpoints.
ALIASES = ("last.pt", "best.pt")


def tmp_kind(name: str) -> str | None:
    """Which write a temporary file belongs to (None: not a temporary file)."""
    for kind, pattern in TMP_PATTERNS.items():
        if pattern.match(name):
            return kind
    return None


def tmp_files(directory: Path) -> set[str]:
    """The temporary files in ``directory`` now."""
    try:
        with os.scandir(directory) as entries:
            return {e.name for e in entries if e.name.endswith(".tmp")}
    except FileNotFoundError:
        return set()


def verify(checkpoints: Path) -> dict[str, Any]:
    """Check the checkpoint folder after a kill; returns the problems and where a resume starts.

    ``resume_from`` is the env steps of the checkpoint ``resolve("last")`` picks (0 when there
    is no checkpoint yet, None when none resolves although some exist).
    """
    problems: list[str] = []
    manifest_path = checkpoints / MANIFEST
    manifest: dict[str, Any] = {"checkpoints": [], "last": None, "best": None}
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except ValueError as error:
            problems.append(f"manifest.json unreadable: {error}")
    entries = list(manifest.get("checkpoints") or [])
    listed = [("checkpoint", e) for e in entries]
    if manifest.get("best"):
        listed.append(("best", manifest["best"]))
    for role, entry in listed:
        name = str(entry["file"])
        path = checkpoints / name
        if name.endswith(".tmp") or name.startswith("."):
            problems.append(f"{role} entry lists a temporary file {name}")
            continue
        if not path.is_file():
            problems.append(f"{name} ({role}) is listed but missing")
            continue
        if path.stat().st_size != int(entry["bytes"]) or file_sha256(path) != entry["sha256"]:
            problems.append(f"{name} ({role}) does not match its manifest size/SHA-256")
        try:
            state = read_checkpoint(path)
        except (ValueError, OSError) as error:
            problems.append(f"{name} ({role}) does not load: {error}")
            continue
        if int(state["progress"]["env_steps"]) != int(entry["env_steps"]):
            problems.append(f"{name} ({role}) holds {state['progress']['env_steps']} env steps, "
                            f"the manifest says {entry['env_steps']}")
    if entries and manifest.get("last") not in {e["file"] for e in entries}:
        problems.append(f"manifest 'last' ({manifest.get('last')}) is not a listed checkpoint")
    for alias in ALIASES:
        link = checkpoints / alias
        if link.exists() and (entries or manifest.get("best")):
            try:
                read_checkpoint(link)
            except (ValueError, OSError) as error:
                problems.append(f"{alias} does not load: {error}")

    any_checkpoint = bool(entries) or any(checkpoints.glob("checkpoint-*.pt"))
    resume_from: int | None = 0
    resume_file: str | None = None
    if any_checkpoint:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                resolved = Checkpointer(checkpoints).resolve("last")
            except FileNotFoundError as error:
                problems.append(f"resolve('last') failed: {error}")
                resolved = None
        problems += [f"resolve('last') warned: {w.message}" for w in caught]
        if resolved is None:
            resume_from = None
        else:
            resume_file = resolved.name
            if entries and resolved.name != manifest.get("last"):
                problems.append(f"resolve('last') gave {resolved.name}, not the manifest's "
                                f"last, {manifest.get('last')}")
            try:
                resume_from = int(read_checkpoint(resolved)["progress"]["env_steps"])
            except (ValueError, OSError) as error:
                problems.append(f"resolved {resolved.name} does not load: {error}")
                resume_from = None
    return {"problems": problems, "resume_from": resume_from, "resume_file": resume_file,
            "listed": [e["file"] for e in entries],
            "best": manifest["best"]["file"] if manifest.get("best") else None}


def unlisted(checkpoints: Path) -> list[str]:
    """Checkpoint files neither listed in the manifest nor a temporary file (orphans)."""
    listed = Checkpointer(checkpoints).manifest().names()
    if not checkpoints.is_dir():
        return []
    return sorted(p.name for p in checkpoints.iterdir()
                  if p.name not in listed | {MANIFEST, *ALIASES} and not p.name.endswith(".tmp"))

"""Where the ``rltrain`` command finds Python modules: installed packages, and a module in the
current directory only when the command line itself names it.

``python -m`` and ``python -c`` put the current directory first on ``sys.path``; the console
script does not, and earlier rltrain appended it for every command. Either way a file planted
beside the runs (``wandb.py``, ``triton.py``, a ``*.dist-info/entry_points.txt``) would be
imported by any library that looks for an optional module, or read as an installed plugin,
by commands that only read records. :func:`isolate` takes the current directory off the
search path; :func:`allow_local` lets one top-level module of it be found again, which the
import of a trusted name (the user's own configs, overrides, ``--import`` and ``--trust``)
does, and nothing read from a file can.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType


def _is_current(entry: str) -> bool:
    """Whether a ``sys.path`` entry means the current directory."""
    if entry in ("", "."):
        return True
    try:
        return Path(entry).resolve() == Path.cwd().resolve()
    except OSError:
        return False


class LocalModules:
    """A finder (last on ``sys.meta_path``) of the current directory's top-level modules whose
    names were allowed; submodules follow their package's own ``__path__``."""

    def __init__(self) -> None:
        self.allowed: set[str] = set()

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if path is not None or name not in self.allowed:
            return None
        return PathFinder.find_spec(name, [os.getcwd()])


_LOCAL = LocalModules()


def isolate() -> None:
    """Take the current directory off ``sys.path`` (the ``rltrain`` command's first step) and
    install the finder of the local modules the command line names."""
    sys.path[:] = [entry for entry in sys.path if not _is_current(entry)]
    if _LOCAL not in sys.meta_path:
        sys.meta_path.append(_LOCAL)


def allow_local(module_name: str) -> None:
    """Let the top-level module of ``module_name`` be imported from the current directory
    (when no installed one has its name): for names the user gave."""
    _LOCAL.allowed.add(module_name.split(".")[0])


def local_file(module_name: str) -> Path | None:
    """The file or package folder in the current directory that ``module_name``'s top-level
    module would be, if there is one (for an error that says why it was not imported)."""
    top = module_name.split(".")[0]
    spec = PathFinder.find_spec(top, [os.getcwd()])
    if spec is None:
        return None
    return Path(spec.origin) if spec.has_location and spec.origin else Path.cwd() / top


def installed_entry_points(group: str) -> Iterator[importlib.metadata.EntryPoint]:
    """The entry points of ``group`` that installed distributions declare: those found on
    ``sys.path`` less the current directory (whose ``*.dist-info`` folders anyone who can
    write beside the runs could plant), one distribution per name."""
    path = [entry for entry in sys.path if not _is_current(entry)]
    seen: set[str] = set()
    for distribution in importlib.metadata.distributions(path=path):
        name = distribution.metadata["Name"] or ""
        if name in seen:
            continue
        seen.add(name)
        yield from distribution.entry_points.select(group=group)

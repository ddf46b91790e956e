"""Where a module would be imported from, found as the import system finds it but importing
nothing: what :mod:`rltrain.settings.targets` checks before a stored config's module is
imported (importing a module runs its code)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec

#: A module name: dotted identifiers (what a stored config may ask to import).
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class FoundModule:
    """Where a module would be imported from, found without importing it.

    Attributes:
        name: The module's dotted name.
        origin: The file its import runs (None for a namespace package or a built-in).
        locations: Its search locations for submodules (the folders of a package; every
            folder of a namespace package); empty for a plain module.
    """

    name: str
    origin: str | None
    locations: tuple[str, ...]


def find_module_path(module_name: str) -> list[FoundModule]:
    """Each module of ``module_name``'s dotted path (``a``, ``a.b``, ``a.b.c``), found as the
    import system would find it, importing none (a module already imported is read from
    ``sys.modules``). Raises ``ImportError`` when one is missing."""
    found: list[FoundModule] = []
    locations: Sequence[str] | None = None
    for prefix in module_prefixes(module_name):
        if found and not found[-1].locations:
            raise ImportError(f"No module named {prefix!r}; {found[-1].name!r} is not a "
                              "package")
        loaded = sys.modules.get(prefix)
        if loaded is not None:
            module = FoundModule(prefix, getattr(loaded, "__file__", None),
                                 tuple(str(p) for p in getattr(loaded, "__path__", None) or ()))
        else:
            module = found_module(prefix, find_spec(prefix, locations))
        found.append(module)
        locations = list(module.locations)
    return found


def find_spec(name: str, locations: Sequence[str] | None) -> ModuleSpec | None:
    """``name``'s spec from the import system's finders, given its parent's search
    ``locations`` (None at the top level): what ``importlib.util.find_spec`` does, without
    importing the parent."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec: ModuleSpec | None = find(name, locations)
        except KeyError:  # a namespace package inside one not imported: found by hand
            spec = _namespace_spec(name, locations or ())
        if spec is not None:
            return spec
    return None


def _namespace_spec(name: str, locations: Sequence[str]) -> ModuleSpec | None:
    """The spec of the namespace package ``name`` (folders without ``__init__.py``) in its
    parent's ``locations``; what ``PathFinder`` builds once the parent is imported."""
    tail = name.rpartition(".")[2]
    folders = [os.path.join(p, tail) for p in locations if os.path.isdir(os.path.join(p, tail))]
    if not folders:
        return None
    spec = ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = folders
    return spec


def found_module(name: str, spec: ModuleSpec | None) -> FoundModule:
    if spec is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    origin = spec.origin if spec.has_location else None
    return FoundModule(name, origin, tuple(str(p) for p in spec.submodule_search_locations or ()))


def module_prefixes(module_name: str) -> list[str]:
    parts = module_name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

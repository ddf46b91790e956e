"""Objects named by import path, as Hydra's ``_target_``: envs, wrappers, agents, strategies.

A config names a class or function by its import path (``"minigrid.wrappers.ImgObsWrapper"``
or ``"my_envs:Corridor"``) plus keyword arguments; :func:`locate` finds it and
:func:`import_path` gives the path of an object when it has one (classes and module-level
functions, not lambdas or local functions).

What a stored config names (a run directory's ``config.yaml``, a checkpoint's config, a seed
group's or a study's record) is untrusted: :func:`locate` with an untrusted :class:`Trust`
accepts only a class of the expected kind (an env, a wrapper, an agent, a strategy: made by its
constructor, never an arbitrary function such as ``os.system``), from a package a stored config
may import (:data:`STORED_IMPORTS` and the packages that declare Gymnasium's environment entry
point: importing a module runs its code), never from inside the directory the config came from
or from the current directory, unless the user names the module as trusted (``rltrain ...
--trust MODULE``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltrain.settings.module_finder import (
    MODULE_NAME,
    FoundModule,
    find_module_path,
    find_spec,
    found_module,
    module_prefixes,
)
from rltrain.settings.search_path import allow_local, installed_entry_points, local_file


class TargetError(ValueError):
    """An import path does not name what it must, or may not be used."""


@dataclass(frozen=True)
class Trust:
    """What a stored config may name.

    Attributes:
        stored_in: The folder the config was read from (a run directory), or None for the
            user's own configs and overrides, which may name anything.
        modules: Modules the user trusts (``--trust``): any callable of theirs may be named,
            from wherever they are. Default none.
        local: Whether a trusted name may be found in the current directory (the user's own
            names); False for the modules rltrain itself imports (``ale_py``) and for names
            already checked when their config was read. Default True.
    """

    stored_in: Path | None = None
    modules: Collection[str] = ()
    local: bool = True

    def trusts(self, module: str) -> bool:
        """Whether ``module`` is one the user named or lies in one (or the config is their
        own)."""
        if self.stored_in is None:
            return True
        return any(module == name or module.startswith(name + ".") for name in self.modules)


#: The user's own config: anything may be named.
TRUSTED = Trust()
#: What rltrain imports by itself, or imports again after its config was checked: anything,
#: but only from installed packages (never a module of the current directory the command
#: line did not name).
INSTALLED = Trust(local=False)

#: The top-level packages a stored config may import without ``--trust``: rltrain's,
#: Gymnasium's, and packages that exist to register environments (their import registers the
#: ids). Besides these, the packages of installed distributions that declare Gymnasium's
#: ``gymnasium.envs`` entry point (:data:`ENV_ENTRY_POINTS`).
STORED_IMPORTS = frozenset({
    "rltrain", "gymnasium", "ale_py", "envpool", "minigrid", "miniworld", "gymnasium_robotics",
    "shimmy", "highway_env", "panda_gym", "metaworld"})
#: The entry-point group through which installed packages register Gymnasium environments.
ENV_ENTRY_POINTS = "gymnasium.envs"


@functools.cache
def env_packages() -> frozenset[str]:
    """The top-level packages a stored config may import: :data:`STORED_IMPORTS` and those of
    the installed ``gymnasium.envs`` entry points."""
    declared = {entry.value.partition(":")[0].split(".")[0]
                for entry in installed_entry_points(ENV_ENTRY_POINTS)}
    return STORED_IMPORTS | {name for name in declared if name}


def admit(path: str, trust: Trust, what: str) -> None:
    """Before ``path`` (``module.Name``, ``module:Name`` or a module) is looked up: for the
    user's own names, let its top-level module be found in the current directory too; for an
    untrusted config, refuse it unless its package is one a stored config may import."""
    module = path.partition(":")[0]
    top = module.split(".")[0]
    if not MODULE_NAME.fullmatch(module):
        return  # names no module: what reads it says so
    if trust.stored_in is None or trust.trusts(module) or trust.trusts(top):
        if trust.local:
            allow_local(top)
    else:
        refuse_unlisted(top, trust, what, path)


def refuse_unlisted(module_name: str, trust: Trust, what: str, path: str) -> None:
    """Refuse ``module_name`` for an untrusted config unless its package is one a stored
    config may import (:func:`env_packages`) or one the user trusts."""
    top = module_name.split(".")[0]
    if trust.trusts(module_name) or top in env_packages():
        return
    source = "" if path == module_name else f" (for {path!r})"
    raise TargetError(
        f"{what}: the stored config would import {top!r}{source}. Importing a module runs its "
        "code, and a stored config (a run's, a checkpoint's, a seed group's or a study's) may "
        "import only rltrain, Gymnasium and packages that register environments. If you wrote "
        f"it, confirm the module on the command line: --trust {top}.")


@dataclass(frozen=True)
class Target:
    """A callable by import path with keyword arguments; calling it calls the located object.

    Attributes:
        path: ``"package.module.Name"`` or ``"package.module:Name"``.
        kwargs: Keyword arguments added to each call. Default none.
    """

    path: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any) -> Any:
        return locate(self.path)(*args, **dict(self.kwargs))

    def describe(self) -> dict[str, Any]:
        """``{"_target_": path, **kwargs}``, as a config section or list item holds it."""
        return {"_target_": self.path, **dict(self.kwargs)}


def locate(path: str, *, kind: type | None = None, trust: Trust = TRUSTED,
           what: str = "_target_") -> Any:
    """The object ``path`` names. With a ``kind``, it must be that class or a subclass (or,
    for trusted paths, any callable); ``what`` names the config key in errors."""
    if not isinstance(path, str) or not path.strip():
        raise TargetError(f"{what}: an import path is a non-empty string such as "
                          f"'package.module.Name'; got {path!r}.")
    admit(path, trust, what)
    module_name, attribute = _split(path, what)
    obj: Any = _import(module_name, trust, what, path)
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"{what}: {module_name!r} has no {attribute!r} (from {path!r}).")
        obj = getattr(obj, part)
    _check_kind(obj, path, module_name, kind, trust, what)
    return obj


def import_modules(names: Collection[str], trust: Trust = TRUSTED, what: str = "env.imports"
                   ) -> None:
    """Import each module of ``names`` (packages that register Gymnasium ids); for a stored
    config, none whose file lies inside the folder it came from."""
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise TargetError(f"{what}: a module name is a non-empty string; got {name!r}.")
        _import(name, trust, what, name)


def check_untrusted(path: str, trust: Trust, what: str) -> None:
    """Refuse ``path`` (``module.Name``, ``module:Name`` or a module) when its package is not
    one a stored config may import, or a module of it would be imported from inside the folder
    the untrusted config came from; imports nothing (for a config part that is read but not
    built)."""
    admit(path, trust, what)
    if ":" in path or not MODULE_NAME.fullmatch(path):
        module_name = path.partition(":")[0]
    else:
        prefix = _importable_prefix(path.split("."))
        module_name = prefix[-1].name if prefix else ""
    if not module_name or trust.trusts(module_name) or not MODULE_NAME.fullmatch(
            module_name):
        return
    try:
        modules = find_module_path(module_name)
    except ImportError:
        return  # nothing to import there: building the part says what is missing
    for module in modules:
        _refuse_inside(module, trust, what, path)


def _import(module_name: str, trust: Trust, what: str, path: str) -> Any:
    """Import ``module_name``. For the user's own names, a module in the current directory is
    found too (:func:`allow_local`). For an untrusted config, only a package a stored config
    may import (:func:`refuse_unlisted`), once every module of its dotted path has been found
    (without importing any) and none of their files or search locations lies inside the folder
    the config came from, and each again, as it is imported, with its parent's real search
    path."""
    if not MODULE_NAME.fullmatch(module_name):
        raise TargetError(f"{what}: {module_name!r} (from {path!r}) is not a module name "
                          "(dotted Python identifiers).")
    checked = not trust.trusts(module_name)
    if checked:
        refuse_unlisted(module_name, trust, what, path)
    elif trust.local:
        allow_local(module_name)
    try:
        for found in _find_or_refuse(module_name, what, path) if checked else ():
            _refuse_inside(found, trust, what, path)
        module: Any = None
        for prefix in module_prefixes(module_name):
            if checked and prefix not in sys.modules:
                locations = getattr(module, "__path__", None)
                found = found_module(prefix, find_spec(prefix, locations))
                _refuse_inside(found, trust, what, path)
            module = importlib.import_module(prefix)
    except ImportError as error:
        source = "" if path == module_name else f" for {path!r}"
        raise TargetError(f"{what}: cannot import {module_name!r}{source} ({error}). Install "
                          "the package (e.g. pip install minigrid), or run from the folder "
                          "holding your module (the current directory is searched).") from error
    return module


def _find_or_refuse(module_name: str, what: str, path: str) -> list[FoundModule]:
    """:func:`find_module_path` for an untrusted name; a module found only in the current
    directory is named in the refusal, with the flag that allows it."""
    try:
        return find_module_path(module_name)
    except ImportError:
        local = local_file(module_name)
        if local is None:
            raise
        top = module_name.split(".")[0]
        raise TargetError(
            f"{what}: {path!r} would be imported from {local}, in the current directory, which "
            "a stored config may not import from (only the command line names local modules). "
            f"If it is yours, confirm it: --trust {top}.") from None


def _split(path: str, what: str) -> tuple[str, str]:
    """``(module, attribute)`` of ``path``: around its ``:``, or the longest module prefix of a
    dotted path, found without importing anything."""
    if ":" in path:
        module_name, _, attribute = path.partition(":")
        if module_name and attribute:
            return module_name, attribute
        raise TargetError(f"{what}: {path!r} is not 'module:Name'.")
    parts = path.split(".")
    if len(parts) > 1 and MODULE_NAME.fullmatch(path):
        try:
            modules = find_module_path(".".join(parts[:-1]))
        except (ImportError, ValueError):
            modules = _importable_prefix(parts[:-1])
        if modules:
            cut = len(modules)
            return ".".join(parts[:cut]), ".".join(parts[cut:])
    raise TargetError(f"{what}: no module of {path!r} can be imported. Write "
                      "'package.module.Name' (or 'module:Name') for an installed package or a "
                      "module in the current directory.")


def _importable_prefix(parts: list[str]) -> list[FoundModule]:
    """The modules of the longest prefix of ``parts`` that can be found, importing none."""
    found: list[FoundModule] = []
    for cut in range(1, len(parts) + 1):
        try:
            found = find_module_path(".".join(parts[:cut]))
        except (ImportError, ValueError):
            break
    return found


def _refuse_inside(module: FoundModule, trust: Trust, what: str, path: str) -> None:
    """Refuse a module whose file or search locations lie inside the folder the stored config
    came from: a run directory's files are untrusted, code included. Both the path as written
    and the path links lead to count."""
    assert trust.stored_in is not None
    folder = trust.stored_in
    top = module.name.split(".")[0]
    for place in (module.origin, *module.locations):
        if place is not None and inside(Path(place), folder):
            raise TargetError(
                f"{what}: {path!r} would be imported from {place}, inside {trust.stored_in}, "
                "where the stored config came from; code in a run directory is never run. "
                f"Move the module out, or confirm it: --trust {top}.")
        if place is not None and module.name == top and top not in sys.modules and \
                _from_current_directory(module):
            raise TargetError(  # Python's own search path has it (a REPL, python -c)
                f"{what}: {path!r} would be imported from {place}, in the current directory, "
                "which a stored config may not import from (only your own names reach it). "
                f"If it is yours, confirm it: --trust {top} (trust=[{top!r}] in Python).")


def _from_current_directory(module: FoundModule) -> bool:
    """Whether the top-level ``module`` is the one the current directory holds (found through a
    search-path entry that is the current directory, as a REPL or ``python -c`` has)."""
    local = local_file(module.name)
    if local is None:
        return False
    places = {os.path.abspath(p) for p in (module.origin, *module.locations) if p}
    return os.path.abspath(local) in places or any(
        os.path.dirname(p) == os.path.abspath(local) for p in places)


def inside(place: Path, folder: Path) -> bool:
    """Whether ``place`` is ``folder`` or lies in it, as written or with links resolved (for a
    refusal: either counts)."""
    written, root = Path(os.path.abspath(place)), Path(os.path.abspath(folder))
    return written == root or root in written.parents or within(place, folder)


def within(place: Path, folder: Path) -> bool:
    """Whether ``place`` is ``folder`` or lies in it once links are resolved (for a folder a
    run directory's files name: where rltrain would really read or write)."""
    there, root = place.resolve(), folder.resolve()
    return there == root or root in there.parents


def _check_kind(obj: Any, path: str, module: str, kind: type | None, trust: Trust,
                what: str) -> None:
    if kind is None or (inspect.isclass(obj) and issubclass(obj, kind)):
        return
    expected = f"a subclass of {kind.__module__}.{kind.__qualname__}"
    if trust.trusts(module):
        if callable(obj):
            return
        raise TargetError(f"{what}: {path!r} is not callable; it must be {expected} or a "
                          "function returning one.")
    raise TargetError(
        f"{what}: the stored config names {path!r}, which is not {expected}. A stored config "
        "(a run directory's or a checkpoint's) is untrusted, so it may only name classes of "
        f"that kind; if you wrote {path!r} yourself, confirm its module: --trust {module}.")


def import_path(obj: Any) -> str | None:
    """``"module.QualName"`` of a class or module-level function that this path locates again;
    None for lambdas, local functions and objects of ``__main__`` (a script run directly
    cannot be imported by that name)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module == "__main__":
        return None
    loaded = sys.modules.get(module)
    found: Any = loaded
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module}.{qualname}" if found is obj else None


def describe_callable(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """``{"_target_": path, **kwargs}`` for a :class:`Target`, a class or module-level function,
    or a ``functools.partial`` of one with plain keyword arguments; None when it has no path."""
    if isinstance(fn, Target):
        return fn.describe()
    if isinstance(fn, functools.partial):
        inner = describe_callable(fn.func)
        if inner is None or fn.args or not all(_plain(v) for v in fn.keywords.values()):
            return None
        return {**inner, **fn.keywords}
    path = import_path(fn)
    return {"_target_": path} if path is not None else None


def _plain(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def split_target(section: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(path, kwargs)`` of a ``{"_target_": path, **kwargs}`` mapping."""
    kwargs = {str(k): v for k, v in section.items() if k != "_target_"}
    return str(section["_target_"]), kwargs

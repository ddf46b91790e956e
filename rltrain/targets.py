"""Objects named by import path, as Hydra's ``_target_``: envs, wrappers, agents, strategies.

A config names a class or function by its import path (``"minigrid.wrappers.ImgObsWrapper"``
or ``"my_envs:Corridor"``) plus keyword arguments; :func:`locate` finds it and
:func:`import_path` gives the path of an object when it has one (classes and module-level
functions, not lambdas or local functions).

What a stored config names (a run directory's ``config.yaml``, a checkpoint's config) is
untrusted: :func:`locate` with ``trusted=False`` accepts only a class of the expected kind (an
env, a wrapper, an agent, a strategy: made by its constructor, never an arbitrary function such
as ``os.system``), from a module that is not inside the directory the config came from, unless
the user names the module as trusted (``rltrain ... --trust MODULE``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    """

    stored_in: Path | None = None
    modules: Collection[str] = ()

    def trusts(self, module: str) -> bool:
        """Whether ``module`` is one the user named or lies in one (or the config is their
        own)."""
        if self.stored_in is None:
            return True
        return any(module == name or module.startswith(name + ".") for name in self.modules)


#: The user's own config: anything may be named.
TRUSTED = Trust()


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
    module_name, attribute = _split(path, what)
    if not trust.trusts(module_name):
        _refuse_inside(module_name, trust, what, path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise TargetError(f"{what}: cannot import {module_name!r} for {path!r} ({error}). "
                          "Install the package, or run from the folder holding your module "
                          "(the current directory is searched).") from error
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
        if not trust.trusts(name):
            _refuse_inside(name, trust, what, name)
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise TargetError(f"{what}: cannot import {name!r} ({error}). Install the package "
                              "(e.g. pip install minigrid), or run from the folder holding "
                              "your module.") from error


def _split(path: str, what: str) -> tuple[str, str]:
    """``(module, attribute)`` of ``path``: around its ``:``, or the longest importable module
    prefix of a dotted path."""
    if ":" in path:
        module_name, _, attribute = path.partition(":")
        if module_name and attribute:
            return module_name, attribute
        raise TargetError(f"{what}: {path!r} is not 'module:Name'.")
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            return name, ".".join(parts[cut:])
    raise TargetError(f"{what}: no module of {path!r} can be imported. Write "
                      "'package.module.Name' (or 'module:Name') for an installed package or a "
                      "module in the current directory.")


def _refuse_inside(module_name: str, trust: Trust, what: str, path: str) -> None:
    """Refuse a module whose file lies inside the folder the stored config came from: a run
    directory's files are untrusted, code included."""
    assert trust.stored_in is not None
    top = module_name.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin is None:
        return
    folder = trust.stored_in.resolve()
    if folder in Path(origin).resolve().parents:
        raise TargetError(
            f"{what}: {path!r} is imported from {origin}, inside {trust.stored_in}, where the "
            "stored config came from; code in a run directory is never run. Move the module "
            f"out, or confirm it: --trust {top}.")


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

"""Names that moved in the layered layout (issue 28), still found where they were: importing
one from its old place works and warns once with its new home (PEP 562 module
``__getattr__``), so code written against the earlier layout keeps running while it moves."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved(package: str, homes: Mapping[str, str], *, warn: bool = True
          ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that finds each name of ``homes`` in its
    module (imported on first use), with a ``DeprecationWarning`` naming it when ``warn``."""

    def find(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if warn:
            warnings.warn(f"{package}.{name} moved: import it from {home}.", DeprecationWarning,
                          stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return find

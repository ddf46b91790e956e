"""The checks every setting gets from its declared type, after its declared bounds
(:mod:`rltrain.settings.base`): a ``float`` setting (``float | None`` too) is a finite number, so
``inf`` and NaN never reach a loss or a distribution; a ``bool`` one (``bool | None`` too) is
True or False, so ``2`` is not taken as true. :class:`~rltrain.settings.base.Settings` runs them
for every settings dataclass; a test walks every registered config so none is missed.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np


def check_typed_fields(owner: str, config: Any) -> None:
    """Raise ``ValueError("<owner>: <field> must be ...")`` for the first field of the
    dataclass ``config`` whose value does not fit its declared ``float`` or ``bool`` type."""
    for field in dataclasses.fields(config):
        kind, optional = field_kind(field.type)
        value = getattr(config, field.name)
        problem = (_float_problem(value, optional) if kind == "float"
                   else _bool_problem(value, optional) if kind == "bool" else None)
        if problem is not None:
            raise ValueError(f"{owner}: {field.name} {problem}; got {value!r}.")


def field_kind(annotation: object) -> tuple[str | None, bool]:
    """``("float", optional)`` for a field declared ``float`` or ``float | None``, ``("bool",
    optional)`` likewise, ``(None, ...)`` for any other type. Read from the annotation's text
    (a module with ``from __future__ import annotations`` keeps it as a string), so nothing is
    imported or evaluated."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__",
                                                                  str(annotation))
    parts = {part.strip() for part in text.split("|")}
    optional = "None" in parts
    parts.discard("None")
    kind = next(iter(parts)) if len(parts) == 1 else None
    return (kind if kind in ("float", "bool") else None), optional


def _float_problem(value: object, optional: bool) -> str | None:
    if value is None and optional:
        return None
    what = "a finite number" + (" (or None)" if optional else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return f"must be {what}"
    return None if math.isfinite(value) else f"must be {what}, not infinite or NaN"


def _bool_problem(value: object, optional: bool) -> str | None:
    if isinstance(value, (bool, np.bool_)) or (value is None and optional):
        return None
    return ("must be True or False" + (" (or None)" if optional else "")
            + " (a config says true or false" + (" or null)" if optional else ")"))

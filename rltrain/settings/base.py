"""One way to declare a setting and check it: its bounds, units and words beside its default,
checked once, where the value enters (the settings dataclass's ``__post_init__``).

    @dataclass
    class MyConfig(Settings):
        lr: float = learning_rate(3e-4)
        gamma: float = discount_factor()
        hidden_sizes: list[int] = widths(64, 64)
        warmup: int = setting(1_000, ge=0, unit="env steps")

        def rules(self):  # what no single field's bounds say
            return [(self.lr < 1 or self.warmup > 0, "an lr >= 1 needs a warm-up.")]

``MyConfig(lr=0)`` raises ``ValueError("MyConfig: lr must be > 0; got 0.")``: each field's
declared bounds in order, then :meth:`Settings.rules`, then the checks every field gets from its
declared type (:func:`~rltrain.settings.checks.check_typed_fields`: finite floats, real bools).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from rltrain.errors import require
from rltrain.settings.checks import check_typed_fields, field_kind

#: The key of a field's :class:`Bounds` in its metadata.
BOUNDS = "rltrain.bounds"


@dataclass(frozen=True)
class Bounds:
    """What a setting's value may be, and how its error says so.

    Attributes:
        gt, ge, lt, le: Exclusive and inclusive limits of a number (None: no limit).
        choices: The values it may take (None: any within the limits).
        unit: The limits' unit, plural (``"env steps"``; ``"env step"`` after a limit of 1).
        each: The limits hold for every item of a list (``hidden_sizes``).
        says: The rule in words, where the limits would not say it (``"positive widths"``;
            what None means included).
        none: What None means, when None is allowed (``"to never evaluate"``).
        why: What the setting is, in the error (``"the Huber loss's threshold"``).
        finite: Infinity is refused by the limits themselves (for a setting whose rule says
            "a finite number"; any other float setting refuses it by its type).
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    choices: Sequence[Any] | None = None
    unit: str = ""
    each: bool = False
    says: str | None = None
    none: str | None = None
    why: str | None = None
    finite: bool = False

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (each item, for :attr:`each`) is within the bounds (None where
        :attr:`none` says what it means)."""
        if value is None and self.none is not None:
            return True
        if self.each:
            return isinstance(value, Sequence) and all(self._holds(v) for v in value)
        return self._holds(value)

    def _holds(self, value: Any) -> bool:
        if self.choices is not None:
            return bool(value in self.choices)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        value = cast(float, value)  # an int stays exact (10**400 is no float)
        if self.finite and not math.isfinite(value):
            return False
        return ((self.gt is None or value > self.gt) and (self.ge is None or value >= self.ge)
                and (self.lt is None or value < self.lt) and (self.le is None or value <= self.le))

    def rule(self) -> str:
        """The rule, as the error says it (``"> 0"``, ``"in (0, 1]"``, ``">= 1 env step"``)."""
        if self.says is not None:
            return self.says
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        low, high = _first(self.gt, self.ge), _first(self.lt, self.le)
        if low is not None and high is not None:
            text = (f"in {'(' if self.gt is not None else '['}{low:g}, {high:g}"
                    f"{')' if self.lt is not None else ']'}")
        elif low is not None:
            text = f"{'>' if self.gt is not None else '>='} {low:g}"
        else:
            assert high is not None, "a setting's bounds name a limit, choices or words"
            text = f"{'<' if self.lt is not None else '<='} {high:g}"
        limit = low if low is not None else high
        unit = self.unit.removesuffix("s") if limit == 1 else self.unit
        return f"{text} {unit}" if unit else text

    def message(self, name: str, value: Any) -> str:
        """The error for ``value`` of the setting ``name``."""
        none = f", or None {self.none}" if self.none is not None and self.says is None else ""
        why = f" ({self.why})" if self.why else ""
        shown = repr(value) if isinstance(value, str) else (
            list(value) if self.each and isinstance(value, Sequence) else value)
        return f"{name} must be {self.rule()}{none}{why}; got {shown}."


def _bounds(cls: type, name: str) -> Bounds | None:
    """The bounds of ``cls``'s setting ``name``: its own, or those of the nearest base class
    that declares them (a subclass that changes a default, ``DDPGConfig.policy_delay = 1``,
    keeps them)."""
    for base in cls.__mro__:
        field = getattr(base, "__dataclass_fields__", {}).get(name)
        if field is not None and BOUNDS in field.metadata:
            return field.metadata[BOUNDS]  # type: ignore[no-any-return]
    return None


def _first(*limits: float | None) -> float | None:
    return next((limit for limit in limits if limit is not None), None)


def setting(default: Any = dataclasses.MISSING, bounds: Bounds | None = None,
            **limits: Any) -> Any:
    """A dataclass field of ``default`` (none: a required field; a list is copied for each
    instance) with its :class:`Bounds`: ``bounds``, or made of ``limits`` (``gt=0``, ``ge=0,
    le=1``, ``choices=(...)``, ``unit="env steps"``, ...)."""
    metadata = {BOUNDS: bounds if bounds is not None else Bounds(**limits)}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def check_setting(name: str, value: Any, bounds: Bounds) -> None:
    """Raise ``ValueError`` unless ``value`` of the setting ``name`` is within ``bounds``: for
    a class that takes a setting as an argument (``Checkpointer(interval=...)``), with the
    bounds the settings dataclasses declare it with."""
    if not bounds.holds(value):
        raise ValueError(bounds.message(name, value))


def learning_rate(default: float) -> Any:
    """A learning rate: > 0."""
    return setting(default, gt=0)


def discount_factor(default: float = 0.99) -> Any:
    """A discount factor γ, or a trace decay λ: in [0, 1]."""
    return setting(default, ge=0, le=1)


def polyak(default: float) -> Any:
    """A target network's update rate τ (``θ' ← τθ + (1-τ)θ'``; 1 copies): in (0, 1]."""
    return setting(default, gt=0, le=1)


def widths(*default: int) -> Any:
    """Hidden layer widths, each >= 1."""
    return setting(list(default), ge=1, each=True, says="positive widths")


class Settings:
    """The base of every settings dataclass: its ``__post_init__`` checks each field's declared
    :class:`Bounds` in order, then :meth:`rules`, then each field's declared type; the errors
    start with :attr:`owner`."""

    #: What the errors start with (default: the dataclass's own name; a registry's section
    #: says its config's, :func:`~rltrain.settings.registry.registered`).
    owner: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        owner = self.owner or type(self).__name__
        require(owner, self._declared())
        require(owner, self.rules())
        check_typed_fields(owner, self)

    def rules(self) -> Iterable[tuple[bool, str]]:
        """Checks no single field's bounds make (across fields, or in the setting's own words):
        ``(ok, message)`` pairs, the first not ok raised. Default: none."""
        return ()

    def _declared(self) -> Iterable[tuple[bool, str]]:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            bounds = _bounds(type(self), field.name)
            value = getattr(self, field.name)
            if bounds is None or (value is None and field_kind(field.type)[1]):
                continue
            yield bounds.holds(value), bounds.message(field.name, value)

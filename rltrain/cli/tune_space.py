"""The search space of ``rltrain tune``: a YAML file of dotted config keys, read as untrusted
input and checked against the config before any trial runs.

Example (``ppo_cartpole.space.yaml``, or the shipped ``rltrain/config/shipped/spaces/ppo.yaml``)::

    agent.lr: {low: 1.0e-5, high: 3.0e-3, log: true}   # a float, sampled on a log scale
    strategy.update_epochs: {low: 1, high: 20}           # an int: both ends are ints
    agent.gamma: {choices: [0.95, 0.98, 0.99]}          # one of the values

``step`` (optional) quantises a number. Optuna's ``suggest_float``, ``suggest_int`` and
``suggest_categorical`` sample them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rltrain.config.files import SHIPPED_CONFIGS, literal_config, read_stored

#: Where the spaces shipped for each agent are (``spaces/<agent.name>.yaml``).
SHIPPED_SPACES = SHIPPED_CONFIGS / "spaces"

Scalar = bool | int | float | str | None


@dataclass(frozen=True)
class Dimension:
    """One tuned setting.

    Attributes:
        key: The dotted config key (``agent.lr``).
        low, high: The range of a number (``None`` for choices).
        log: Sample the number on a log scale.
        step: Quantise the number to multiples of ``step`` from ``low`` (``None``: none).
        choices: The values of a categorical setting (``None`` for a number).
    """

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Scalar, ...] | None = None

    @property
    def integer(self) -> bool:
        """Whether the number is an int (both ends are)."""
        return isinstance(self.low, int) and isinstance(self.high, int)

    def suggest(self, trial: Any) -> Scalar:
        """The value an Optuna ``trial`` samples for this setting."""
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))  # type: ignore[no-any-return]
        if self.integer:
            return trial.suggest_int(self.key, int(self.low or 0), int(self.high or 0),  # type: ignore[no-any-return]
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, float(self.low or 0.0),  # type: ignore[no-any-return]
                                   float(self.high or 0.0), step=self.step, log=self.log)

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is one this setting could sample."""
        if self.choices is not None:
            return any(type(value) is type(c) and value == c for c in self.choices)
        if self.integer and type(value) is not int:
            return False
        return _number(value) and float(self.low or 0) <= value <= float(self.high or 0)

    def describe(self) -> str:
        """The setting's values in words."""
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        return f"from {self.low} to {self.high}"

    def extremes(self) -> list[Scalar]:
        """The values that bound the setting (each choice, or both ends)."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]


def space_path(files: list[str], agent: str, given: Path | None) -> Path:
    """The space file: ``given``; else ``CONFIG.space.yaml``, or ``space.yaml``, beside the
    last config file that has one; else the one shipped for ``agent``."""
    if given is not None:
        return given
    for file in reversed([f for f in files if f.endswith((".yaml", ".yml"))]):
        for beside in (Path(file).with_suffix(".space.yaml"), Path(file).parent / "space.yaml"):
            if beside.is_file():
                return beside
    shipped = SHIPPED_SPACES / f"{agent}.yaml"
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(p.stem for p in SHIPPED_SPACES.glob("*.yaml")))
    raise ValueError(f"No search space for agent {agent!r}: write one (docs/tuning.md) and "
                     f"pass --space FILE. Spaces are shipped for: {known}.")


def read_space(path: Path) -> dict[str, Any]:
    """The space file's mapping, read as untrusted YAML."""
    try:
        node = read_stored(path)
    except OSError as error:
        raise ValueError(f"Cannot read the search space {path}: {error}.") from None
    if not isinstance(node, Mapping) or not node:
        raise ValueError(f"{path} is not a search space: write a mapping of dotted config "
                         "keys to {low, high} or {choices: [...]}.")
    return {str(k): v for k, v in node.items()}


def parse_space(raw: Mapping[str, Any], where: str,
                compose: Callable[[Mapping[str, Scalar]], DictConfig]) -> list[Dimension]:
    """``raw`` (a space file's mapping) as dimensions; each key must exist in the config and
    each bounding value must make a valid config (``compose(params)``), else ``ValueError``
    naming the key."""
    base = compose({})
    dimensions = []
    for key, spec in raw.items():
        dimension = _dimension(key, spec, where)
        if OmegaConf.select(base, key, default=_MISSING) is _MISSING:
            raise ValueError(f"{where}: {key} is not a config key (rltrain fit --print-config "
                             "shows them).")
        for value in dimension.extremes():
            try:
                compose({key: value})
            except Exception as error:
                raise ValueError(f"{where}: {key}={value!r} does not make a valid config: "
                                 f"{error}") from None
        dimensions.append(dimension)
    return dimensions


def check_params(params: Mapping[str, Any], dimensions: list[Dimension]) -> None:
    """Raise ``ValueError`` unless ``params`` (a trial's settings, as a study's database
    recorded them: untrusted) set exactly the space's keys, each to a value it could sample."""
    keys = [d.key for d in dimensions]
    if sorted(params) != sorted(keys):
        raise ValueError(f"its settings {sorted(map(str, params))[:10]} are not the search "
                         f"space's {sorted(keys)}")
    for dimension in dimensions:
        if not dimension.holds(params[dimension.key]):
            raise ValueError(f"{dimension.key}={repr(params[dimension.key])[:80]} is outside "
                             f"the search space ({dimension.describe()})")


def params_layer(params: Mapping[str, Scalar]) -> DictConfig:
    """A trial's settings as a config layer, strings taken literally (no interpolation)."""
    nested: dict[str, Any] = {}
    for key, value in params.items():
        *parents, last = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return literal_config(nested)


_MISSING = object()
#: A dotted config key.
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_FIELDS = {"low", "high", "log", "step", "choices"}


def _dimension(key: str, spec: Any, where: str) -> Dimension:
    if not KEY.fullmatch(key):
        raise ValueError(f"{where}: {key[:80]!r} is not a dotted config key (agent.lr).")
    if not isinstance(spec, Mapping) or not set(spec) <= _FIELDS or not spec:
        raise ValueError(f"{where}: {key} must be {{low: L, high: H[, log: true, step: S]}} "
                         f"or {{choices: [...]}}; got {spec!r}.")
    if "choices" in spec:
        choices = spec["choices"]
        if set(spec) != {"choices"} or not isinstance(choices, list) or not choices or \
                not all(_scalar(c) for c in choices):
            raise ValueError(f"{where}: {key}'s choices must be a non-empty list of numbers, "
                             f"strings, booleans or null, alone; got {spec!r}.")
        return Dimension(key, choices=tuple(choices))
    low: Any = spec.get("low")
    high: Any = spec.get("high")
    log, step = spec.get("log", False), spec.get("step")
    if not (_number(low) and _number(high) and low < high):
        raise ValueError(f"{where}: {key} needs numbers low < high; got {spec!r}.")
    if not isinstance(log, bool) or (log and low <= 0):
        raise ValueError(f"{where}: {key}: log must be true or false, and a log scale needs "
                         f"low > 0; got {spec!r}.")
    if step is not None and not (_number(step) and step > 0 and not log):
        raise ValueError(f"{where}: {key}: step must be a positive number, without log; got "
                         f"{spec!r}.")
    return Dimension(key, low=low, high=high, log=log, step=step)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        math.isfinite(value)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | str) or _number(value)

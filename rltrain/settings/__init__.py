"""What every config below the facade shares: the checks of a setting's value (:mod:`.checks`),
the registry agents and strategies add themselves to (:mod:`.registry`), the trust rules for
import paths (:mod:`.targets`, :mod:`.search_path`), the loops' settings (:mod:`.loops`) and the
replay's (:mod:`.replay`)."""

from rltrain.settings.base import (
    Bounds,
    Settings,
    check_setting,
    discount_factor,
    learning_rate,
    polyak,
    setting,
    widths,
)

__all__ = [
    "Bounds",
    "Settings",
    "check_setting",
    "discount_factor",
    "learning_rate",
    "polyak",
    "setting",
    "widths",
]

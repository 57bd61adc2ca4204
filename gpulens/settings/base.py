"""The declaration of one setting, and small value checks.

Besides each setting's own check, every value passes three limits that hold for all
settings (issue #13): a float is finite; a duration (a name ending in ``_s``, ``_min``,
``_h``, ``_hours``, ``_days`` or ``_years``) is at most ``MAX_DURATION_S``; a string is
at most ``max_len`` characters. See :func:`limits_error`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str  # dotted: section.key
    type: type
    default: Any
    help: str
    check: Callable[[Any], bool] | None = None
    expected: str = ""  # what a good value looks like, for the error message
    max_len: int = 4096  # characters, for str settings

    @property
    def env(self) -> str:
        return "GPULENS_" + self.name.replace(".", "_").upper()


def between(lo, hi):
    return lambda v: lo <= v <= hi


def positive(v) -> bool:
    return v > 0




MAX_DURATION_S = 100 * 365.25 * 86400  # 100 years: beyond it datetime arithmetic overflows
_UNIT_S = {"s": 1, "min": 60, "h": 3600, "hours": 3600, "days": 86400, "years": 365.25 * 86400}
_DURATION = re.compile(r"_(s|min|h|hours|days|years)$")


def duration_unit_s(name: str) -> float | None:
    """Seconds in the unit a setting's name ends with (``retention.raw_days`` -> 86400)."""
    m = _DURATION.search(name)
    return _UNIT_S[m[1]] if m else None


def limits_error(setting: Setting, value: Any) -> str | None:
    """What breaks the limits every setting shares, or None (the value's type is checked)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    unit = duration_unit_s(setting.name)
    if unit is not None and isinstance(value, int | float) and abs(value) * unit > MAX_DURATION_S:
        unit_name = setting.name.rsplit("_", 1)[1]
        return f"is longer than 100 years ({MAX_DURATION_S / unit:g} {unit_name})"
    if isinstance(value, str) and len(value) > setting.max_len:
        return f"is {len(value)} characters long; at most {setting.max_len} are accepted"
    return None

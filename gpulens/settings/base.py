"""The declaration of one setting, and small value checks."""

from __future__ import annotations

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

    @property
    def env(self) -> str:
        return "GPULENS_" + self.name.replace(".", "_").upper()


def between(lo, hi):
    return lambda v: lo <= v <= hi


def positive(v) -> bool:
    return v > 0



"""Every setting of gpulens, declared once; one module per area.

To add an area: write ``gpulens/settings/<area>.py`` with a ``SETTINGS`` tuple and list
it below. Then regenerate the docs (see gpulens/config_doc.py); a test fails until then.

Code that needs a setting's default reads it from here (``default(name)``, or a dataclass
field made by ``setting_field(name)``) instead of writing the value again;
tests/test_settings_once.py fails when a default is restated.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

from gpulens.settings import (
    alerts,
    analytics,
    core,
    dashboard,
    grid,
    ha,
    reports,
    sources,
)
from gpulens.settings.base import Setting

SETTINGS: tuple[Setting, ...] = (core.SETTINGS + analytics.SETTINGS + dashboard.SETTINGS
                                  + alerts.SETTINGS + reports.SETTINGS + sources.SETTINGS
                                  + ha.SETTINGS + grid.SETTINGS)

_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def default(name: str) -> Any:
    """The declared default of the setting ``name`` (dotted); KeyError if undeclared."""
    return _BY_NAME[name].default


def setting_field(name: str) -> Any:
    """A dataclass field defaulting to the setting ``name``, which its metadata records
    (read back by :func:`values_for`)."""
    return field(default=default(name), metadata={"setting": name})


def values_for(cls: type, settings: Any) -> dict[str, Any]:
    """Keyword arguments for the dataclass ``cls`` from ``settings`` (a gpulens Config or a
    mapping of dotted names): each field made by :func:`setting_field` takes its
    setting's value where ``settings`` has one."""
    values = {}
    for f in fields(cls):
        name = f.metadata.get("setting")
        if name is None:
            continue
        try:
            values[f.name] = settings[name]
        except (KeyError, TypeError):
            continue
    return values


__all__ = ["SETTINGS", "Setting", "default", "setting_field", "values_for"]

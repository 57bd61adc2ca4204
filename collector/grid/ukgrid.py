"""Great Britain's national grid (NESO, formerly National Grid ESO): the Carbon Intensity
API (https://carbon-intensity.github.io/api-definitions/), open data without a key.

``GET /intensity/{from}/{to}`` (times like ``2018-01-20T12:00Z``) answers
``{"data": [{"from", "to", "intensity": {"forecast", "actual", "index"}}]}``: per
half-hour, gCO2/kWh of Great Britain's generation. ``actual`` is null until the half-hour
is settled; the forecast stands for it until then and is replaced at a later cycle.
NESO counts operational (direct) emissions, not lifecycle ones like the other sources.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import requests

from collector.grid import (
    GridParseError,
    Parsed,
    Reading,
    each,
    field_of,
    get_json,
    intensity,
    show,
    utc_time,
)

NAME = "ukgrid"


def parse_period(item, where: str = "intensity") -> Reading:
    """One half-hour: its ``actual`` intensity, else its ``forecast``."""
    values = field_of(item, "intensity", where)
    if not isinstance(values, dict):
        raise GridParseError(f"{where}: intensity {show(values)} is not a JSON object")
    raw = values.get("actual")
    if raw is None:
        raw = values.get("forecast")
    if raw is None:
        raise GridParseError(f"{where}: neither actual nor forecast in {show(item)}")
    return Reading(utc_time(field_of(item, "from", where), where), intensity(raw, where))


def parse_intensity(doc) -> Parsed:
    """The answer of ``/intensity`` and ``/intensity/{from}/{to}``."""
    return each(field_of(doc, "data", "intensity"), "intensity.data", parse_period)


class UkGrid:
    """Asks the last ``lookback_h`` hours of Great Britain's intensity."""

    name = NAME
    zone = "GB"

    def __init__(self, *, url: str, lookback_h: float, timeout_s: float):
        self._url, self._timeout = url.rstrip("/"), timeout_s
        self._lookback = timedelta(hours=lookback_h)

    def fetch(self, http: requests.Session, now: datetime) -> Parsed:
        fmt = "%Y-%m-%dT%H:%MZ"
        path = f"/intensity/{(now - self._lookback).strftime(fmt)}/{now.strftime(fmt)}"
        return parse_intensity(get_json(http, self._url + path, "/intensity",
                                        timeout_s=self._timeout,
                                        headers={"Accept": "application/json"}))

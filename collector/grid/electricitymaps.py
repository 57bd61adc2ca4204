"""Electricity Maps (https://static.electricitymaps.com/api/docs/): grid intensity of a zone.

Two endpoints of API v3, authorised by the header ``auth-token``:

- ``GET /v3/carbon-intensity/latest?zone=DE``: one object ``{"zone", "carbonIntensity",
  "datetime", "updatedAt", "emissionFactorType", "isEstimated", "estimationMethod"}``;
- ``GET /v3/carbon-intensity/history?zone=DE``: ``{"zone", "history": [<such objects>]}``,
  the last 24 hours (the paid ``/past-range`` answers the same objects under ``"data"``,
  which the history parser also reads).

``carbonIntensity`` is gCO2e/kWh of the consumed mix (lifecycle factors unless asked
otherwise), ``datetime`` the start of its hour. The provider asks the history each cycle,
so a reading Electricity Maps revises later replaces the stored one.
"""

from __future__ import annotations

from datetime import datetime

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

NAME = "electricitymaps"


def parse_point(doc, where: str = "carbon-intensity") -> Reading:
    """One carbon-intensity object; GridParseError (naming it) without a usable
    ``datetime`` and ``carbonIntensity`` (null: no data for that hour)."""
    raw = field_of(doc, "carbonIntensity", where)
    if raw is None:
        raise GridParseError(f"{where}: no intensity (null) in {show(doc)}")
    return Reading(utc_time(field_of(doc, "datetime", where), where),
                   intensity(raw, where))


def parse_latest(doc) -> Parsed:
    """The answer of ``/v3/carbon-intensity/latest``."""
    return Parsed([parse_point(doc, "carbon-intensity/latest")])


def parse_history(doc) -> Parsed:
    """The answer of ``/v3/carbon-intensity/history`` (or ``/past-range``): every point;
    a bad point costs that point."""
    where = "carbon-intensity/history"
    if isinstance(doc, dict) and "history" not in doc and "data" in doc:
        return each(doc["data"], where + ".data", parse_point)
    return each(field_of(doc, "history", where), where + ".history", parse_point)


class ElectricityMaps:
    """Asks ``/v3/carbon-intensity/history`` for ``zone`` with ``token``."""

    name = NAME

    def __init__(self, *, url: str, token: str, zone: str, timeout_s: float):
        if not zone:
            raise ValueError("electricitymaps: no zone (set grid.electricitymaps_zone or "
                             "carbon.region)")
        self.zone, self._url, self._timeout = zone, url.rstrip("/"), timeout_s
        self._headers = {"auth-token": token} if token else {}

    def fetch(self, http: requests.Session, now: datetime) -> Parsed:
        path = "/v3/carbon-intensity/history"
        doc = get_json(http, self._url + path, path, timeout_s=self._timeout,
                       params={"zone": self.zone}, headers=self._headers)
        return parse_history(doc)

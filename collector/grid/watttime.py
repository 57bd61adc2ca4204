"""WattTime (https://docs.watttime.org): emissions rates of a grid region, API v3.

- ``GET /login`` with HTTP basic auth (user name and password) answers
  ``{"token": "..."}``, a bearer token valid for 30 minutes; the provider logs in again
  before it expires and after any 401.
- ``GET /v3/historical?region=...&signal_type=co2_moer&start=...&end=...`` answers
  ``{"data": [{"point_time", "value"}, ...], "meta": {"region", "signal_type", "units",
  "data_point_period_seconds", ...}}``; ``value`` in ``meta.units``, which is
  ``lbs_co2_per_mwh`` for the CO2 signals (1 lb/MWh = 0.45359237 g/kWh).
- ``GET /v3/signal-index`` answers the same shape with ``units`` ``percentile``: where the
  current rate stands among the coming day's (0-100), not an intensity. The parser refuses
  it (GridParseError naming the units), so it never lands in a gCO2e/kWh column.

``co2_moer`` is a *marginal* rate (the emissions of the plant that answers one more kWh);
``co2_aoer`` (``grid.watttime_signal``) the average one, what carbon accounting usually
uses where a plan includes it (docs/analytics.md). Without a subscription, WattTime
answers ``/v3/historical`` for the region ``CAISO_NORTH`` only.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import requests

from collector.grid import (
    GridParseError,
    Parsed,
    Reading,
    TransportError,
    decode,
    each,
    field_of,
    get_json,
    intensity,
    show,
    utc_time,
)

NAME = "watttime"

#: gCO2e/kWh per unit of ``meta.units``.
UNITS = {"lbs_co2_per_mwh": 0.45359237, "g_co2_per_kwh": 1.0, "kg_co2_per_mwh": 1.0}
TOKEN_LIFE_S = 25 * 60  # tokens last 30 minutes; log in again before


def parse_login(doc) -> str:
    """The token of ``/login``'s answer."""
    token = field_of(doc, "token", "login")
    if not isinstance(token, str) or not token.strip():
        raise GridParseError("login: the token is not a non-empty string")  # never quoted
    return token.strip()


def parse_data(doc) -> Parsed:
    """The answer of ``/v3/historical`` (or ``/v3/forecast``'s ``data``) in gCO2e/kWh;
    units other than :data:`UNITS` (e.g. ``percentile`` of ``/v3/signal-index``) are
    refused as a whole, a bad point costs that point."""
    meta = field_of(doc, "meta", "watttime")
    units = field_of(meta, "units", "watttime.meta")
    scale = UNITS.get(units) if isinstance(units, str) else None
    if scale is None:
        raise GridParseError(f"watttime.meta: units {show(units)} are no emissions rate "
                             f"(known: {', '.join(UNITS)})")

    def point(item, where: str) -> Reading:
        return Reading(utc_time(field_of(item, "point_time", where), where),
                       intensity(field_of(item, "value", where), where, scale=scale))

    return each(field_of(doc, "data", "watttime"), "watttime.data", point)


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S+00:00")


class WattTime:
    """Logs in with ``username``/``password`` and asks ``/v3/historical`` for the last
    ``lookback_h`` hours of ``signal`` in ``zone``."""

    name = NAME

    def __init__(self, *, url: str, username: str, password: str, zone: str, signal: str,
                 lookback_h: float, timeout_s: float, clock=time.monotonic):
        if not zone:
            raise ValueError("watttime: no region (set grid.watttime_region)")
        if not username or not password:
            raise ValueError("watttime: no user name or password (grid.watttime_username, "
                             "GPULENS_GRID_WATTTIME_PASSWORD)")
        self.zone, self._url, self._timeout = zone, url.rstrip("/"), timeout_s
        self._auth = (username, password)
        self._signal, self._lookback = signal, timedelta(hours=lookback_h)
        self._clock = clock
        self._token: tuple[str, float] | None = None  # (token, when it was issued)
        self._lock = threading.Lock()

    def _login(self, http: requests.Session) -> str:
        try:
            resp = http.get(self._url + "/login", auth=self._auth, timeout=self._timeout)
        except requests.RequestException as exc:
            raise TransportError(f"GET /login: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise TransportError(f"GET /login: HTTP {resp.status_code}")
        token = parse_login(decode(resp.content, "/login"))
        self._token = (token, self._clock())
        return token

    def _bearer(self, http: requests.Session) -> str:
        with self._lock:
            if self._token is None or self._clock() - self._token[1] > TOKEN_LIFE_S:
                return self._login(http)
            return self._token[0]

    def fetch(self, http: requests.Session, now: datetime) -> Parsed:
        path = "/v3/historical"
        params = {"region": self.zone, "signal_type": self._signal,
                  "start": _iso(now - self._lookback), "end": _iso(now)}
        for attempt in (1, 2):
            headers = {"Authorization": f"Bearer {self._bearer(http)}"}
            try:
                doc = get_json(http, self._url + path, path, timeout_s=self._timeout,
                               params=params, headers=headers)
            except TransportError as exc:
                if attempt == 1 and str(exc).endswith("HTTP 401"):
                    with self._lock:
                        self._token = None  # expired early: log in once more
                    continue
                raise
            return parse_data(doc)
        raise AssertionError("unreachable")  # pragma: no cover

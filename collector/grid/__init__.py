"""Grid carbon intensity from outside providers (issue 21): what every provider shares.

A provider (one module each: :mod:`collector.grid.electricitymaps`,
:mod:`collector.grid.watttime`, :mod:`collector.grid.ukgrid`) has a ``name``, a
``zone`` (its own name for the grid region it asks about) and ``fetch(http, now)``,
which asks the service over HTTP and hands the answer to its pure parser. Parsers raise
only :class:`GridParseError`, naming the input they refuse; one bad reading inside a
good answer costs that reading (listed in :attr:`Parsed.rejected`), never the answer.
:mod:`collector.grid.source` runs the configured providers on a schedule.

Every reading is the intensity of the period starting at ``ts`` (naive UTC), in gCO2e
per kWh, between 0 and :data:`MAX_G_PER_KWH`. The static annual table shipped in
``warehouse/data/grid_intensity_defaults.csv`` is no provider here: it applies at query
time where no reading does (warehouse/carbon.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import requests

__all__ = ["MAX_G_PER_KWH", "GridParseError", "Parsed", "Provider", "Reading",
           "TransportError", "decode", "each", "field_of", "get_json", "intensity", "show",
           "utc_time"]

#: Above this (gCO2e/kWh) a reading is a unit mix-up: lignite, the dirtiest common source,
#: is ~1,100 lifecycle; WattTime's marginal rates stay below ~2,000 lbs/MWh (~900 g/kWh).
MAX_G_PER_KWH = 3000.0
_EARLIEST = datetime(2000, 1, 1)
_LATEST = datetime(2100, 1, 1)
_SHOWN = 80  # characters of a refused input quoted in an error


class GridParseError(ValueError):
    """A provider's answer (or one reading of it) is not what its documentation says;
    the message quotes the refused input."""


class TransportError(RuntimeError):
    """The provider could not be asked (timeout, refused, HTTP error); the message names
    the path and status only, never a token or password."""


@dataclass(frozen=True)
class Reading:
    ts: datetime  # start of the period the intensity stands for, naive UTC
    g_co2_per_kwh: float  # gCO2e per kWh


@dataclass
class Parsed:
    """What a parser made of one answer: the readings, and why each refused one was."""

    readings: list[Reading] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


class Provider(Protocol):
    name: str  # the source name stored with each reading
    zone: str  # the provider's own region name

    def fetch(self, http: requests.Session, now: datetime) -> Parsed: ...


def show(value) -> str:
    """A short quote of ``value`` for an error message."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)[:10_000]
    except (ValueError, RecursionError):
        text = repr(value)[:10_000]
    return repr(text[:_SHOWN] + ("..." if len(text) > _SHOWN else ""))


def utc_time(raw, where: str) -> datetime:
    """An ISO 8601 time with its zone (``2018-01-20T12:00Z``, ``...+00:00``) as naive UTC.
    A time without a zone is refused: it could be any zone."""
    if not isinstance(raw, str):
        raise GridParseError(f"{where}: time {show(raw)} is not a string")
    try:
        ts = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise GridParseError(f"{where}: time {show(raw)} is not ISO 8601") from None
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise GridParseError(f"{where}: time {show(raw)} has no time zone")
    try:
        naive = ts.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise GridParseError(f"{where}: time {show(raw)} is out of range") from None
    if not _EARLIEST <= naive < _LATEST:
        raise GridParseError(f"{where}: time {show(raw)} is not from 2000 to 2099")
    return naive


def intensity(raw, where: str, *, scale: float = 1.0) -> float:
    """A number of gCO2e/kWh (``raw`` x ``scale``), finite and 0 to MAX_G_PER_KWH."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise GridParseError(f"{where}: intensity {show(raw)} is not a number")
    try:
        value = float(raw) * scale
    except OverflowError:
        raise GridParseError(f"{where}: intensity {show(raw)} is out of range") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_G_PER_KWH:
        raise GridParseError(f"{where}: intensity {show(raw)} x {scale:g} is not 0-"
                             f"{MAX_G_PER_KWH:.0f} gCO2e/kWh")
    return value


def each(items, where: str, parse_one) -> Parsed:
    """``parse_one(item, where_i)`` for every item of the list ``items``; an item it
    refuses costs that item only."""
    if not isinstance(items, list):
        raise GridParseError(f"{where}: {show(items)} is not a list")
    out = Parsed()
    for i, item in enumerate(items):
        try:
            out.readings.append(parse_one(item, f"{where}[{i}]"))
        except GridParseError as exc:
            out.rejected.append(str(exc))
    return out


def field_of(doc, key: str, where: str):
    """``doc[key]`` of a JSON object, or GridParseError naming the document."""
    if not isinstance(doc, dict):
        raise GridParseError(f"{where}: {show(doc)} is not a JSON object")
    if key not in doc:
        raise GridParseError(f"{where}: no {key!r} in {show(doc)}")
    return doc[key]


def decode(body: bytes, where: str):
    """The JSON of an answer's body."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise GridParseError(f"{where}: not JSON: {show(body[:200].decode('utf-8', 'replace'))}"
                             ) from None


def get_json(http: requests.Session, url: str, path: str, *, timeout_s: float, **kwargs):
    """GET ``url`` and decode its JSON. TransportError names ``path`` and the status only
    (the URL's query and the headers may hold credentials)."""
    try:
        resp = http.get(url, timeout=timeout_s, **kwargs)
    except requests.RequestException as exc:
        raise TransportError(f"GET {path}: {type(exc).__name__}") from None
    if resp.status_code != 200:
        raise TransportError(f"GET {path}: HTTP {resp.status_code}")
    return decode(resp.content, path)

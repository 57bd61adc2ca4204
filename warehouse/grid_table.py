"""The static annual grid-intensity table (issue 21): the figure carbon accounting falls
back on where no reading covers a time. It ships as two files of ``warehouse/data/``, one
licence each: ``grid_intensity_defaults.csv`` (countries and WORLD; Ember via Our World in
Data, CC BY 4.0) and ``grid_intensity_zones.csv`` (sub-national Electricity Maps zones,
ODbL 1.0); :func:`shipped_table` reads both as one table, the zones after the countries.

The file is CSV with ``#`` comment lines and the columns ``region, g_co2_per_kwh, year``
and, optionally, ``source, licence``. ``region`` is an ISO 3166-1 alpha-2 code, ``WORLD``
or a zone id made of a country code and ``-`` parts (Electricity Maps' ``US-CAL-CISO``,
``CA-QC``); it is matched without regard to case. ``g_co2_per_kwh`` is gCO2e per kWh,
finite and 0 to :data:`MAX_G_PER_KWH`; ``year`` is the year the figure stands for.
Where a region has several rows the last one applies, so a row an operator appends
overrides the shipped one. The table is read as outside input: a row that breaks these
rules costs that row (listed in :attr:`GridTable.rejected`, with its line number and
why), never the table; only a header without the three columns refuses the file
(:class:`GridTableError`). tools/grid_intensity_table.py regenerates the shipped files
from their sources, named in their headers.

:func:`lookup` finds a region's row, else the row of its parent zone (``US-CAL-XYZ`` ->
``US-CAL`` -> ``US``), so a site configured with a sub-national zone the table lacks
gets its country's figure, and the source label names the row that applied.
"""

from __future__ import annotations

import csv
import logging
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

from warehouse.db import shipped

__all__ = ["FILES", "MAX_G_PER_KWH", "GridTable", "GridTableError", "Row", "lookup", "parse",
           "shipped_table"]

log = logging.getLogger(__name__)

#: Above this (gCO2e/kWh) a figure is a unit mix-up: the same bound the providers'
#: parsers apply (collector.grid.MAX_G_PER_KWH; lignite is ~1,100 lifecycle).
MAX_G_PER_KWH = 3000.0
FILE = "grid_intensity_defaults.csv"
#: The shipped files, read in this order (a later row of a region overrides).
FILES = (FILE, "grid_intensity_zones.csv")
_REGION = re.compile(r"^(?:WORLD|[A-Z]{2}(?:-[A-Z0-9]{1,12}){0,3})$")
_REQUIRED = ("region", "g_co2_per_kwh", "year")
_YEARS = (1990, 2100)
_SHOWN = 80  # characters of a refused line quoted in its reason
_LINE_END = re.compile(r"\r\n|\r|\n")  # only these end a line (not \f, \x1c, ...)


class GridTableError(ValueError):
    """The table cannot be read at all (no header naming region, g_co2_per_kwh, year);
    the message names the input."""


@dataclass(frozen=True)
class Row:
    region: str  # upper case
    g_co2_per_kwh: float  # gCO2e per kWh
    year: int
    source: str = ""
    licence: str = ""

    @property
    def label(self) -> str:
        """How a carbon figure names this row: ``table:<REGION> <year>``."""
        return f"table:{self.region} {self.year}"


@dataclass
class GridTable:
    rows: dict[str, Row] = field(default_factory=dict)  # by region, upper case
    rejected: list[str] = field(default_factory=list)  # "line N: why: <line>"


def _row(rec: dict) -> Row:
    region = (rec.get("region") or "").strip().upper()
    if not _REGION.match(region):
        raise ValueError(f"region {region!r} is not WORLD, a country code or a zone id")
    try:
        g = float((rec.get("g_co2_per_kwh") or "").strip())
    except ValueError:
        raise ValueError("g_co2_per_kwh is not a number") from None
    if not math.isfinite(g) or not 0 <= g <= MAX_G_PER_KWH:
        raise ValueError(f"g_co2_per_kwh {g!r} is not 0 to {MAX_G_PER_KWH:.0f}")
    year_text = (rec.get("year") or "").strip()
    if not year_text.isdigit() or not _YEARS[0] <= int(year_text) <= _YEARS[1]:
        raise ValueError(f"year {year_text!r} is not {_YEARS[0]} to {_YEARS[1]}")
    return Row(region, g, int(year_text), (rec.get("source") or "").strip(),
               (rec.get("licence") or "").strip())


def parse(text: str, name: str = FILE, table: GridTable | None = None) -> GridTable:
    """The table in ``text`` (``name`` says where it came from, for messages), its rows
    added to ``table`` when one is given (overriding its rows of the same regions)."""
    lines = [(n, ln) for n, ln in enumerate(_LINE_END.split(text), 1)
             if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise GridTableError(f"{name}: no header line")
    header_no, header = lines[0]
    columns = [c.strip().lower() for c in next(csv.reader([header]))]
    if any(c not in columns for c in _REQUIRED):
        raise GridTableError(f"{name} line {header_no}: the header {header[:_SHOWN]!r} "
                             f"lacks one of {', '.join(_REQUIRED)}")
    table = GridTable() if table is None else table
    for n, line in lines[1:]:
        try:
            cells = next(csv.reader([line]))
            if len(cells) > len(columns):
                raise ValueError(f"{len(cells)} fields, the header has {len(columns)}")
            row = _row(dict(zip(columns, cells, strict=False)))
        except (ValueError, csv.Error) as exc:
            table.rejected.append(f"{name} line {n}: {exc}: {line[:_SHOWN]!r}")
            continue
        table.rows[row.region] = row
    return table


@lru_cache(maxsize=1)
def shipped_table() -> GridTable:
    """The tables shipped in the package (:data:`FILES`) as one, read once; their
    refused rows are logged."""
    table = GridTable()
    for name in FILES:
        parse(shipped(name), name, table)
    for reason in table.rejected:
        log.warning("grid-intensity table: row ignored: %s", reason)
    return table


def lookup(table: GridTable, region: str) -> Row | None:
    """The row of ``region`` (any case), else of its nearest parent zone, else None."""
    key = (region or "").strip().upper()
    while key:
        if key in table.rows:
            return table.rows[key]
        key = key.rpartition("-")[0]
    return None

"""Pure number and time formatting shared by pages and the weekly report.

Every function takes a number or None (NaN counts as None) and returns display text;
missing values become an em dash so a card never shows "nan".
"""

from __future__ import annotations

import html
import math
from datetime import datetime

from warehouse.queries.fleet import STALE_AFTER_S

DASH = "—"


def missing(value) -> bool:
    """True for None, NaN and pandas' NaT / NA."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    try:
        return bool(value != value)  # NaT, NA and numpy NaN are not equal to themselves
    except (TypeError, ValueError):
        return False


def esc(value) -> str:
    """Any value as HTML-safe text (``"a<b"`` -> ``"a&lt;b"``); missing -> em dash."""
    return DASH if missing(value) else html.escape(str(value))


def fmt_num(value, digits: int = 0, unit: str = "") -> str:
    """``1234.5, 1, "kWh"`` -> ``"1,234.5 kWh"``; missing -> em dash."""
    if missing(value):
        return DASH
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}" if unit else text


def fmt_hours(value) -> str:
    """Hours in the most readable unit: ``0.08`` -> ``"4.9 min"``, ``26`` -> ``"26.0 h"``."""
    if missing(value):
        return DASH
    if value == float("inf"):
        return "no failure expected"
    return f"{value * 60:,.1f} min" if value < 1 else f"{value:,.1f} h"


def fmt_int(value) -> str:
    """``1234`` -> ``"1,234"``."""
    return DASH if missing(value) else f"{int(value):,}"


def fmt_pct(value, digits: int = 1) -> str:
    """A percentage 0-100 -> ``"72.4 %"``."""
    return DASH if missing(value) else f"{value:.{digits}f} %"


def fmt_kw(value) -> str:
    """Kilowatts -> ``"12.3 kW"`` (three significant digits below 10 kW)."""
    if missing(value):
        return DASH
    return f"{value:,.2f} kW" if abs(value) < 10 else f"{value:,.1f} kW"


def fmt_gpu_hours(value) -> str:
    """GPU-hours -> ``"39.3 GPU·h"`` (whole numbers from 100 up: ``"1,234 GPU·h"``)."""
    if missing(value):
        return DASH
    return f"{value:,.1f} GPU·h" if abs(value) < 100 else f"{value:,.0f} GPU·h"


def fmt_temp(value) -> str:
    """Degrees Celsius -> ``"71 °C"``."""
    return DASH if missing(value) else f"{value:.0f} °C"


def fmt_span(seconds: float) -> str:
    """A duration in seconds in words: ``120`` -> ``"2 minutes"``, ``45`` -> ``"45 s"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} minutes"
    return f"{minutes / 60:.1f} hours"


def fmt_time(ts: datetime | None) -> str:
    """A naive UTC timestamp -> ``"12:00:05 UTC"``."""
    return DASH if ts is None else f"{ts:%H:%M:%S} UTC"


def headline_texts(h: dict) -> dict[str, tuple[str, str]]:
    """Card key -> (big value, note) for :func:`warehouse.queries.overview.headline`'s dict.

    Notes say why a value is missing (no telemetry, no topology) rather than show zero.
    """
    stale = fmt_span(h.get("stale_after_s") or STALE_AFTER_S)
    gpus, reporting, allocated = h["gpus"], h["gpus_reporting"], h["allocated_gpus"]
    no_samples = f"No telemetry yet: no GPU has reported in the last {stale}"
    if gpus:
        gpus_note = f"{fmt_int(reporting)} reporting in the last {stale}"
        alloc_note = f"{fmt_int(allocated)} of {fmt_int(gpus)} GPUs in running jobs"
    else:
        gpus_note = "No topology yet: load an inventory or Slurm's topology.conf"
        alloc_note = "No GPUs in the topology to allocate"
    if missing(h["mean_util_allocated_pct"]):
        util_note = no_samples if not reporting else "No allocated GPU has a fresh sample"
    else:
        util_note = "Mean over allocated GPUs' latest samples"
    power_note = f"Sum of {fmt_int(reporting)} GPUs' latest samples" if reporting else no_samples
    week = h.get("week_start")
    since = f"since {week:%a %d %b} 00:00 UTC" if week else "this week"
    runs = h.get("failed_runs_week", 0)
    lost_note = f"Across {fmt_int(runs)} failed run{'s' if runs != 1 else ''} {since}"
    return {
        "gpus": (fmt_int(gpus), gpus_note),
        "allocated": (fmt_pct(h["allocated_share_pct"]), alloc_note),
        "util": (fmt_pct(h["mean_util_allocated_pct"]), util_note),
        "power": (fmt_kw(h["power_kw"]), power_note),
        "lost": (fmt_gpu_hours(h["gpu_hours_lost_week"]), lost_note),
        "alerts": (DASH, "Alerting arrives in a later release"),
    }

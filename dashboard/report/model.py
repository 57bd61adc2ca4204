"""The weekly report as data: headline figures of a week beside the previous week's.

    report = build(wh.reader, week="2026-W47", now=now, options=ReportOptions(...))

:func:`build` asks :func:`warehouse.queries.weekly.week_numbers` for both weeks and turns
them into :class:`Report`: per section, rows of (label, this week, previous week, change)
and the small tables the template shows. Nothing here touches a database directly or
renders HTML; the summary sentences come from :mod:`dashboard.report.summary`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from dashboard.formatting import DASH, fmt_gpu_hours, fmt_int, fmt_pct, fmt_temp, missing
from warehouse.analytics import Options
from warehouse.queries import weekly


@dataclass(frozen=True)
class ReportOptions:
    """What shapes a report besides the data (gpulens/settings/reports.py)."""

    timezone: str = "UTC"  # weeks run Monday 00:00 to Monday 00:00 here
    large_job_gpus: int = 64  # "large jobs" for ETTR: at least this many GPUs
    top: int = 5  # rows of the top-N tables
    dashboard_url: str = "http://127.0.0.1:8050/"
    analytics: Options = field(default_factory=Options)


def fmt_num(value, digits: int = 0, unit: str = "") -> str:
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


@dataclass(frozen=True)
class Kpi:
    section: str
    key: str
    label: str
    fmt: Callable[[Any], str]
    better: int = 0  # +1: higher is better, -1: lower is better, 0: neither
    points: bool = False  # a percentage: its change is shown in points


KPIS = (
    Kpi("fleet", "gpus", "GPUs installed", fmt_int),
    Kpi("fleet", "allocated_share_pct", "GPU-hours allocated to jobs", fmt_pct, +1, True),
    Kpi("fleet", "util_of_allocated_pct", "Utilisation of allocated GPUs", fmt_pct, +1, True),
    Kpi("fleet", "idle_allocated_gpu_h", "Allocated but idle", fmt_gpu_hours, -1),
    Kpi("fleet", "coverage_pct", "Telemetry coverage of the week", fmt_pct, 0, True),
    Kpi("reliability", "failures", "Failed runs", fmt_int, -1),
    Kpi("reliability", "infra_failures", "Infrastructure failures", fmt_int, -1),
    Kpi("reliability", "gpu_hours_lost", "GPU-hours lost to failures and restarts",
        fmt_gpu_hours, -1),
    Kpi("reliability", "restarts", "Requeued runs", fmt_int),
    Kpi("reliability", "r_f_per_1000_node_days", "Failure rate (per 1,000 node-days)",
        lambda v: fmt_num(v, 2), -1),
    Kpi("reliability", "mttf_1024_h", "MTTF of a 1,024-GPU job", fmt_hours, +1),
    Kpi("reliability", "mttf_4096_h", "MTTF of a 4,096-GPU job", fmt_hours, +1),
    Kpi("reliability", "large_ettr", "ETTR of large jobs (GPU-weighted)",
        lambda v: fmt_num(v, 2), +1),
    Kpi("reliability", "lemons", "Lemon-node candidates", fmt_int, -1),
    Kpi("thermal", "alerts_fired", "Thermal alerts fired", fmt_int, -1),
    Kpi("thermal", "critical_alerts", "Critical alerts", fmt_int, -1),
    Kpi("thermal", "throttled_gpu_h", "Thermally throttled", fmt_gpu_hours, -1),
    Kpi("thermal", "max_temp_c", "Hottest GPU", fmt_temp, -1),
    Kpi("energy", "it_kwh", "IT energy", lambda v: fmt_num(v, 0, "kWh"), -1),
    Kpi("energy", "facility_kwh", "Facility energy (IT x PUE)", lambda v: fmt_num(v, 0, "kWh"),
        -1),
    Kpi("energy", "tco2e", "Emissions", lambda v: fmt_num(v, 2, "t CO₂e"), -1),
    Kpi("energy", "idle_kwh", "GPU energy while idle", lambda v: fmt_num(v, 0, "kWh"), -1),
    Kpi("energy", "lost_kwh", "Energy of GPU-hours lost to failures",
        lambda v: fmt_num(v, 0, "kWh"), -1),
    Kpi("energy", "lost_carbon_kg", "Carbon cost of failures", lambda v: fmt_num(v, 0, "kg CO₂e"),
        -1),
)
SECTIONS = {"fleet": "Fleet", "reliability": "Reliability", "thermal": "Thermal",
            "energy": "Energy and carbon"}


def change(this, prev, *, points: bool = False, better: int = 0) -> tuple[str, str]:
    """The change from ``prev`` to ``this`` as text, and a CSS class: good, bad or flat."""
    if missing(this) or missing(prev) or this in (float("inf"),) or prev in (float("inf"),):
        return DASH, "flat"
    delta = float(this) - float(prev)
    if points:
        text = f"{delta:+.1f} pt"
    elif prev == 0:
        text = "new" if delta else "±0"
    else:
        text = f"{100 * delta / abs(prev):+.0f} %"
    if abs(delta) < 1e-9 or text in ("+0 %", "-0 %", "+0.0 pt", "-0.0 pt"):
        return ("±0" if not points else "±0.0 pt"), "flat"
    trend = "flat" if better == 0 else ("good" if delta * better > 0 else "bad")
    return text, trend


@dataclass
class Report:
    week: str
    previous: str
    start: datetime  # naive UTC
    end: datetime  # naive UTC; before the week's end while it is in progress
    generated_at: datetime
    options: ReportOptions
    this: dict  # weekly.week_numbers of the week
    prev: dict  # ... and of the previous week
    rows: dict[str, list[dict]] = field(default_factory=dict)  # section -> KPI rows
    summary: list[str] = field(default_factory=list)

    @property
    def in_progress(self) -> bool:
        return self.end < weekly.week_range(self.week, self.options.timezone)[1]

    @property
    def title(self) -> str:
        return f"gpulens weekly report {self.week}"

    @property
    def stem(self) -> str:
        return f"gpulens-report-{self.week}"

    def value(self, key: str, *, previous: bool = False):
        section, name = key.split(".", 1)
        return (self.prev if previous else self.this)[section].get(name)

    def headline(self) -> dict[str, Any]:
        """Plain numbers for the webhook and the reports table (JSON-safe)."""
        out = {}
        for k in KPIS:
            v = self.value(f"{k.section}.{k.key}")
            out[f"{k.section}.{k.key}"] = None if missing(v) or v == float("inf") else float(v)
        return out


def _coverage(nums: dict) -> None:
    f = nums["fleet"]
    installed = f["gpus"] * f["hours"]
    f["coverage_pct"] = 100 * f["reporting_gpu_h"] / installed if installed else None


def kpi_rows(this: dict, prev: dict) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {s: [] for s in SECTIONS}
    for k in KPIS:
        a, b = this[k.section].get(k.key), prev[k.section].get(k.key)
        text, trend = change(a, b, points=k.points, better=k.better)
        rows[k.section].append({"label": k.label, "this": k.fmt(a), "prev": k.fmt(b),
                                "change": text, "trend": trend})
    return rows


def compare_table(this: pd.DataFrame, prev: pd.DataFrame, key: list[str],
                  value: str) -> pd.DataFrame:
    """``this`` with a ``prev_<value>`` column from ``prev`` on ``key`` (0 where absent)."""
    if prev is None or prev.empty:
        return this.assign(**{f"prev_{value}": 0})
    p = prev[key + [value]].rename(columns={value: f"prev_{value}"})
    out = this.merge(p, on=key, how="left")
    out[f"prev_{value}"] = out[f"prev_{value}"].fillna(0)
    return out


def build(reader: Callable, *, week: str, now: datetime,
          options: ReportOptions | None = None) -> Report:
    """The report of ISO ``week`` (e.g. ``2026-W47``) as seen at ``now`` (naive UTC)."""
    from dashboard.report.summary import summarise

    options = options or ReportOptions()
    prev_week = weekly.previous_week(week)
    kw = {"now": now, "opts": options.analytics, "large_job_gpus": options.large_job_gpus,
          "top": options.top}
    s, e = weekly.week_range(week, options.timezone)
    ps, pe = weekly.week_range(prev_week, options.timezone)
    this = weekly.week_numbers(reader, start=s, end=e, **kw)
    prev = weekly.week_numbers(reader, start=ps, end=pe, **kw)
    for nums in (this, prev):
        _coverage(nums)
    report = Report(week=week, previous=prev_week, start=s, end=this["end"],
                    generated_at=now, options=options, this=this, prev=prev)
    report.rows = kpi_rows(this, prev)
    report.summary = summarise(report)
    return report

"""The weekly report as data: headline figures of a week beside the previous week's.

:class:`Report` holds both weeks' numbers (:func:`warehouse.queries.weekly.week_numbers`)
and, per section, rows of (label, this week, previous week, change) from :data:`KPIS`.
:func:`dashboard.report.build.build` fills it; :mod:`dashboard.report.summary` reads it.
Nothing here touches a database or renders HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from dashboard.formatting import (
    DASH,
    fmt_gpu_hours,
    fmt_hours,
    fmt_int,
    fmt_num,
    fmt_pct,
    fmt_temp,
    missing,
)
from gpulens.settings import setting_field
from warehouse.analytics import Options
from warehouse.queries import weekly


@dataclass(frozen=True)
class ReportOptions:
    """What shapes a report besides the data (gpulens/settings/reports.py)."""

    timezone: str = setting_field("reports.timezone")  # weeks run Monday to Monday here
    large_job_gpus: int = setting_field("reports.large_job_gpus")  # ETTR's large jobs
    top: int = setting_field("reports.top")  # rows of the top-N tables
    dashboard_url: str = setting_field("alerts.dashboard_url")
    cluster: str = setting_field("cluster.name")  # named in the title (issue 18)
    analytics: Options = field(default_factory=Options)


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
    Kpi("fleet", "placement_score", "Placement score of multi-node jobs",
        lambda v: fmt_num(v, 2), +1),
    Kpi("fleet", "misplaced_gpu_h", "Spread over more racks or zones than needed",
        fmt_gpu_hours, -1),
    Kpi("fleet", "stranded_gpus", "Stranded GPUs (hourly mean)", lambda v: fmt_num(v, 0), -1),
    Kpi("reliability", "failures", "Failed runs", fmt_int, -1),
    Kpi("reliability", "infra_failures", "Infrastructure failures", fmt_int, -1),
    Kpi("reliability", "gpu_hours_lost", "GPU-hours lost to failures and restarts",
        fmt_gpu_hours, -1),
    Kpi("reliability", "slow_gpu_hours_lost", "GPU-hours lost to slow members (stragglers)",
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
    Kpi("energy", "g_per_productive_gpu_h", "Carbon per productive GPU-hour",
        lambda v: fmt_num(v, 0, "g CO₂e"), -1),
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
    comparable: bool = True  # the previous week's coverage allows a comparison

    @property
    def in_progress(self) -> bool:
        return self.end < weekly.week_range(self.week, self.options.timezone)[1]

    @property
    def title(self) -> str:
        return f"gpulens weekly report {self.week}, cluster {self.options.cluster}"

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


def kpi_rows(this: dict, prev: dict, *, comparable: bool = True) -> dict[str, list[dict]]:
    """Per section, the KPI rows; no change is computed against a week too thinly
    covered by telemetry to compare (``comparable`` false, weekly.comparable)."""
    rows: dict[str, list[dict]] = {s: [] for s in SECTIONS}
    for k in KPIS:
        a, b = this[k.section].get(k.key), prev[k.section].get(k.key)
        text, trend = (change(a, b, points=k.points, better=k.better) if comparable
                       else ("not compared", "flat"))
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

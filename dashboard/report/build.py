"""Build the weekly report of one ISO week: both weeks' numbers, KPI rows, summary.

    report = build(wh.reader, week="2026-W47", now=now, options=ReportOptions(...))

:func:`build` asks :func:`warehouse.queries.weekly.week_numbers` for the week and the
week before and fills a :class:`~dashboard.report.model.Report`; the summary sentences
come from :mod:`dashboard.report.summary`. (``model`` <- ``summary`` <- ``build``: the
data class knows neither of the modules that fill and read it.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from dashboard.report.model import Report, ReportOptions, kpi_rows
from dashboard.report.summary import summarise
from warehouse.queries import weekly


def build(reader: Callable, *, week: str, now: datetime,
          options: ReportOptions | None = None) -> Report:
    """The report of ISO ``week`` (e.g. ``2026-W47``) as seen at ``now`` (naive UTC)."""
    options = options or ReportOptions()
    prev_week = weekly.previous_week(week)
    kw = {"now": now, "opts": options.analytics, "large_job_gpus": options.large_job_gpus,
          "top": options.top}
    s, e = weekly.week_range(week, options.timezone)
    ps, pe = weekly.week_range(prev_week, options.timezone)
    this = weekly.week_numbers(reader, start=s, end=e, **kw)
    prev = weekly.week_numbers(reader, start=ps, end=pe, **kw)
    report = Report(week=week, previous=prev_week, start=s, end=this["end"],
                    generated_at=now, options=options, this=this, prev=prev,
                    comparable=weekly.comparable(prev))
    report.rows = kpi_rows(this, prev, comparable=report.comparable)
    report.summary = summarise(report)
    return report

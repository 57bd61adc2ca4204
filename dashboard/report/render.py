"""Render a :class:`~dashboard.report.model.Report` to a self-contained HTML file and a PDF.

- ``render_html(report)``: one HTML document with plotly.js inline once and every chart
  drawn by the dashboard's own figure builders; it opens offline. With
  ``charts=False`` it is the e-mail body: the same text and tables, no script (mail
  clients run none), pointing at the attached PDF.
- ``write_report(report, out_dir)``: writes ``gpulens-report-<week>.html`` and, with
  ``pdf=True``, ``.pdf`` (headless Chromium), and returns one row per file for the
  ``reports`` table.
Names from jobs and users reach the page as autoescaped text (Jinja2).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
import plotly.io as pio
from plotly.offline import get_plotlyjs

from dashboard.figures import energy, failures, goodput, thermal, utilization
from dashboard.formatting import fmt_gpu_hours, fmt_int, fmt_num, fmt_temp, missing
from dashboard.report.model import SECTIONS, Report, compare_table
from dashboard.report.pdf import html_to_pdf
from gpulens.settings import default

HERE = Path(__file__).resolve().parent
WIDTH_PX = 700  # fits an A4 page with 15 mm margins
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True,
                          undefined=jinja2.StrictUndefined)

Col = tuple[str, str, Callable]  # column, header, formatter


def _text(v) -> str:
    return "—" if missing(v) else str(v)


def _list(v) -> str:
    if not isinstance(v, (list, tuple, np.ndarray)):
        return "—"
    return ", ".join(str(x) for x in list(v)[:6]) or "—"


def table(df: pd.DataFrame | None, cols: Sequence[Col], empty: str) -> dict:
    """A frame as display rows for the template: headers, rows of text, an empty note."""
    rows = [] if df is None else [[fmt(r[c]) for c, _, fmt in cols]
                                  for _, r in df.iterrows()]
    return {"headers": [h for _, h, _ in cols], "rows": rows, "empty": empty}


def _kwh(v) -> str:
    return fmt_num(v, 0, "kWh")


def _kg(v) -> str:
    return fmt_num(v, 0, "kg")


def tables(r: Report) -> dict[str, list[tuple[str, dict]]]:
    x, px = r.this["reliability"], r.prev["reliability"]
    t, e = r.this["thermal"], r.this["energy"]
    cats = compare_table(x["by_category"], px["by_category"], ["category"], "failures")
    racks = compare_table(x["by_rack"], px["by_rack"], ["rack"], "failures")
    nodes = x["nodes"].assign(lemon_text=x["nodes"]["lemon"].map({True: "lemon",
                                                                   False: ""}))
    hot = t["hottest_racks"]
    return {
        "fleet": [],
        "reliability": [
            ("Failures by category", table(cats, [
                ("category", "Category", _text), ("failures", "Runs", fmt_int),
                ("prev_failures", "Last week", fmt_int),
                ("gpu_hours_lost", "GPU-hours lost", fmt_gpu_hours)],
                "No failed runs this week.")),
            ("Reasons with the most GPU-hours lost", table(x["by_reason"].head(r.options.top), [
                ("reason", "Reason", _text), ("category", "Category", _text),
                ("failures", "Runs", fmt_int), ("gpu_hours_lost", "GPU-hours lost",
                                                fmt_gpu_hours)],
                "No failed runs this week.")),
            ("Racks with the most GPU-hours lost", table(racks, [
                ("rack", "Rack", _text), ("failures", "Failed runs", fmt_int),
                ("prev_failures", "Last week", fmt_int),
                ("gpu_hours_lost", "GPU-hours lost", fmt_gpu_hours)],
                "No failure was attributed to a rack.")),
            ("Nodes with infrastructure failures (lemon candidates first)", table(nodes, [
                ("node", "Node", _text), ("rack", "Rack", _text),
                ("infra_failures", "Infra failures", fmt_int),
                ("expected_failures", "Expected", lambda v: fmt_num(v, 1)),
                ("p_value", "p", lambda v: "—" if missing(v) else f"{v:.2g}"),
                ("xid_codes", "XIDs", _list), ("reasons", "Reasons", _list),
                ("lemon_text", "", _text)],
                "No infrastructure failure was attributed to a node.")),
        ],
        "thermal": [
            ("Alerts fired by rule", table(t["alerts"], [
                ("rule", "Rule", _text), ("severity", "Severity", _text),
                ("alerts", "Alerts", fmt_int), ("racks", "Racks", fmt_int)],
                "No thermal alert fired this week.")),
            ("Hottest racks (GPU temperature, hourly maxima)", table(hot, [
                ("rack", "Rack", _text), ("p50_c", "Median", fmt_temp),
                ("p95_c", "95th pct", fmt_temp), ("max_c", "Peak", fmt_temp)],
                "No temperature samples this week.")),
        ],
        "energy": [
            ("Users with the most energy", table(e["top_users"], [
                ("user_name", "User", _text), ("gpu_hours", "GPU-hours", fmt_gpu_hours),
                ("facility_kwh", "Facility energy", _kwh), ("carbon_kg", "CO₂e", _kg)],
                "No job energy this week.")),
            ("Jobs with the most energy", table(e["top_jobs"], [
                ("job_id", "Job", _text), ("name", "Name", _text),
                ("user_name", "User", _text), ("gpus", "GPUs", fmt_int),
                ("facility_kwh", "Facility energy", _kwh), ("carbon_kg", "CO₂e", _kg)],
                "No job energy this week.")),
            ("Carbon per productive GPU-hour, by user (failures, restarts and idle GPUs "
             "included)", table(e["goodput_carbon_users"], [
                ("user_name", "User", _text),
                ("g_per_productive_gpu_h", "Per productive GPU-hour",
                 lambda v: fmt_num(v, 0, "g CO₂e")),
                ("productive_gpu_hours", "Productive", fmt_gpu_hours),
                ("gpu_hours_lost", "Lost to failures", fmt_gpu_hours),
                ("carbon_kg", "CO₂e", _kg)],
                "No job used a GPU this week.")),
        ],
    }


def figures(r: Report) -> dict[str, list]:
    """The charts of each section, drawn by the dashboard pages' own builders."""
    x, t, e = r.this["reliability"], r.this["thermal"], r.this["energy"]
    hot = t["rack_temps"].sort_values("p95_c", ascending=False).head(16).sort_values("rack")
    return {
        "fleet": [utilization.utilisation_over_time(r.this["over_time"])],
        "reliability": [goodput.lost_over_time(x["lost_days"]),
                        failures.failure_reasons(x["reasons_frame"], top=8)],
        "thermal": [thermal.rack_temperature_boxes(hot)],
        "energy": [energy.energy_over_time(e["by_day"], x="day")],
    }


def _chart_html(fig) -> str:
    fig.update_layout(width=WIDTH_PX, uirevision=None)
    return pio.to_html(fig, full_html=False, include_plotlyjs=False,
                       config={"staticPlot": True, "displayModeBar": False})


def render_html(r: Report, *, charts: bool = True) -> str:
    """The report as one HTML document (see module docstring)."""
    figs = figures(r) if charts else {s: [] for s in SECTIONS}
    sections = [{"id": s, "title": title, "rows": r.rows[s],
                 "charts": [_chart_html(f) for f in figs[s]], "tables": tables(r)[s]}
                for s, title in SECTIONS.items()]
    return _ENV.get_template("template.html").render(
        r=r, sections=sections, charts=charts,
        plotlyjs=get_plotlyjs() if charts else "",
        link=r.options.dashboard_url.rstrip("/") + "/reports",
    )


def _write(path: Path, data: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)


def write_report(r: Report, out_dir: str | os.PathLike, *, pdf: bool = True,
                 chromium: str = default("reports.chromium"),
                 pdf_timeout_s: float = default("reports.pdf_timeout_s")) -> list[dict]:
    """Write the HTML (and PDF) into ``out_dir``; one dict per file for the reports table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / f"{r.stem}.html"
    _write(html_path, render_html(r))
    paths = [("html", html_path)]
    if pdf:
        paths.append(("pdf", html_to_pdf(html_path, out / f"{r.stem}.pdf", chromium=chromium,
                                         timeout_s=pdf_timeout_s)))
    return [{"week": r.week, "week_start": r.start, "week_end": r.end,
             "generated_at": r.generated_at, "title": r.title,
             "path": str(p.resolve()), "format": fmt, "size_bytes": p.stat().st_size}
            for fmt, p in paths]

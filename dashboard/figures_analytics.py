"""Pure figure builders of the Failures, Goodput and Energy pages (and the weekly report).

Inputs are the frames of the analytics queries (``warehouse.queries.failures``,
``goodput``, ``energy``); heat maps use Cividis (colour-blind safe), categories the
Okabe-Ito palette, every axis its unit.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts import GRID, TIME_AXIS, _layout, lines
from dashboard.figures import CIVIDIS, PALETTE, empty_figure

CATEGORIES = ("infrastructure", "framework", "script", "scheduler", "unknown")
CATEGORY_COLOURS = dict(zip(CATEGORIES, (PALETTE[5], PALETTE[1], PALETTE[0], PALETTE[3],
                                         "#9aa5b1"), strict=True))


def _heatmap(pivot: pd.DataFrame, *, x_title: str, y_title: str, z_title: str,
             uirevision: str) -> go.Figure:
    fig = go.Figure(go.Heatmap(
        z=pivot.values, x=list(pivot.columns), y=[html.escape(str(i)) for i in pivot.index],
        colorscale=CIVIDIS, xgap=2, ygap=2, zmin=0,
        colorbar={"title": {"text": z_title, "side": "right"}, "thickness": 12},
        hovertemplate="%{y} · %{x}: %{z}<extra></extra>",
    ))
    fig.update_layout(**_layout(max(240, 90 + 28 * len(pivot)), hovermode="closest",
                                uirevision=uirevision),
                      xaxis={"title": {"text": x_title}, "type": "category"},
                      yaxis={"title": {"text": y_title}, "type": "category",
                             "automargin": True})
    return fig


def failures_heatmap(df: pd.DataFrame | None, *, rows: str, period: str) -> go.Figure:
    """Failed runs per ``rows`` (rack or category) x ``period`` ("D" day or "W" week)."""
    label = {"D": "Day (UTC)", "W": "ISO week (UTC)"}[period]
    if df is None or len(df) == 0:
        return empty_figure("No classified failures in this range.")
    # Periods as labels on a category axis: a date axis with one or two columns shows
    # sub-second ticks. ISO dates and "2026-W47" labels sort in time order.
    fmt = {"D": "%Y-%m-%d", "W": "%G-W%V"}[period]
    days = pd.to_datetime(df["end_ts"]).dt.floor("D")  # formatted once per distinct day
    labels = {day: day.strftime(fmt) for day in days.unique()}
    d = df.assign(period=days.map(labels), row=df[rows].fillna("(unknown)"))
    pivot = d.pivot_table(index="row", columns="period", values="job_id", aggfunc="count",
                          fill_value=0).sort_index()
    return _heatmap(pivot, x_title=label, y_title=rows.title(), z_title="Failed runs",
                    uirevision=f"fail-{rows}-{period}")


def failure_reasons(df: pd.DataFrame | None, *, top: int = 12) -> go.Figure:
    """GPU-hours lost per reason, coloured by category; XIDs named in the reasons."""
    if df is None or len(df) == 0:
        return empty_figure("No classified failures in this range.")
    g = (df.groupby(["category", "reason"], dropna=False)
         .agg(failures=("job_id", "count"), lost=("gpu_hours_lost", "sum"))
         .reset_index().sort_values("lost", ascending=False).head(top).iloc[::-1])
    fig = go.Figure(go.Bar(
        y=[html.escape(str(r))[:60] for r in g["reason"]], x=g["lost"], orientation="h",
        marker_color=[CATEGORY_COLOURS.get(c, PALETTE[7]) for c in g["category"]],
        customdata=list(zip(g["category"].astype(str), g["failures"], strict=True)),
        hovertemplate="%{y}<br>%{customdata[0]} · %{customdata[1]} runs · "
                      "%{x:,.1f} GPU·h<extra></extra>",
    ))
    fig.update_layout(**_layout(max(260, 80 + 26 * len(g)), hovermode="closest",
                                uirevision="fail-reasons"),
                      xaxis={**GRID, "title": {"text": "GPU-hours lost"}},
                      yaxis={"title": {"text": "Reason"}, "automargin": True})
    return fig


def xid_counts(df: pd.DataFrame | None) -> go.Figure:
    """Failed runs per XID code seen on their GPUs."""
    if df is None or len(df) == 0 or "xids" not in df:
        return empty_figure("No failure had an XID on its GPUs in this range.", height=260)
    x = df[["job_id", "xids"]].explode("xids").dropna()
    if x.empty:
        return empty_figure("No failure had an XID on its GPUs in this range.", height=260)
    c = x.groupby("xids")["job_id"].count().sort_values()
    fig = go.Figure(go.Bar(y=[f"XID {int(k)}" for k in c.index], x=c.values,
                           orientation="h", marker_color=PALETTE[5],
                           hovertemplate="%{y}: %{x} failed runs<extra></extra>"))
    fig.update_layout(**_layout(max(220, 80 + 26 * len(c)), hovermode="closest",
                                uirevision="xids"),
                      xaxis={**GRID, "title": {"text": "Failed runs"}},
                      yaxis={"title": {"text": "XID"}, "type": "category"})
    return fig


def failure_temperatures(df: pd.DataFrame | None) -> go.Figure:
    """Hottest GPU on the failed node before each failure, by category, against the
    fleet's median (``thermal.failure_temperatures``)."""
    if df is None or len(df) == 0 or df["hottest_c"].isna().all():
        return empty_figure("No failure with a node and telemetry before it in this range.")
    fig = go.Figure()
    for cat, part in df.groupby("category"):
        fig.add_trace(go.Box(y=part["hottest_c"], name=html.escape(str(cat)),
                             boxpoints="all", jitter=0.4, pointpos=0,
                             marker_color=CATEGORY_COLOURS.get(cat, PALETTE[7])))
    median = df["fleet_median_c"].dropna()
    if len(median):
        fig.add_hline(y=float(median.iloc[0]), line={"dash": "dot", "color": "#7b8794"},
                      annotation_text="fleet median", annotation_position="top left")
    fig.update_layout(**_layout(hovermode="closest", showlegend=False, uirevision="fail-t"),
                      xaxis={"title": {"text": "Failure category"}},
                      yaxis={**GRID, "title": {"text": "Hottest GPU in the hour before (°C)"}})
    return fig


def lost_over_time(df: pd.DataFrame | None) -> go.Figure:
    """GPU-hours lost per day, stacked by failure category."""
    if df is None or len(df) == 0:
        return empty_figure("No GPU-hours lost to classified failures in this range.")
    d = df.assign(day=pd.to_datetime(df["end_ts"]).dt.floor("D"))
    pivot = d.pivot_table(index="day", columns="category", values="gpu_hours_lost",
                          aggfunc="sum", fill_value=0)
    fig = go.Figure([go.Bar(x=pivot.index, y=pivot[c], name=html.escape(str(c)),
                            marker_color=CATEGORY_COLOURS.get(c, PALETTE[7]),
                            hovertemplate="%{y:,.1f} GPU·h") for c in pivot.columns])
    fig.update_layout(**_layout(uirevision="lost"), barmode="stack", xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": "GPU-hours lost"}})
    return fig


def ettr_jobs(df: pd.DataFrame | None, *, min_gpus: int) -> go.Figure:
    """ETTR (productive / wall time) of each large job against its size."""
    if df is None or len(df) == 0:
        return empty_figure(f"No job with {min_gpus} GPUs or more ran in this range.")
    fig = go.Figure(go.Scatter(
        x=df["gpus"], y=df["ettr"], mode="markers",
        marker={"size": 10, "color": PALETTE[0], "line": {"color": "white", "width": 1}},
        text=[html.escape(str(j)) for j in df["job_id"]],
        hovertemplate="Job %{text}: ETTR %{y:.2f} on %{x} GPUs<extra></extra>",
    ))
    sizes = [2 ** k for k in range(0, 21)]  # job sizes are powers of two: tick those
    lo, hi = float(df["gpus"].min()), float(df["gpus"].max())
    ticks = [g for g in sizes if lo / 2 <= g <= hi * 2]
    fig.update_layout(**_layout(hovermode="closest", uirevision="ettr"),
                      xaxis={**GRID, "title": {"text": "GPUs"}, "type": "log",
                             "tickvals": ticks, "ticktext": [f"{g:,}" for g in ticks]},
                      yaxis={**GRID, "title": {"text": "ETTR (productive / wall time)"},
                             "range": [0, 1.05]})
    return fig


def mttf_projection(rate: dict | None) -> go.Figure:
    """Projected MTTF (hours, log scale) by job size, with the rate's interval."""
    if not rate or rate.get("failures", 0) == 0 or not np.isfinite(
            rate.get("r_f_per_1000_node_days", np.nan)):
        return empty_figure("No infrastructure failure in this range: the failure rate, "
                            "and so the MTTF, cannot be estimated yet.")
    m = rate["mttf"]
    fig = go.Figure(go.Bar(
        x=[f"{int(g):,}" for g in m["gpus"]], y=m["mttf_h"], marker_color=PALETTE[0],
        error_y={"type": "data", "symmetric": False,
                 "array": (m["mttf_h_high"] - m["mttf_h"]).clip(lower=0),
                 "arrayminus": (m["mttf_h"] - m["mttf_h_low"]).clip(lower=0)},
        hovertemplate="%{x} GPUs: MTTF %{y:,.1f} h<extra></extra>",
    ))
    fig.update_layout(**_layout(hovermode="closest", uirevision="mttf"),
                      xaxis={"title": {"text": "Job size (GPUs)"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "MTTF (hours)"}, "type": "log"})
    return fig


def ettr_curve(df: pd.DataFrame | None) -> go.Figure:
    """Expected ETTR against the checkpoint interval, the optimum marked."""
    if df is None or len(df) == 0:
        return empty_figure("Enter a job size and restart overhead.")
    fig = lines(df, "checkpoint_interval_h", [("expected_ettr", "Expected ETTR")],
                y_title="Expected ETTR", empty="", uirevision="advisor")
    best = df[df["optimal"]]
    if len(best):
        fig.add_trace(go.Scatter(x=best["checkpoint_interval_h"], y=best["expected_ettr"],
                                 mode="markers", name="Optimum",
                                 marker={"size": 12, "color": PALETTE[5]}))
    fig.update_layout(xaxis={"title": {"text": "Checkpoint interval (hours)"}, "type": "log"},
                      hovermode="closest")
    return fig


def energy_over_time(df: pd.DataFrame | None, *, x: str) -> go.Figure:
    """GPU and other IT energy (stacked kWh) and emissions (kg, right axis) over time."""
    if df is None or len(df) == 0:
        return empty_figure("No energy data in this range (the hourly energy table is "
                            "filled by the analytics job after the rollups).")
    fig = go.Figure([
        go.Bar(x=df[x], y=df["gpu_kwh"], name="GPUs", marker_color=PALETTE[0],
               hovertemplate="%{y:,.1f} kWh"),
        go.Bar(x=df[x], y=df["other_kwh"], name="Rest of the nodes", marker_color=PALETTE[4],
               hovertemplate="%{y:,.1f} kWh"),
        go.Scatter(x=df[x], y=df["carbon_kg"], name="Emissions", yaxis="y2", mode="lines",
                   line={"color": PALETTE[5], "width": 2}, hovertemplate="%{y:,.1f} kg"),
    ])
    fig.update_layout(**_layout(uirevision="energy"), barmode="stack", xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": "IT energy (kWh)"}},
                      yaxis2={"title": {"text": "Emissions (kg CO₂e)"}, "overlaying": "y",
                              "side": "right", "showgrid": False, "rangemode": "tozero"})
    return fig


def pue_and_intensity(df: pd.DataFrame | None, *, x: str) -> go.Figure:
    """PUE (facility / IT energy) and grid intensity (g CO2e / kWh) over time."""
    if df is None or len(df) == 0:
        return empty_figure("No energy data in this range.")
    d = df.assign(pue=df["facility_kwh"] / df["it_kwh"].where(df["it_kwh"] > 0),
                  g_per_kwh=1000 * df["carbon_kg"] / df["facility_kwh"].where(
                      df["facility_kwh"] > 0))
    fig = go.Figure([
        go.Scatter(x=d[x], y=d["g_per_kwh"], name="Grid intensity", mode="lines",
                   line={"color": PALETTE[2], "width": 2}, hovertemplate="%{y:,.0f} g/kWh"),
        go.Scatter(x=d[x], y=d["pue"], name="PUE", yaxis="y2", mode="lines",
                   line={"color": PALETTE[3], "width": 2, "dash": "dash"},
                   hovertemplate="%{y:.2f}"),
    ])
    fig.update_layout(**_layout(uirevision="pue"), xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": "Grid intensity (g CO₂e / kWh)"},
                             "rangemode": "tozero"},
                      yaxis2={"title": {"text": "PUE"}, "overlaying": "y", "side": "right",
                              "showgrid": False, "rangemode": "tozero"})
    return fig


def energy_by(df: pd.DataFrame | None, *, key: str, label: str, top: int = 20) -> go.Figure:
    """Facility energy (kWh) per group, emissions in the hover; largest on top."""
    if df is None or len(df) == 0:
        return empty_figure(f"No energy attributed to any {label.lower()} in this range.")
    d = df.sort_values("carbon_kg", ascending=False).head(top).iloc[::-1]
    energy = d["facility_kwh"] if "facility_kwh" in d else d["it_kwh"]
    fig = go.Figure(go.Bar(
        y=[html.escape(str(v))[:40] for v in d[key]], x=energy, orientation="h",
        marker_color=PALETTE[0], customdata=d["carbon_kg"],
        hovertemplate="%{y}: %{x:,.1f} kWh · %{customdata:,.1f} kg CO₂e<extra></extra>",
    ))
    fig.update_layout(**_layout(max(260, 80 + 24 * len(d)), hovermode="closest",
                                uirevision=f"energy-by-{key}"),
                      xaxis={**GRID, "title": {"text": "Facility energy (kWh)"}},
                      yaxis={"title": {"text": label}, "automargin": True})
    return fig


def categories_bar(df: pd.DataFrame | None, *, cat: str, value: str, x_title: str,
                   empty: str) -> go.Figure:
    """One horizontal bar per category (failure carbon by category, idle energy)."""
    if df is None or len(df) == 0:
        return empty_figure(empty, height=260)
    g = df.groupby(cat, dropna=False)[value].sum().sort_values()
    fig = go.Figure(go.Bar(y=[html.escape(str(c)).replace("_", " ") for c in g.index],
                           x=g.values, orientation="h",
                           marker_color=[CATEGORY_COLOURS.get(c, PALETTE[0]) for c in g.index],
                           hovertemplate="%{y}: %{x:,.1f}<extra></extra>"))
    fig.update_layout(**_layout(max(220, 80 + 30 * len(g)), hovermode="closest",
                                uirevision=f"cat-{value}"),
                      xaxis={**GRID, "title": {"text": x_title}},
                      yaxis={"title": {"text": ""}, "automargin": True})
    return fig

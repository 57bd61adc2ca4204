"""Figures of the Failures page (the weekly report draws ``failure_reasons``).

Inputs are the frames of :mod:`warehouse.queries.failures` (and
``thermal.failure_temperatures``); heat maps use Cividis, categories their colours.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    CATEGORY_COLOURS,
    CIVIDIS,
    GRID,
    PALETTE,
    chart_layout,
    empty_figure,
    figure,
)


def _heatmap(pivot: pd.DataFrame, *, x_title: str, y_title: str, z_title: str,
             uirevision: str) -> go.Figure:
    return figure(go.Heatmap(
        z=pivot.values, x=list(pivot.columns), y=[html.escape(str(i)) for i in pivot.index],
        colorscale=CIVIDIS, xgap=2, ygap=2, zmin=0,
        colorbar={"title": {"text": z_title, "side": "right"}, "thickness": 12},
        hovertemplate="%{y} · %{x}: %{z}<extra></extra>",
    ), layout=dict(  # given whole, not by update_layout: ~40 ms of CPU less (issue 17)
        **chart_layout(max(240, 90 + 28 * len(pivot)), hovermode="closest",
                       uirevision=uirevision, showlegend=False),
        xaxis={"title": {"text": x_title}, "type": "category"},
        yaxis={"title": {"text": y_title}, "type": "category", "automargin": True}))


def failures_heatmap(df: pd.DataFrame | None, *, rows: str, period: str) -> go.Figure:
    """Failed runs per ``rows`` (rack or category) x ``period`` ("D" day or "W" week), from
    a frame of runs per row and day (``row``, ``day``, ``failures``:
    :func:`warehouse.queries.failures.breakdowns`' ``rack_day`` or ``category_day``)."""
    label = {"D": "Day (UTC)", "W": "ISO week (UTC)"}[period]
    if df is None or len(df) == 0:
        return empty_figure("No classified failures in this range.")
    # Periods as labels on a category axis: a date axis with one or two columns shows
    # sub-second ticks. ISO dates and "2026-W47" labels sort in time order.
    fmt = {"D": "%Y-%m-%d", "W": "%G-W%V"}[period]
    days = pd.to_datetime(df["day"])
    labels = {day: day.strftime(fmt) for day in days.unique()}  # once per distinct day
    pivot = df.assign(period=days.map(labels)).pivot_table(
        index="row", columns="period", values="failures", aggfunc="sum",
        fill_value=0).sort_index()
    return _heatmap(pivot, x_title=label, y_title=rows.title(), z_title="Failed runs",
                    uirevision=f"fail-{rows}-{period}")


def failure_reasons(df: pd.DataFrame | None, *, top: int = 12) -> go.Figure:
    """GPU-hours lost per reason, coloured by category; XIDs named in the reasons. ``df``:
    failed runs and GPU-hours lost per category and reason, ordered by both
    (:func:`warehouse.queries.failures.breakdowns`' ``reasons``)."""
    if df is None or len(df) == 0:
        return empty_figure("No classified failures in this range.")
    g = (df.rename(columns={"gpu_hours_lost": "lost"}).reset_index(drop=True)
         .sort_values("lost", ascending=False).head(top).iloc[::-1])
    return figure(go.Bar(
        y=[html.escape(str(r))[:60] for r in g["reason"]], x=g["lost"], orientation="h",
        marker_color=[CATEGORY_COLOURS.get(c, PALETTE[7]) for c in g["category"]],
        customdata=list(zip(g["category"].astype(str), g["failures"], strict=True)),
        hovertemplate="%{y}<br>%{customdata[0]} · %{customdata[1]} runs · "
                      "%{x:,.1f} GPU·h<extra></extra>",
    ), layout=dict(  # given whole, not by update_layout (issue 17)
        **chart_layout(max(260, 80 + 26 * len(g)), hovermode="closest",
                       uirevision="fail-reasons"),
        xaxis={**GRID, "title": {"text": "GPU-hours lost"}},
        yaxis={"title": {"text": "Reason"}, "automargin": True}))


def xid_counts(df: pd.DataFrame | None) -> go.Figure:
    """Failed runs per XID code seen on their GPUs, from a frame of runs per code (``xid``,
    ``failures``: :func:`warehouse.queries.failures.breakdowns`' ``xids``)."""
    if df is None or len(df) == 0:
        return empty_figure("No failure had an XID on its GPUs in this range.", height=260)
    c = df.set_index("xid")["failures"].sort_values()
    return figure(go.Bar(y=[f"XID {int(k)}" for k in c.index], x=c.values,
                         orientation="h", marker_color=PALETTE[5],
                         hovertemplate="%{y}: %{x} failed runs<extra></extra>"),
                  layout=dict(  # given whole, not by update_layout (issue 17)
                      **chart_layout(max(220, 80 + 26 * len(c)), hovermode="closest",
                                     uirevision="xids"),
                      xaxis={**GRID, "title": {"text": "Failed runs"}},
                      yaxis={"title": {"text": "XID"}, "type": "category"}))


def failure_temperatures(df: pd.DataFrame | None) -> go.Figure:
    """Hottest GPU on the failed node before each failure, by category, against the
    fleet's median (``thermal.failure_temperatures``)."""
    if df is None or len(df) == 0 or df["hottest_c"].isna().all():
        return empty_figure("No failure with a node and telemetry before it in this range.")
    fig = figure()
    for cat, part in df.groupby("category"):
        fig.add_trace(go.Box(y=part["hottest_c"], name=html.escape(str(cat)),
                             boxpoints="all", jitter=0.4, pointpos=0,
                             marker_color=CATEGORY_COLOURS.get(cat, PALETTE[7])))
    median = df["fleet_median_c"].dropna()
    if len(median):
        fig.add_hline(y=float(median.iloc[0]), line={"dash": "dot", "color": "#7b8794"},
                      annotation_text="fleet median", annotation_position="top left")
    fig.update_layout(**chart_layout(hovermode="closest", showlegend=False, uirevision="fail-t"),
                      xaxis={"title": {"text": "Failure category"}},
                      yaxis={**GRID, "title": {"text": "Hottest GPU in the hour before (°C)"}})
    return fig

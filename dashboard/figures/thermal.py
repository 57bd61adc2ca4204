"""Figures of the Thermal page (the weekly report draws ``rack_temperature_boxes``).

Inputs are the frames of :mod:`warehouse.queries.thermal`.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    GRID,
    MUTED,
    PALETTE,
    TIME_AXIS,
    chart_layout,
    empty_figure,
    figure,
    round_axis,
)


def rack_temperature_boxes(df: pd.DataFrame | None) -> go.Figure:
    """Per-rack box of GPU temperatures (p5 / p25 / median / p75 / p95, max as a dot)."""
    if df is None or len(df) == 0:
        return empty_figure("No temperature samples in this range.")
    racks = [html.escape(str(r)) for r in df["rack"]]
    fig = figure([
        go.Box(x=racks, q1=df["p25_c"], median=df["p50_c"], q3=df["p75_c"],
               lowerfence=df["p5_c"], upperfence=df["p95_c"], name="p5-p95",
               marker_color=PALETTE[0], fillcolor="rgba(0,114,178,0.25)",
               hoverinfo="x+y"),
        go.Scatter(x=racks, y=df["max_c"], mode="markers", name="Hottest",
                   marker={"color": PALETTE[5], "symbol": "diamond", "size": 8},
                   hovertemplate="%{x}: hottest %{y:.0f} °C<extra></extra>"),
    ])
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="rack-temps"),
                      xaxis={"title": {"text": "Rack"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "GPU temperature, per-bucket max (°C)"}})
    return fig


def throttling_over_time(df: pd.DataFrame | None) -> go.Figure:
    """Share of GPU time throttled (thermal, power) and the hottest GPU, over time."""
    if df is None or len(df) == 0:
        return empty_figure("No telemetry in this range, so no throttling to show.")
    fig = figure([
        go.Scatter(x=df["ts"], y=df["thermal_pct"], name="Thermal throttling", mode="lines",
                   line={"color": PALETTE[5], "width": 2}, hovertemplate="%{y:.1f} %"),
        go.Scatter(x=df["ts"], y=df["power_pct"], name="Power capping", mode="lines",
                   line={"color": PALETTE[0], "width": 2, "dash": "dash"},
                   hovertemplate="%{y:.1f} %"),
        go.Scatter(x=df["ts"], y=df["hottest_c"], name="Hottest GPU", mode="lines",
                   yaxis="y2", line={"color": MUTED, "width": 1},
                   hovertemplate="%{y:.0f} °C"),
    ])
    fig.update_layout(**chart_layout(uirevision="throttle"), xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": "GPU time throttled (%)"},
                             **round_axis(pd.concat([df["thermal_pct"], df["power_pct"]]))},
                      yaxis2={"title": {"text": "Hottest GPU (°C)"}, "overlaying": "y",
                              "side": "right", "showgrid": False})
    return fig


def event_counts(df: pd.DataFrame | None) -> go.Figure:
    """GPU events per kind and code (``thermal.event_counts``), most frequent on top."""
    if df is None or len(df) == 0:
        return empty_figure("No XID, ECC, throttle or lost-GPU events in this range.",
                            height=260)
    df = df.iloc[::-1]
    labels = [f"XID {int(c)}" if k == "xid" else html.escape(str(k))
              for k, c in zip(df["kind"], df["code"], strict=True)]
    colours = [PALETTE[5] if k == "xid" else PALETTE[0] for k in df["kind"]]
    fig = figure(go.Bar(
        y=labels, x=df["events"], orientation="h", marker_color=colours,
        customdata=df["gpus"], hovertemplate="%{x} events on %{customdata} GPUs<extra></extra>",
    ))
    fig.update_layout(**chart_layout(max(240, 80 + 26 * len(df)), hovermode="closest",
                                uirevision="events"),
                      xaxis={**GRID, "title": {"text": "Events"}},
                      yaxis={"title": {"text": "Kind"}, "automargin": True})
    return fig


def tuner_per_rack(rows: list[dict] | None, rule: str = "") -> go.Figure:
    """The rule tuner's backtest per rack (rows of ``alerts.backtest.per_rule_rack``):
    firings and pages (firing notifications) side by side, one pair of bars per rack."""
    if not rows:
        return empty_figure(f"{html.escape(rule) or 'The rule'} would not have fired in "
                            "this window.", height=280)
    racks = [html.escape(str(r["rack"])) for r in rows]
    fig = figure([
        go.Bar(x=racks, y=[r["firings"] for r in rows], name="Firings",
               marker_color=PALETTE[0], hovertemplate="%{x}: %{y} firings<extra></extra>"),
        go.Bar(x=racks, y=[r["pages"] for r in rows], name="Pages",
               marker_color=PALETTE[5], hovertemplate="%{x}: %{y} pages<extra></extra>"),
    ])
    fig.update_layout(**chart_layout(280, hovermode="closest", uirevision="tuner"),
                      barmode="group",
                      xaxis={"title": {"text": "Rack"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "Count"}, "rangemode": "tozero"})
    return fig

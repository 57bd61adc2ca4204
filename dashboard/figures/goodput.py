"""Figures of the Goodput page (the weekly report draws ``lost_over_time``).

Inputs are the frames of :mod:`warehouse.queries.goodput` and :mod:`warehouse.reliability`.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    CATEGORY_COLOURS,
    GRID,
    PALETTE,
    TIME_AXIS,
    chart_layout,
    empty_figure,
    lines,
)


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
    fig.update_layout(**chart_layout(uirevision="lost"), barmode="stack", xaxis=TIME_AXIS,
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
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="ettr"),
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
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="mttf"),
                      xaxis={"title": {"text": "Job size (GPUs)"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "MTTF (hours)"}, "type": "log"})
    return fig


def ettr_curve(df: pd.DataFrame | None) -> go.Figure:
    """Expected ETTR against the checkpoint interval, the optimum marked."""
    if df is None or len(df) == 0:
        return empty_figure("Enter a job size and restart overhead.")
    fig = lines(df, "checkpoint_interval_h", [("expected_ettr", "Expected ETTR")],
                y_title="Expected ETTR", empty="", uirevision="advisor")
    if {"expected_ettr_low", "expected_ettr_high"} <= set(df.columns):
        x = list(df["checkpoint_interval_h"])
        fig.add_trace(go.Scatter(  # the band of r_f's 95 % interval, behind the line
            x=x + x[::-1],
            y=list(df["expected_ettr_high"]) + list(df["expected_ettr_low"])[::-1],
            fill="toself", fillcolor="rgba(0,114,178,0.15)", line={"width": 0},
            name="r_f's 95 % interval", hoverinfo="skip"))
    best = df[df["optimal"]]
    if len(best):
        fig.add_trace(go.Scatter(x=best["checkpoint_interval_h"], y=best["expected_ettr"],
                                 mode="markers", name="Optimum",
                                 marker={"size": 12, "color": PALETTE[5]}))
    fig.update_layout(xaxis={"title": {"text": "Checkpoint interval (hours)"}, "type": "log"},
                      hovermode="closest")
    return fig

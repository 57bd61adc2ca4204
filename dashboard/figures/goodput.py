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
    figure,
)


def lost_over_time(df: pd.DataFrame | None) -> go.Figure:
    """GPU-hours lost per day, stacked by failure category, from
    :func:`warehouse.queries.goodput.lost_per_day`'s frame (day, category,
    gpu_hours_lost)."""
    if df is None or len(df) == 0:
        return empty_figure("No GPU-hours lost to classified failures in this range.")
    pivot = df.pivot_table(index="day", columns="category", values="gpu_hours_lost",
                           aggfunc="sum", fill_value=0)
    fig = figure(lost_bars(pivot))
    fig.update_layout(**chart_layout(uirevision="lost"), barmode="stack", xaxis=TIME_AXIS,
                      yaxis=LOST_AXIS)
    return fig


LOST_AXIS = {**GRID, "title": {"text": "GPU-hours lost"}}


def lost_bars(pivot: pd.DataFrame) -> list[go.Bar]:
    """One bar trace per failure category (a column of ``pivot``, GPU-hours lost) over
    ``pivot``'s index, in the category's colour: stacked, the GPU-hours lost by
    category over days (this page) or clusters (the fleet view)."""
    return [go.Bar(x=list(pivot.index), y=pivot[c], name=html.escape(str(c)),
                   marker_color=CATEGORY_COLOURS.get(c, PALETTE[7]),
                   hovertemplate="%{y:,.1f} GPU·h") for c in pivot.columns]


def ettr_jobs(df: pd.DataFrame | None, *, min_gpus: int) -> go.Figure:
    """ETTR (productive / wall time) of each large job against its size."""
    if df is None or len(df) == 0:
        return empty_figure(f"No job with {min_gpus} GPUs or more ran in this range.")
    fig = figure(ettr_points(df))
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="ettr"),
                      **ettr_axes(df["gpus"]))
    return fig


def ettr_points(df: pd.DataFrame, *, name: str | None = None,
                colour: str = PALETTE[0]) -> go.Scatter:
    """Each job of ``df`` (:func:`warehouse.queries.goodput.large_jobs`) as a point: its
    ETTR (0..1) against its GPUs; ``name`` (a cluster) labels the trace."""
    extra = "" if name is None else html.escape(name)
    return go.Scatter(
        x=df["gpus"], y=df["ettr"], mode="markers", name=extra or None,
        marker={"size": 10, "color": colour, "line": {"color": "white", "width": 1}},
        text=[html.escape(str(j)) for j in df["job_id"]],
        hovertemplate="Job %{text}: ETTR %{y:.2f} on %{x} GPUs<extra>" + extra + "</extra>",
    )


def ettr_axes(gpus: pd.Series) -> dict:
    """Axes of the ETTR scatter: GPUs on a log scale ticked at the powers of two the
    jobs' sizes span, ETTR from 0 to 1."""
    sizes = [2 ** k for k in range(0, 21)]  # job sizes are powers of two: tick those
    lo, hi = float(gpus.min()), float(gpus.max())
    ticks = [g for g in sizes if lo / 2 <= g <= hi * 2]
    return {"xaxis": {**GRID, "title": {"text": "GPUs"}, "type": "log",
                      "tickvals": ticks, "ticktext": [f"{g:,}" for g in ticks]},
            "yaxis": {**GRID, "title": {"text": "ETTR (productive / wall time)"},
                      "range": [0, 1.05]}}


def mttf_projection(rate: dict | None) -> go.Figure:
    """Projected MTTF (hours, log scale) by job size, with the rate's interval."""
    if not rate_known(rate):
        return empty_figure(NO_RATE)
    return figure(mttf_bars(rate), layout=dict(  # given whole, not by update_layout: ~20
        **chart_layout(hovermode="closest", uirevision="mttf"), **MTTF_AXES))  # ms less


NO_RATE = ("No infrastructure failure in this range: the failure rate, and so the MTTF, "
           "cannot be estimated yet.")
MTTF_AXES = {"xaxis": {"title": {"text": "Job size (GPUs)"}, "type": "category"},
             "yaxis": {**GRID, "title": {"text": "MTTF (hours)"}, "type": "log"}}


def rate_known(rate: dict | None) -> bool:
    """Whether a failure rate (:func:`warehouse.queries.failures.failure_rate`) counted at
    least one failure over some exposure, so that it projects an MTTF."""
    return bool(rate) and rate.get("failures", 0) > 0 and bool(np.isfinite(
        rate.get("r_f_per_1000_node_days", np.nan)))


def mttf_bars(rate: dict, *, name: str | None = None, colour: str = PALETTE[0]) -> go.Bar:
    """The MTTF projected by ``rate`` for each job size as bars (hours), the rate's
    interval as error bars; ``name`` (a cluster) labels the trace."""
    m = rate["mttf"]
    extra = "" if name is None else html.escape(name)
    return go.Bar(
        x=[f"{int(g):,}" for g in m["gpus"]], y=m["mttf_h"], marker_color=colour,
        name=extra or None,
        error_y={"type": "data", "symmetric": False,
                 "array": (m["mttf_h_high"] - m["mttf_h"]).clip(lower=0),
                 "arrayminus": (m["mttf_h"] - m["mttf_h_low"]).clip(lower=0)},
        hovertemplate="%{x} GPUs: MTTF %{y:,.1f} h<extra>" + extra + "</extra>",
    )


def ettr_curve(df: pd.DataFrame | None) -> go.Figure:
    """Expected ETTR against the checkpoint interval, the optimum marked."""
    if df is None or len(df) == 0:
        return empty_figure("Enter a job size and restart overhead.")
    traces = [go.Scatter(
        x=df["checkpoint_interval_h"], y=df["expected_ettr"], name="Expected ETTR",
        mode="lines", line={"color": PALETTE[0], "width": 2, "dash": "solid"},
        hovertemplate="%{y:,.1f}")]
    if {"expected_ettr_low", "expected_ettr_high"} <= set(df.columns):
        x = list(df["checkpoint_interval_h"])
        traces.append(go.Scatter(  # the band of r_f's 95 % interval, behind the line
            x=x + x[::-1],
            y=list(df["expected_ettr_high"]) + list(df["expected_ettr_low"])[::-1],
            fill="toself", fillcolor="rgba(0,114,178,0.15)", line={"width": 0},
            name="r_f's 95 % interval", hoverinfo="skip"))
    best = df[df["optimal"]]
    if len(best):
        traces.append(go.Scatter(x=best["checkpoint_interval_h"], y=best["expected_ettr"],
                                 mode="markers", name="Optimum",
                                 marker={"size": 12, "color": PALETTE[5]}))
    return figure(traces, layout=dict(  # given whole, not by update_layout (issue 17)
        **chart_layout(uirevision="advisor", hovermode="closest"),
        xaxis={"title": {"text": "Checkpoint interval (hours)"}, "showgrid": False,
               "type": "log"},
        yaxis={**GRID, "title": {"text": "Expected ETTR"}, "rangemode": "tozero"}))

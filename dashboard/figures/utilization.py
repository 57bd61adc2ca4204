"""Figures of the Utilisation page (the weekly report draws ``utilisation_over_time``).

Inputs are the frames of :mod:`warehouse.queries.utilisation`.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    GREY,
    GRID,
    PALETTE,
    chart_layout,
    detach_partial,
    empty_figure,
    figure,
    lines,
    mark_partial,
)

BY_LABELS = {"rack": "Rack", "partition": "Partition", "user": "User", "job_type": "Job type"}


def utilisation_over_time(df: pd.DataFrame | None, *, start: datetime | None = None,
                          end: datetime | None = None,
                          bucket: timedelta = timedelta(hours=1)) -> go.Figure:
    """Installed, allocated and utilised GPUs over time (from ``allocated_vs_used``);
    buckets cut by the window ``[start, end)`` are labelled partial."""
    if df is not None and len(df) and df["gpus_reporting"].isna().all():
        df = None  # buckets without a single sample: say why instead of a flat zero
    fig = lines(df, "ts", [("gpus_installed", "Installed"), ("allocated_gpus", "Allocated"),
                           ("utilised_gpus", "Utilised (GPU-equivalents)")],
                y_title="GPUs", colours=(GREY, PALETTE[0], PALETTE[1]),
                dashes={"gpus_installed": "dot"}, uirevision="util-over-time",
                empty="No telemetry in this range: no GPU reported samples (check the "
                      "collectors on /healthz, or pick a longer range).")
    if df is not None and len(df):
        fig.update_traces(fill="tozeroy", fillcolor="rgba(230,159,0,0.15)",
                          selector={"name": "Utilised (GPU-equivalents)"})
        detach_partial(fig, mark_partial(fig, df["ts"], start=start, end=end, bucket=bucket))
    return fig


def utilisation_by(df: pd.DataFrame | None, by: str) -> go.Figure:
    """Allocated and utilised GPU-hours per group (``utilisation_by``), largest on top."""
    label = BY_LABELS.get(by, by)
    if df is None or len(df) == 0:
        return empty_figure(f"No GPU was allocated in this range, so no {label.lower()} "
                            "used any GPU-hours.")
    df = df.iloc[::-1]
    names = [html.escape(str(g)) for g in df["group"]]
    fig = figure([
        go.Bar(y=names, x=df["allocated_gpu_h"], name="Allocated", orientation="h",
               marker_color=PALETTE[0], hovertemplate="%{x:,.1f} GPU·h"),
        go.Bar(y=names, x=df["utilised_gpu_h"], name="Utilised", orientation="h",
               marker_color=PALETTE[1], hovertemplate="%{x:,.1f} GPU·h",
               text=[f"{u:.0f} %" for u in df["util_pct"].fillna(0)],
               textposition="inside", insidetextanchor="end",
               textfont={"color": "white", "size": 11}),
    ])
    fig.update_layout(**chart_layout(max(260, 80 + 26 * len(df)), hovermode="y unified",
                                uirevision=f"util-by-{by}"),
                      barmode="overlay", bargap=0.25,
                      uniformtext={"minsize": 9, "mode": "hide"},
                      xaxis={**GRID, "title": {"text": "GPU-hours"}},
                      yaxis={"title": {"text": label}, "automargin": True})
    return fig


def job_utilisation_histogram(df: pd.DataFrame | None, *, bins: int = 10) -> go.Figure:
    """Distribution of per-job mean utilisation, weighted by each job's GPU-hours."""
    if df is None or len(df) == 0 or df["util_pct"].isna().all():
        return empty_figure("No job held a GPU with telemetry in this range.")
    width = 100 / bins
    edges = [i * width for i in range(bins)]
    util = df["util_pct"].clip(0, 99.999).fillna(0)
    idx = (util // width).astype(int)
    gpu_h = df["allocated_gpu_h"].groupby(idx).sum().reindex(range(bins), fill_value=0)
    jobs = df["job_id"].groupby(idx).count().reindex(range(bins), fill_value=0)
    fig = figure(go.Bar(
        x=[e + width / 2 for e in edges], y=gpu_h.values, width=width * 0.92,
        marker_color=PALETTE[4], customdata=list(zip(edges, [e + width for e in edges],
                                                     jobs.values, strict=True)),
        hovertemplate=("%{customdata[0]:.0f}-%{customdata[1]:.0f} % utilisation<br>"
                       "%{y:,.1f} GPU·h in %{customdata[2]} jobs<extra></extra>"),
    ))
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="job-dist"),
                      xaxis={"title": {"text": "Job's mean GPU utilisation (%)"},
                             "range": [0, 100], "dtick": 10},
                      yaxis={**GRID, "title": {"text": "GPU-hours"}})
    return fig

"""Pure chart builders for the fleet pages (Utilisation, Thermal) and the weekly report.

A DataFrame from a ``warehouse.queries`` function in, a ``go.Figure`` out; no database,
no Dash. Colours are Okabe-Ito (:data:`figures.PALETTE`) or perceptually uniform scales;
every axis names its unit; no data gives :func:`figures.empty_figure` saying why.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures import MUTED, PALETTE, base_layout, empty_figure

GREY = "#9aa5b1"
TIME_AXIS = {"title": {"text": "Time (UTC)"}, "showgrid": False}
GRID = {"gridcolor": "#eef1f4", "zeroline": False}
BY_LABELS = {"rack": "Rack", "partition": "Partition", "user": "User", "job_type": "Job type"}


def _layout(height: int = 320, **overrides) -> dict:
    """Layout of a chart: the base layout, a legend on top, hover across series."""
    layout = {"height": height, "hovermode": "x unified",
              "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0,
                         "font": {"size": 12}},
              "margin": {"l": 64, "r": 24, "t": 36, "b": 48}}
    return base_layout(**{**layout, **overrides})


def lines(df: pd.DataFrame | None, x: str, series: Sequence[tuple[str, str]], *,
          y_title: str, empty: str, height: int = 320, colours: Sequence[str] = PALETTE,
          dashes: dict[str, str] | None = None, uirevision: str = "lines") -> go.Figure:
    """One line per ``(column, label)`` of ``series`` over ``x`` (time)."""
    if df is None or len(df) == 0:
        return empty_figure(empty, height=height)
    fig = go.Figure()
    for (col, label), colour in zip(series, colours, strict=False):
        fig.add_trace(go.Scatter(
            x=df[x], y=df[col], name=label, mode="lines",
            line={"color": colour, "width": 2, "dash": (dashes or {}).get(col, "solid")},
            hovertemplate="%{y:,.1f}",
        ))
    fig.update_layout(**_layout(height, uirevision=uirevision), xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": y_title}, "rangemode": "tozero"})
    return fig


def utilisation_over_time(df: pd.DataFrame | None) -> go.Figure:
    """Installed, allocated and utilised GPUs over time (from ``allocated_vs_used``)."""
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
    return fig


def utilisation_by(df: pd.DataFrame | None, by: str) -> go.Figure:
    """Allocated and utilised GPU-hours per group (``utilisation_by``), largest on top."""
    label = BY_LABELS.get(by, by)
    if df is None or len(df) == 0:
        return empty_figure(f"No GPU was allocated in this range, so no {label.lower()} "
                            "used any GPU-hours.")
    df = df.iloc[::-1]
    names = [html.escape(str(g)) for g in df["group"]]
    fig = go.Figure([
        go.Bar(y=names, x=df["allocated_gpu_h"], name="Allocated", orientation="h",
               marker_color=PALETTE[0], hovertemplate="%{x:,.1f} GPU·h"),
        go.Bar(y=names, x=df["utilised_gpu_h"], name="Utilised", orientation="h",
               marker_color=PALETTE[1], hovertemplate="%{x:,.1f} GPU·h",
               text=[f"{u:.0f} %" for u in df["util_pct"].fillna(0)],
               textposition="outside", cliponaxis=False),
    ])
    fig.update_layout(**_layout(max(260, 80 + 26 * len(df)), hovermode="y unified",
                                uirevision=f"util-by-{by}"),
                      barmode="overlay", bargap=0.25,
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
    fig = go.Figure(go.Bar(
        x=[e + width / 2 for e in edges], y=gpu_h.values, width=width * 0.92,
        marker_color=PALETTE[4], customdata=list(zip(edges, [e + width for e in edges],
                                                     jobs.values, strict=True)),
        hovertemplate=("%{customdata[0]:.0f}-%{customdata[1]:.0f} % utilisation<br>"
                       "%{y:,.1f} GPU·h in %{customdata[2]} jobs<extra></extra>"),
    ))
    fig.update_layout(**_layout(hovermode="closest", uirevision="job-dist"),
                      xaxis={"title": {"text": "Job's mean GPU utilisation (%)"},
                             "range": [0, 100], "dtick": 10},
                      yaxis={**GRID, "title": {"text": "GPU-hours"}})
    return fig


def rack_temperature_boxes(df: pd.DataFrame | None) -> go.Figure:
    """Per-rack box of GPU temperatures (p5 / p25 / median / p75 / p95, max as a dot)."""
    if df is None or len(df) == 0:
        return empty_figure("No temperature samples in this range.")
    racks = [html.escape(str(r)) for r in df["rack"]]
    fig = go.Figure([
        go.Box(x=racks, q1=df["p25_c"], median=df["p50_c"], q3=df["p75_c"],
               lowerfence=df["p5_c"], upperfence=df["p95_c"], name="p5-p95",
               marker_color=PALETTE[0], fillcolor="rgba(0,114,178,0.25)",
               hoverinfo="x+y"),
        go.Scatter(x=racks, y=df["max_c"], mode="markers", name="Hottest",
                   marker={"color": PALETTE[5], "symbol": "diamond", "size": 8},
                   hovertemplate="%{x}: hottest %{y:.0f} °C<extra></extra>"),
    ])
    fig.update_layout(**_layout(hovermode="closest", uirevision="rack-temps"),
                      xaxis={"title": {"text": "Rack"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "GPU temperature, per-bucket max (°C)"}})
    return fig


def throttling_over_time(df: pd.DataFrame | None) -> go.Figure:
    """Share of GPU time throttled (thermal, power) and the hottest GPU, over time."""
    if df is None or len(df) == 0:
        return empty_figure("No telemetry in this range, so no throttling to show.")
    fig = go.Figure([
        go.Scatter(x=df["ts"], y=df["thermal_pct"], name="Thermal throttling", mode="lines",
                   line={"color": PALETTE[5], "width": 2}, hovertemplate="%{y:.1f} %"),
        go.Scatter(x=df["ts"], y=df["power_pct"], name="Power capping", mode="lines",
                   line={"color": PALETTE[0], "width": 2, "dash": "dash"},
                   hovertemplate="%{y:.1f} %"),
        go.Scatter(x=df["ts"], y=df["hottest_c"], name="Hottest GPU", mode="lines",
                   yaxis="y2", line={"color": MUTED, "width": 1},
                   hovertemplate="%{y:.0f} °C"),
    ])
    fig.update_layout(**_layout(uirevision="throttle"), xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": "GPU time throttled (%)"},
                             "rangemode": "tozero"},
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
    fig = go.Figure(go.Bar(
        y=labels, x=df["events"], orientation="h", marker_color=colours,
        customdata=df["gpus"], hovertemplate="%{x} events on %{customdata} GPUs<extra></extra>",
    ))
    fig.update_layout(**_layout(max(240, 80 + 26 * len(df)), hovermode="closest",
                                uirevision="events"),
                      xaxis={**GRID, "title": {"text": "Events"}},
                      yaxis={"title": {"text": "Kind"}, "automargin": True})
    return fig

"""Figures of the Job page: a job's runs on a time axis and its GPUs' telemetry.

- :func:`job_timeline` — a job's runs as bars on a time axis, coloured by state;
- :func:`job_telemetry` — utilisation, temperature and power of a job's GPUs;
- :func:`straggler_heatmap` — its nodes over time against their peers, stragglers marked.
"""

from __future__ import annotations

import copy
import functools
from datetime import datetime

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.base import (
    GRID,
    INK,
    MUTED,
    PALETTE,
    TIME_AXIS,
    chart_layout,
    empty_figure,
    figure,
)
from dashboard.formatting import esc

#: Run states -> colour (Okabe-Ito): good blue/green, failures vermillion/orange.
STATE_COLOURS = {
    "RUNNING": PALETTE[0], "COMPLETED": PALETTE[2], "FAILED": PALETTE[5],
    "NODE_FAIL": PALETTE[5], "TIMEOUT": PALETTE[1], "OUT_OF_MEMORY": PALETTE[1],
    "CANCELLED": MUTED, "REQUEUED": PALETTE[3], "PREEMPTED": PALETTE[3],
}



def job_timeline(runs: pd.DataFrame | None, *, now: datetime) -> go.Figure:
    """One horizontal bar per run from its start to its end (``now`` while running)."""
    if runs is None or len(runs) == 0 or runs["start_ts"].isna().all():
        return empty_figure("This job has not started a run yet.", height=200)
    runs = runs[runs["start_ts"].notna()]
    fig = figure()
    for state, part in runs.groupby("state", sort=False, dropna=False):
        ends = part["end_ts"].fillna(now)
        label = esc(state)
        fig.add_trace(go.Bar(
            base=part["start_ts"], x=(ends - part["start_ts"]).dt.total_seconds() * 1000,
            y=[f"Run {int(i)}" for i in part["run_index"]], orientation="h", name=label,
            marker_color=STATE_COLOURS.get(str(state), MUTED),
            customdata=[[label, esc(r), f"{h:.1f}"] for r, h in
                        zip(part["reason"], part["hours"], strict=True)],
            hovertemplate=("%{y}: %{customdata[0]} · %{customdata[2]} h<br>"
                           "%{customdata[1]}<extra></extra>"),
        ))
    fig.update_layout(**chart_layout(max(180, 90 + 36 * len(runs)), hovermode="closest",
                                uirevision="job-timeline"),
                      barmode="overlay",
                      xaxis={**TIME_AXIS, "type": "date"},
                      yaxis={"title": {"text": "Run"}, "autorange": "reversed",
                             "type": "category"})
    return fig


_TELEMETRY_PANELS = ((1, "Utilisation (%)", "%"), (2, "Temperature (°C)", "°C"),
                     (3, "Power (kW)", "kW"))


@functools.lru_cache(maxsize=1)
def _telemetry_layout() -> dict:
    """The three stacked panels' layout, made once: make_subplots and plotly's updates
    cost ~100 ms of CPU a figure (issue 17: the job page's telemetry callback)."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.09,
                        subplot_titles=[title for _, title, _ in _TELEMETRY_PANELS])
    # each panel named above it: three rotated y titles on 130-px panels overlapped
    fig.update_layout(**chart_layout(520, uirevision="job-telemetry",
                                     margin={"l": 64, "r": 24, "t": 64, "b": 48}))
    fig.update_annotations(font={"size": 12}, x=0, xanchor="left")
    for row, _, unit in _TELEMETRY_PANELS:
        fig.update_yaxes(title_text=unit, row=row, col=1, **GRID)
    fig.update_yaxes(range=[0, 105], dtick=25, row=1, col=1)
    fig.update_xaxes(title_text="Time (UTC)", row=3, col=1, showgrid=False)
    return fig.layout.to_plotly_json()


def job_telemetry(df: pd.DataFrame | None) -> go.Figure:
    """Three stacked panels over time: utilisation (%), temperature (°C), power (kW)."""
    if df is None or len(df) == 0:
        return empty_figure("No telemetry from this job's GPUs: it never held a GPU, or "
                            "its samples are older than the rollups kept.", height=420)
    rows = [
        (1, "util_mean_pct", "Mean utilisation", PALETTE[0], "%{y:.0f} %"),
        (1, "util_min_pct", "Least-busy GPU", PALETTE[4], "%{y:.0f} %"),
        (2, "temp_mean_c", "Mean temperature", PALETTE[1], "%{y:.0f} °C"),
        (2, "temp_max_c", "Hottest GPU", PALETTE[5], "%{y:.0f} °C"),
        (3, "power_kw", "Power of its GPUs", PALETTE[2], "%{y:.1f} kW"),
    ]
    axis = {1: "", 2: "2", 3: "3"}
    traces = [go.Scatter(x=df["ts"], y=df[col], name=name, mode="lines",
                         line={"color": colour, "width": 2}, hovertemplate=tmpl,
                         xaxis="x" + axis[row], yaxis="y" + axis[row])
              for row, col, name, colour, tmpl in rows]
    return figure(traces, layout=copy.deepcopy(_telemetry_layout()))


def straggler_heatmap(cells: pd.DataFrame | None, episodes: pd.DataFrame | None) -> go.Figure:
    """The MegaScale view (issue 15): a job's nodes (rows) over time, each cell the SM
    clock of the node's slowest GPU over the median of the job's nodes (1 = as fast as
    its peers; darker = slower), throttled seconds on hover; each straggler episode
    outlined on its node's row."""
    if cells is None or len(cells) == 0:
        return empty_figure("No telemetry from this job's GPUs to compare its nodes.",
                            height=260)
    # the cells (one per node and bucket) placed on a nodes x buckets grid by their codes,
    # no aggregation: pivot_table's means took ~0.1 s of an 8,192-GPU job's 250,000 cells
    # and a pivot ~45 ms (issue 17); buckets without a clock on any node are left out, as
    # pivot_table left them
    row, nodes = pd.factorize(cells["node"], sort=True, use_na_sentinel=False)
    col, buckets = pd.factorize(cells["ts"], sort=True, use_na_sentinel=False)
    # a count per cell (np.unique sorted them: ~25 ms of an 8,192-GPU job's callback)
    if np.bincount(row * len(buckets) + col).max() > 1:
        raise ValueError("the heat map's cells hold a node and bucket twice")
    grid = np.full((len(nodes), len(buckets)), np.nan)
    thr = grid.copy()
    grid[row, col] = cells["clock_rel"].to_numpy(float, na_value=np.nan)
    thr[row, col] = cells["throttle_s"].to_numpy(float, na_value=np.nan)
    kept = ~np.isnan(grid).all(axis=0)
    nodes = list(nodes)
    fig = figure(go.Heatmap(
        x=list(buckets[kept]), y=[esc(n) for n in nodes], z=grid[:, kept],
        customdata=thr[:, kept], zmin=0.6, zmax=1.0,
        colorscale=[[0, PALETTE[5]], [0.5, PALETTE[1]], [0.88, "#f4f6f8"], [1, "#ffffff"]],
        colorbar={"title": {"text": "clock / peers"}, "tickformat": ".0%"},
        hovertemplate=("%{y} · %{x}<br>slowest GPU's clock %{z:.0%} of the peers'"
                       "<br>throttled %{customdata:.0f} s<extra></extra>")))
    # the outlines as plain dicts set once: add_shape and add_annotation copy the whole
    # layout each call (issue 17: 200 episodes took 19 s of a 1,024-node job's callback)
    row = {n: i for i, n in enumerate(nodes)}
    marked = [(rec, row[rec["node"]]) for rec in
              ([] if episodes is None else episodes.to_dict("records")) if rec["node"] in row]
    shapes = [{"type": "rect", "x0": rec["start_ts"], "x1": rec["end_ts"], "y0": y - 0.5,
               "y1": y + 0.5, "line": {"color": INK, "width": 2},
               "fillcolor": "rgba(0,0,0,0)"} for rec, y in marked]
    notes = [{"x": rec["start_ts"], "y": y, "text": "straggler", "showarrow": True,
              "arrowhead": 2, "ax": -40, "ay": 0, "font": {"size": 11}} for rec, y in marked]
    fig.update_layout(**chart_layout(max(220, 80 + 18 * len(nodes)), hovermode="closest",
                                     uirevision="job-stragglers"),
                      xaxis={**TIME_AXIS, "type": "date"},
                      yaxis={"title": {"text": "Node"}, "type": "category",
                             "autorange": "reversed"},
                      **({"shapes": shapes, "annotations": notes} if marked else {}))
    return fig

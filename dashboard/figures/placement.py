"""Figures of the Placement page (the weekly report draws ``fragmentation_over_time``).

Inputs are the frames of :mod:`warehouse.placement` and :mod:`warehouse.placement_runs`.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import GREY, GRID, PALETTE, chart_layout, empty_figure, figure, lines


def fragmentation_over_time(df: pd.DataFrame | None) -> go.Figure:
    """Free GPUs, the largest job that could start within one zone and one rack, and the
    stranded GPUs, per hour (GPUs)."""
    return lines(df, "ts", [("free_gpus", "Free"), ("largest_zone_gpus", "Largest job in a zone"),
                            ("largest_rack_gpus", "Largest job in a rack"),
                            ("stranded_gpus", "Stranded")],
                 y_title="GPUs", colours=(GREY, PALETTE[0], PALETTE[1], PALETTE[5]),
                 dashes={"free_gpus": "dot"}, uirevision="placement-frag",
                 empty="No topology or no allocation in this range: nothing to measure.")


def placement_scores(markers: pd.DataFrame | None) -> go.Figure:
    """Multi-node runs: GPUs against placement score (1 = as tight as its size allows);
    misplaced runs in a second colour. A marker is the runs of one size, span and score
    (:func:`warehouse.placement_runs.placed_runs`'s markers; issue 17: a 24,576-GPU week has
    ~560,000 multi-node runs, and a marker each took 16 s to build and tens of MB to
    send); its size is by their GPU-hours, and its hover names how many runs it holds
    and the job of the one with the most GPU-hours."""
    if markers is None or len(markers) == 0:
        return empty_figure("No multi-node job ran in this range.")
    data = []
    for bad, name, colour in ((False, "Placed tightly", PALETTE[0]),
                              (True, "Spread more than needed", PALETTE[5])):
        d = markers[markers["misplaced"] == bad]
        if len(d) == 0:
            continue
        size = np.nan_to_num(d["gpu_hours"].clip(lower=0).to_numpy(float)) ** 0.5
        more = d["runs"] - 1
        data.append({
            "type": "scatter", "x": d["gpus"].to_numpy(), "y": d["score"].to_numpy(),
            "mode": "markers", "name": name,
            "marker": {"color": colour, "size": 6 + 24 * size / max(float(size.max()), 1e-9),
                       "line": {"color": "white", "width": 1}},
            "text": [html.escape(str(j)) + (f" and {m:,} more run{'s' * (m > 1)}" if m else "")
                     for j, m in zip(d["job_id"], more, strict=True)],
            "customdata": d[["racks", "min_racks", "zones", "min_zones"]].to_numpy(),
            "hovertemplate": ("Job %{text}: %{x} GPUs, score %{y:.2f}<br>"
                              "racks %{customdata[0]} (fewest %{customdata[1]}), "
                              "zones %{customdata[2]} (fewest %{customdata[3]})<extra></extra>"),
        })
    lo, hi = float(markers["gpus"].min()), float(markers["gpus"].max())
    ticks = [2 ** k for k in range(0, 21) if lo / 2 <= 2 ** k <= hi * 2]  # sizes: powers of 2
    return figure(data, layout={  # built unvalidated, as base.lines (issue 17: ~28 ms)
        **chart_layout(hovermode="closest", uirevision="placement-scores"),
        "xaxis": {**GRID, "title": {"text": "GPUs"}, "type": "log", "tickvals": ticks,
                  "ticktext": [f"{g:,}" for g in ticks]},
        "yaxis": {**GRID, "title": {"text": "Placement score"}, "range": [0, 1.05]}})

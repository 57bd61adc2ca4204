"""Figures of the rack drill-down (dashboard/drilldown.py, on Overview and Thermal).

:func:`rack_gpus` draws a rack's nodes x GPU index, coloured by a floor-map metric.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import TEMP_RANGE_C, chart_layout, empty_figure, figure, temp_colorscale
from dashboard.figures.overview import FLOOR_METRICS, TEMP_THRESHOLDS_C
from dashboard.formatting import esc, missing

#: Drill-down cell metric -> (column of gpus_now, colour bar title, scale range).
CELL_METRICS = {"temp": ("temp_c", "GPU temperature (°C)", TEMP_RANGE_C),
                "util": ("util_pct", "Utilisation (%)", (0.0, 100.0)),
                "power": ("power_w", "GPU power (kW)", (0.0, 0.7))}



def rack_gpus(df: pd.DataFrame | None, *, rack: str, metric: str = "temp") -> go.Figure:
    """A rack's GPUs as a grid: one row per node, one column per GPU index.

    ``df`` is :func:`warehouse.queries.topology.gpus_now`'s frame for the rack. Cells
    carry ``customdata[0]`` = node (click to drill into it) and the job on the GPU.
    """
    if df is None or len(df) == 0:
        return empty_figure(f"Rack {rack} has no nodes in the topology.", height=260)
    m = FLOOR_METRICS[metric]
    col, bar_title, (lo, hi) = CELL_METRICS[metric]
    # the floor map's scale: temperature steps at the alert's clear level and threshold
    colours = (temp_colorscale(*TEMP_THRESHOLDS_C, (lo, hi)) if metric == "temp"
               else m.colorscale)
    scale = 1000.0 if metric == "power" else 1.0
    values = df[col].astype(float) / scale
    nodes = sorted(df["node"].unique())
    gpus = sorted(int(g) for g in df["gpu_index"].unique())
    grid = values.groupby([df["node"], df["gpu_index"].astype(int)]).first()
    # each GPU's first row, looked up (a filter of the frame per cell took ~0.3 s a rack)
    first = {(r["node"], int(r["gpu_index"])): r for r in df.to_dict("records")[::-1]}
    z, custom = [], []
    for node in nodes:
        z.append([grid.get((node, g)) for g in gpus])
        row = []
        for g in gpus:
            r = first.get((node, g), {})
            job = "idle" if missing(r.get("job_id")) else (
                f"job {esc(r.get('job_id'))} · {esc(r.get('user_name'))}")
            value = r.get(col)
            row.append([node, g, job,
                        "no fresh sample" if missing(value) else m.fmt(value / scale)])
        custom.append(row)
    fig = figure(go.Heatmap(
        z=z, x=[f"GPU {g}" for g in gpus], y=[html.escape(n) for n in nodes],
        customdata=custom, colorscale=colours, zmin=lo, zmax=hi, xgap=3, ygap=3,
        colorbar={"title": {"text": bar_title, "side": "right"}, "thickness": 12},
        hovertemplate=("<b>%{customdata[0]}</b> GPU %{customdata[1]}<br>%{customdata[3]}"
                       "<br>%{customdata[2]}<extra></extra>"),
        hoverongaps=False,
    ))
    fig.update_layout(**chart_layout(max(200, 90 + 44 * len(nodes)), hovermode="closest",
                                     showlegend=False, uirevision=f"rack-gpus-{rack}"),
                      xaxis={"title": {"text": "GPU index"}, "side": "top"},
                      yaxis={"title": {"text": "Node"}, "autorange": "reversed"},
                      clickmode="event")
    return fig

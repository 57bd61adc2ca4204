"""Figures of the Energy page (the weekly report draws ``energy_over_time``).

Inputs are the frames of :mod:`warehouse.queries.energy`.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    CATEGORY_COLOURS,
    GRID,
    PALETTE,
    TIME_AXIS,
    chart_layout,
    detach_partial,
    empty_figure,
    figure,
    mark_partial,
    round_axis,
)

#: The node energy sources of :func:`node_energy_method`, as the page names them.
NODE_SOURCES = {"counter": "BMC energy counter", "power": "BMC power readings",
                "overhead": "GPUs + configured node overhead"}


def node_energy_method(df: pd.DataFrame | None) -> str:
    """Which node energy the figures count (issue 21), from the node-hours of each source
    in ``df`` (warehouse/queries/energy.py:energy_by): the BMC's energy counter where it
    keeps one, else its power readings, else GPU energy + the configured node overhead."""
    if df is None or len(df) == 0 or "bmc_node_hours" not in df:
        return NODE_SOURCES["overhead"]
    total, bmc = df["node_hours"].sum(), df["bmc_node_hours"].sum()
    counter = df["bmc_counter_node_hours"].sum() if "bmc_counter_node_hours" in df else 0
    hours = {"counter": counter, "power": bmc - counter, "overhead": total - bmc}
    used = {k: h for k, h in hours.items() if h > 0}
    if bmc <= 0:
        return NODE_SOURCES["overhead"] + " (no BMC readings)"
    if len(used) == 1:
        return "node energy from the " + NODE_SOURCES[next(iter(used))]
    return ", ".join(f"{NODE_SOURCES[k]} {100 * h / total:.0f} %" for k, h in used.items()
                     ) + " of node-hours"


def energy_over_time(df: pd.DataFrame | None, *, x: str, start: datetime | None = None,
                     end: datetime | None = None) -> go.Figure:
    """GPU and other IT energy (stacked kWh) and emissions (kg, right axis) per ``x``
    ("hour" or "day"); hours or days cut by the window ``[start, end)`` are labelled
    partial (their bars are short because the period is, not the load)."""
    if df is None or len(df) == 0:
        return empty_figure("No energy data in this range (the hourly energy table is "
                            "filled by the analytics job after the rollups).")
    xs = df[x].to_numpy()
    fig = figure([  # plain traces, unvalidated (base.figure; issue 17)
        {"type": "bar", "x": xs, "y": df["gpu_kwh"].to_numpy(), "name": "GPUs",
         "marker": {"color": PALETTE[0]}, "hovertemplate": "%{y:,.1f} kWh"},
        {"type": "bar", "x": xs, "y": df["other_kwh"].to_numpy(),
         "name": "Rest of the nodes", "marker": {"color": PALETTE[4]},
         "hovertemplate": "%{y:,.1f} kWh"},
        {"type": "scatter", "x": xs, "y": df["carbon_kg"].to_numpy(), "name": "Emissions",
         "yaxis": "y2", "mode": "lines", "line": {"color": PALETTE[5], "width": 2},
         "hovertemplate": "%{y:,.1f} kg"},
    ], layout=dict(  # given whole, not by update_layout: ~30 ms of CPU less (issue 17)
        **chart_layout(uirevision="energy"), barmode="stack", xaxis=TIME_AXIS,
        yaxis={**GRID, "title": {"text": "IT energy (kWh)"},
               **round_axis(df["gpu_kwh"] + df["other_kwh"])},
        yaxis2={"title": {"text": "Emissions (kg CO₂e)"}, "overlaying": "y",
                "side": "right", "showgrid": False, **round_axis(df["carbon_kg"])}))
    bucket = timedelta(days=1) if x == "day" else timedelta(hours=1)
    detach_partial(fig, mark_partial(fig, df[x], start=start, end=end, bucket=bucket))
    return fig


_SOURCE_COLOURS = (2, 0, 5, 1, 4, 6, 7)  # PALETTE indices; 3 is the PUE's


def _source_label(sources) -> str:
    """The intensity source(s) of one row of ``energy_by`` (a list; a day may have
    several): 'electricitymaps', 'table:DE 2023', 'import + watttime'."""
    if sources is None or isinstance(sources, float):
        return "unknown"
    return " + ".join(sorted(str(s) for s in sources)) or "unknown"


def intensity_sources(df: pd.DataFrame | None, *, x: str = "hour") -> str:
    """Which grid-intensity source applied to how many of the rows (hours or days), most
    first: 'electricitymaps 20 h · table:DE 2023 4 h' (issue 21)."""
    if df is None or len(df) == 0 or "intensity_sources" not in df:
        return "no intensity applied"
    counts = df["intensity_sources"].map(_source_label).value_counts()
    unit = "d" if x == "day" else "h"
    return " · ".join(f"{name} {n} {unit}" for name, n in counts.items())


def pue_and_intensity(df: pd.DataFrame | None, *, x: str) -> go.Figure:
    """PUE (facility / IT energy) and grid intensity (g CO2e / kWh) over time; the
    intensity is drawn once per source, so the legend says which source applied to each
    hour (or day)."""
    if df is None or len(df) == 0:
        return empty_figure("No energy data in this range.")
    d = df.assign(pue=df["facility_kwh"] / df["it_kwh"].where(df["it_kwh"] > 0),
                  g_per_kwh=1000 * df["carbon_kg"] / df["facility_kwh"].where(
                      df["facility_kwh"] > 0))
    labels = (d["intensity_sources"].map(_source_label) if "intensity_sources" in d
              else pd.Series("unknown", index=d.index))
    xs = d[x].to_numpy()
    traces = []  # plain traces, unvalidated (base.figure; issue 17)
    for i, name in enumerate(labels.value_counts().index):
        traces.append({
            "type": "scatter", "x": xs, "y": d["g_per_kwh"].where(labels == name).to_numpy(),
            "name": f"Grid intensity: {html.escape(name)}", "mode": "lines+markers",
            "line": {"color": PALETTE[_SOURCE_COLOURS[i % len(_SOURCE_COLOURS)]], "width": 2},
            "marker": {"size": 4}, "connectgaps": False,
            "hovertemplate": "%{y:,.0f} g/kWh · " + html.escape(name) + "<extra></extra>"})
    fig = figure([
        *traces,
        {"type": "scatter", "x": xs, "y": d["pue"].to_numpy(), "name": "PUE", "yaxis": "y2",
         "mode": "lines", "line": {"color": PALETTE[3], "width": 2, "dash": "dash"},
         "hovertemplate": "%{y:.2f}"},
    ], layout=dict(  # given whole, not by update_layout (issue 17)
        **chart_layout(uirevision="pue"), xaxis=TIME_AXIS,
        yaxis={**GRID, "title": {"text": "Grid intensity (g CO₂e / kWh)"},
               **round_axis(d["g_per_kwh"])},
        yaxis2={"title": {"text": "PUE"}, "overlaying": "y", "side": "right",
                "showgrid": False, **round_axis(d["pue"])}))
    return fig


def energy_by(df: pd.DataFrame | None, *, key: str, label: str, top: int = 20) -> go.Figure:
    """Facility energy (kWh) per group, emissions in the hover; largest on top."""
    if df is None or len(df) == 0:
        return empty_figure(f"No energy attributed to any {label.lower()} in this range.")
    d = df.sort_values("carbon_kg", ascending=False).head(top).iloc[::-1]
    energy = d["facility_kwh"] if "facility_kwh" in d else d["it_kwh"]
    fig = figure(go.Bar(
        y=[html.escape(str(v))[:40] for v in d[key]], x=energy, orientation="h",
        marker_color=PALETTE[0], customdata=d["carbon_kg"],
        hovertemplate="%{y}: %{x:,.1f} kWh · %{customdata:,.1f} kg CO₂e<extra></extra>",
    ))
    fig.update_layout(**chart_layout(max(260, 80 + 24 * len(d)), hovermode="closest",
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
    fig = figure(go.Bar(y=[html.escape(str(c)).replace("_", " ") for c in g.index],
                           x=g.values, orientation="h",
                           marker_color=[CATEGORY_COLOURS.get(c, PALETTE[0]) for c in g.index],
                           hovertemplate="%{y}: %{x:,.1f}<extra></extra>"),
                 layout=dict(  # given whole, not by update_layout (issue 17)
                     **chart_layout(max(220, 80 + 30 * len(g)), hovermode="closest",
                                    uirevision=f"cat-{value}"),
                     xaxis={**GRID, "title": {"text": x_title}},
                     yaxis={"title": {"text": ""}, "automargin": True}))
    return fig

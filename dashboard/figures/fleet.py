"""Figures of the fleet view (``gpulens fleet``, issue 18): clusters side by side.

Inputs are :func:`warehouse.queries.lake_fleet.fleet_figures` (cluster name -> that
cluster's figures). Where a single-cluster page draws the same quantity the trace comes
from its builder (:mod:`dashboard.figures.goodput`: MTTF bars, ETTR points, GPU-hours
lost by category), one trace per cluster; clusters keep one colour across figures.
"""

from __future__ import annotations

import html
import math

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    GREY,
    GRID,
    PALETTE,
    chart_layout,
    empty_figure,
    figure,
    round_axis,
)
from dashboard.figures.goodput import (
    LOST_AXIS,
    MTTF_AXES,
    NO_RATE,
    ettr_axes,
    ettr_points,
    lost_bars,
    mttf_bars,
    rate_known,
)

#: The two quantities of a two-axis chart: greys, since the palette's colours stand for
#: clusters in the other figures.
PAIR_COLOURS = ("#52606d", GREY)
NO_CLUSTER = "No cluster in the lake yet: export one with gpulens export parquet."


def colours(names: list[str]) -> dict[str, str]:
    """A colour per cluster, in the order given (Okabe-Ito, repeating after eight)."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _ok(figs: dict[str, dict]) -> dict[str, dict]:
    return {n: f for n, f in figs.items() if "error" not in f}


def _x(names) -> list[str]:
    return [html.escape(n) for n in names]


def failure_rates(figs: dict[str, dict]) -> go.Figure:
    """Each cluster's infrastructure failure rate r_f (per 1,000 node-days) with its
    exact 95 % Poisson interval as error bars; a cluster without exposure is left out."""
    rates = {n: f["rate"] for n, f in _ok(figs).items()
             if f["rate"]["node_days"] > 0}
    if not rates:
        return empty_figure("No cluster has node-days of work in this range.")
    r = pd.DataFrame([{"cluster": n, "r": x["r_f_per_1000_node_days"], "lo": x["r_f_low"],
                       "hi": x["r_f_high"], "failures": x["failures"],
                       "node_days": x["node_days"]} for n, x in rates.items()])
    cols = colours(list(figs))
    fig = figure(go.Scatter(  # plain lists: a few points, readable in the page
        x=_x(r["cluster"]), y=r["r"].tolist(), mode="markers",
        marker={"size": 12, "color": [cols[n] for n in r["cluster"]]},
        error_y={"type": "data", "symmetric": False,
                 "array": (r["hi"] - r["r"]).clip(lower=0).tolist(),
                 "arrayminus": (r["r"] - r["lo"]).clip(lower=0).tolist(),
                 "thickness": 2, "width": 10},
        customdata=r[["lo", "hi", "failures", "node_days"]].to_numpy().tolist(),
        hovertemplate="%{x}: r_f %{y:,.2f} per 1,000 node-days (95 %: %{customdata[0]:,.2f}"
                      "-%{customdata[1]:,.2f}); %{customdata[2]} failures in "
                      "%{customdata[3]:,.1f} node-days<extra></extra>",
    ))
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="fleet-rate",
                                     showlegend=False),
                      xaxis={"title": {"text": "Cluster"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": "Failures per 1,000 node-days"},
                             "rangemode": "tozero"})
    return fig


def mttf_by_cluster(figs: dict[str, dict]) -> go.Figure:
    """The MTTF each cluster's rate projects by job size (hours, log scale), the Goodput
    page's bars (:func:`dashboard.figures.goodput.mttf_bars`) grouped by cluster."""
    cols = colours(list(figs))
    known = {n: f["rate"] for n, f in _ok(figs).items() if rate_known(f["rate"])}
    if not known:
        return empty_figure(NO_RATE)
    fig = figure([mttf_bars(r, name=n, colour=cols[n]) for n, r in known.items()])
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="fleet-mttf"),
                      barmode="group", **MTTF_AXES)
    return fig


def ettr_by_cluster(figs: dict[str, dict], *, min_gpus: int) -> go.Figure:
    """ETTR of each cluster's large jobs against their size, the Goodput page's points
    (:func:`dashboard.figures.goodput.ettr_points`) coloured by cluster."""
    cols = colours(list(figs))
    jobs = {n: f["large_jobs"] for n, f in _ok(figs).items() if len(f["large_jobs"])}
    if not jobs:
        return empty_figure(f"No job with {min_gpus} GPUs or more ran in this range.")
    fig = figure([ettr_points(df, name=n, colour=cols[n]) for n, df in jobs.items()])
    fig.update_layout(**chart_layout(hovermode="closest", uirevision="fleet-ettr"),
                      **ettr_axes(pd.concat([df["gpus"] for df in jobs.values()])))
    return fig


def lost_by_cluster(figs: dict[str, dict]) -> go.Figure:
    """GPU-hours lost to failed runs per cluster, stacked by failure category, the
    Goodput page's category bars (:func:`dashboard.figures.goodput.lost_bars`)."""
    rows = [{"cluster": n, "category": c, "gpu_hours_lost": v}
            for n, f in _ok(figs).items()
            for c, v in zip(f["lost"]["category"], f["lost"]["gpu_hours_lost"], strict=True)]
    if not rows:
        return empty_figure("No GPU-hours lost to classified failures in this range.")
    pivot = pd.DataFrame(rows).pivot_table(index="cluster", columns="category",
                                           values="gpu_hours_lost", aggfunc="sum",
                                           fill_value=0)
    pivot.index = _x(pivot.index)
    fig = figure(lost_bars(pivot))
    fig.update_layout(**chart_layout(uirevision="fleet-lost"), barmode="stack",
                      xaxis={"title": {"text": "Cluster"}, "type": "category"}, yaxis=LOST_AXIS)
    return fig


def _pair(figs: dict, a: tuple[str, str, str], b: tuple[str, str, str], *, uirevision: str,
          empty: str, fmt: tuple[str, str]) -> go.Figure:
    """Two quantities per cluster as grouped bars on two axes from 0 with round ticks:
    ``a`` and ``b`` are (label with unit, key of a cluster's figures -> value) getters."""
    names = list(_ok(figs))
    if not names:
        return empty_figure(empty)
    ys = [[_get(figs[n], spec[1], spec[2]) for n in names] for spec in (a, b)]
    if not any(v is not None and v > 0 for y in ys for v in y):
        return empty_figure(empty)
    fig = figure()
    for i, (spec, y, f) in enumerate(zip((a, b), ys, fmt, strict=True)):
        fig.add_trace(go.Bar(x=_x(names), y=y, name=spec[0], marker_color=PAIR_COLOURS[i],
                             offsetgroup=str(i), yaxis="y" if i == 0 else "y2",
                             hovertemplate="%{x}: %{y:" + f + "}<extra>" + spec[0]
                                           + "</extra>"))
    clean = [[0.0 if v is None else v for v in y] for y in ys]
    fig.update_layout(**chart_layout(hovermode="closest", uirevision=uirevision,
                                     margin={"l": 64, "r": 96, "t": 36, "b": 48}),
                      barmode="group", xaxis={"title": {"text": "Cluster"}, "type": "category"},
                      yaxis={**GRID, "title": {"text": a[0]}, **round_axis(clean[0])},
                      yaxis2={"title": {"text": b[0]}, "overlaying": "y", "side": "right",
                              "showgrid": False, **round_axis(clean[1])})
    return fig


def _get(f: dict, section: str, key: str):
    v = f[section].get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def utilisation_by_cluster(figs: dict[str, dict]) -> go.Figure:
    """Per cluster: the share of installed GPU-hours allocated to jobs and the
    utilisation of the allocated ones (percent, the weekly report's definitions)."""
    return _pair(figs, ("Allocated (% of installed GPU-hours)", "fleet", "allocated_share_pct"),
                 ("Utilised (% of allocated GPU-hours)", "fleet", "util_of_allocated_pct"),
                 uirevision="fleet-util", fmt=(".1f", ".1f"),
                 empty="No cluster reported GPU-hours in this range.")


def energy_by_cluster(figs: dict[str, dict]) -> go.Figure:
    """Per cluster: facility energy (MWh) and emissions (t CO₂e), the Energy page's
    totals (:func:`warehouse.queries.energy.energy_by` ``fleet``)."""
    scaled = {n: {**f, "mwh": {"facility_mwh": f["energy"]["facility_kwh"] / 1000,
                               "tco2e": f["energy"]["carbon_kg"] / 1000}}
              for n, f in _ok(figs).items()}
    return _pair(scaled, ("Facility energy (MWh)", "mwh", "facility_mwh"),
                 ("Emissions (t CO₂e)", "mwh", "tco2e"), uirevision="fleet-energy",
                 fmt=(",.2f", ",.3f"), empty="No energy measured in this range.")

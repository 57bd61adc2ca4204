"""Figures of the Overview page: the machine-room floor map (the Thermal page shows it too).

:func:`floor_map` draws :func:`warehouse.queries.overview.rack_floor`'s frame: one
square per rack at its (x, y) tile, coloured by a :data:`FLOOR_METRICS` metric.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from dashboard.figures.base import (
    CIVIDIS,
    INK,
    MUTED,
    NO_DATA,
    PALETTE,
    TEMP_COLORSCALE,
    TEMP_RANGE_C,
    VIRIDIS,
    base_layout,
    colour_at,
    empty_figure,
    figure,
    temp_colorscale,
)
from dashboard.formatting import esc, fmt_kw, fmt_pct, fmt_span, fmt_temp, missing
from warehouse.queries.fleet import STALE_AFTER_S


@dataclass(frozen=True)
class Metric:
    """What a floor-map tile (or a GPU cell) is coloured by."""

    column: str  # column of rack_floor()'s frame
    title: str  # colour bar title, with the unit
    colorscale: list
    fmt: Callable[[float], str]
    range: tuple[float, float] | None  # None: 0 .. the largest value


FLOOR_METRICS = {
    "temp": Metric("hottest_temp_c", "Hottest GPU (°C)", TEMP_COLORSCALE, fmt_temp, TEMP_RANGE_C),
    "util": Metric("mean_util_pct", "Mean utilisation (%)", VIRIDIS, fmt_pct, (0.0, 100.0)),
    "power": Metric("power_kw", "GPU power (kW)", CIVIDIS, fmt_kw, None),
}
TILE = 0.88  # a rack's square, in floor tiles (the rest is the aisle gap)
#: The gpu_temp alert's clear level and threshold (°C, alerts/rules.py): steps of the scale.
TEMP_THRESHOLDS_C = (82.0, 87.0)
ALERT_LINE = PALETTE[5]  # outline of a rack with a firing alert (vermillion)


def _text_colour(fill: str) -> str:
    r, g, b = (int(v) for v in fill[fill.index("(") + 1 : -1].split(","))
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


def _positions(df: pd.DataFrame) -> pd.DataFrame:
    """Racks without a floor position go in a row below the placed ones, by name; rows
    are then numbered 0, 1, 2.. top down, so aisles and zone gaps leave no empty band."""
    df = df.copy()
    unplaced = df["x"].isna() | df["y"].isna()
    if unplaced.any():
        below = (df.loc[~unplaced, "y"].max() + 1) if (~unplaced).any() else 0.0
        df.loc[unplaced, "y"] = below
        df.loc[unplaced, "x"] = range(int(unplaced.sum()))
    rows = {y: float(i) for i, y in enumerate(sorted(df["y"].unique()))}
    df["y"] = df["y"].map(rows)
    return df


def _row_ticks(df: pd.DataFrame) -> dict:
    """Y tick labels naming each floor row and its zone(s): ``"Row 1 · A"``."""
    vals, text = [], []
    for y, group in df.groupby("y", sort=True):
        row = group["row"].dropna()
        zones = ", ".join(sorted({html.escape(str(z)) for z in group["zone"].dropna()}))
        label = f"Row {int(row.iloc[0])}" if len(row) else f"y {y:g}"
        vals.append(y)
        text.append(f"{label} · {zones}" if zones else label)
    return {"tickvals": vals, "ticktext": text, "showticklabels": True}


def _hover_rows(df: pd.DataFrame, alerting: dict[str, str]) -> list[list[str]]:
    rows = []
    for r in df.itertuples(index=False):
        alert = alerting.get(str(r.rack))
        if missing(r.hottest_temp_c):
            hottest = "no fresh sample"
        else:
            gpu = "" if missing(r.hottest_gpu_index) else f"/{int(r.hottest_gpu_index)}"
            hottest = f"{esc(r.hottest_node)}{gpu} at {fmt_temp(r.hottest_temp_c)}"
        rows.append(
            [
                html.escape(str(r.rack)),
                html.escape(str(r.zone)) if not missing(r.zone) else "—",
                hottest,
                fmt_pct(r.mean_util_pct),
                fmt_kw(r.power_kw),
                f"{int(r.gpus_reporting)} of {int(r.gpus)} GPUs reporting",
                f"<br><b>Firing alert: {html.escape(alert)}</b>" if alert else "",
            ]
        )
    return rows


def _colour_range(values: pd.Series, metric: str,
                  temp_range_c: tuple[float, float]) -> tuple[float, float]:
    """The colour scale's limits: fixed for temperature and utilisation, 0..max for power."""
    if metric == "temp":
        return temp_range_c
    m = FLOOR_METRICS[metric]
    top = float(values.max()) if values.notna().any() else 1.0
    return m.range or (0.0, max(top, 1e-9))


def _tiles(df: pd.DataFrame, values: pd.Series, scale: list, m: Metric, lo: float,
           hi: float, selected: str | None,
           alerting: dict[str, str]) -> tuple[list[dict], list[str], list[str]]:
    """Per rack: its square (a layout shape), its label and the label's colour. A rack
    with a firing alert gets a thick vermillion outline and a ▲ before its name."""
    scaled = ((values - lo) / (hi - lo)).clip(0, 1)
    shapes, text, text_colours = [], [], []
    half = TILE / 2
    for r, value, share in zip(df.itertuples(index=False), values, scaled, strict=True):
        has_value = not missing(value)
        fill = colour_at(scale, share) if has_value else NO_DATA
        chosen = selected is not None and str(r.rack) == selected
        alert = str(r.rack) in alerting
        line = ({"color": INK, "width": 5 if alert else 3} if chosen else
                {"color": ALERT_LINE, "width": 4} if alert else {"color": "white", "width": 1})
        shapes.append({
            "type": "rect", "xref": "x", "yref": "y", "layer": "below",
            "x0": r.x - half, "x1": r.x + half, "y0": r.y - half, "y1": r.y + half,
            "fillcolor": fill, "name": html.escape(str(r.rack)),
            "line": line,
        })
        label = f"<b>{'▲ ' if alert else ''}{html.escape(str(r.rack))}</b><br>"
        text.append(label + (m.fmt(value) if has_value else "no data"))
        text_colours.append(_text_colour(fill) if has_value else MUTED)
    return shapes, text, text_colours


def _colorbar(m: Metric, metric: str, lo: float, hi: float,
              thresholds_c: tuple[float, float]) -> dict:
    """The colour bar; on the temperature scale its ticks name the alert's steps."""
    bar = {"title": {"text": m.title, "side": "right"}, "thickness": 12,
           "outlinewidth": 0, "len": 0.9}
    if metric == "temp":
        clear, alert = thresholds_c
        ticks = [v for v in range(int(lo), int(hi) + 1, 10) if abs(v - clear) > 3
                 and abs(v - alert) > 3]
        vals = sorted([*ticks, clear, alert])
        bar.update(tickvals=vals, ticktext=[
            f"{v:g} alert" if v == alert else f"{v:g} clear" if v == clear else f"{v:g}"
            for v in vals])
    return bar


def _rack_trace(df: pd.DataFrame, values: pd.Series, scale: list, lo: float, hi: float,
                text: list[str], text_colours: list[str], colorbar: dict,
                alerting: dict[str, str]) -> go.Scatter:
    """The invisible markers that carry labels, hover (customdata[0]: rack) and colour bar."""
    return go.Scatter(
        x=df["x"], y=df["y"], mode="markers+text", text=text,
        textfont={"color": text_colours, "size": 12},
        customdata=_hover_rows(df, alerting),
        hovertemplate=(
            "<b>Rack %{customdata[0]}</b> · zone %{customdata[1]}<br>"
            "Hottest GPU: %{customdata[2]}<br>"
            "Mean utilisation: %{customdata[3]}<br>"
            "Power: %{customdata[4]}<br>"
            "%{customdata[5]}%{customdata[6]}<extra></extra>"
        ),
        marker={
            "symbol": "square", "size": 2, "opacity": 0,
            "color": values.tolist(), "colorscale": scale,
            "cmin": lo, "cmax": hi, "showscale": True, "colorbar": colorbar,
        },
        name="racks", showlegend=False,
    )


def _floor_layout(df: pd.DataFrame, shapes: list[dict]) -> dict:
    """Axes in rack tiles (rows labelled with their zones), y down as on a floor plan."""
    rows = df["y"].max() - df["y"].min() + 1
    axis = {"showgrid": False, "zeroline": False, "ticks": "", "constrain": "domain",
            "title": {"font": {"size": 11, "color": MUTED}}}
    return {
        **base_layout(height=int(min(720, max(280, 140 + 90 * rows))),
                      margin={"l": 96, "r": 24, "t": 40, "b": 40}),
        "shapes": shapes, "uirevision": "floor-map", "clickmode": "event",
        "hovermode": "closest", "hoverdistance": -1,
        "xaxis": {**axis, "title": {**axis["title"], "text": "Floor x (rack tiles)"},
                  "showticklabels": False,
                  "range": [df["x"].min() - 0.6, df["x"].max() + 0.6]},
        "yaxis": {**axis, "title": {**axis["title"], "text": "Floor y (rack tiles)"},
                  **_row_ticks(df), "tickfont": {"size": 11, "color": MUTED},
                  "autorange": "reversed", "scaleanchor": "x", "scaleratio": 1},
    }


def floor_map(
    df: pd.DataFrame,
    *,
    stale_after_s: float = STALE_AFTER_S,
    temp_range_c: tuple[float, float] = TEMP_RANGE_C,
    metric: str = "temp",
    selected: str | None = None,
    alerting: dict[str, str] | None = None,
    thresholds_c: tuple[float, float] = TEMP_THRESHOLDS_C,
) -> go.Figure:
    """The machine-room floor: one square per rack at its (x, y) tile.

    ``df`` is :func:`warehouse.queries.overview.rack_floor`'s frame. Squares are coloured
    by ``metric`` (:data:`FLOOR_METRICS`): the hottest GPU's temperature (°C, trimmed
    Inferno), the mean utilisation (%, Viridis) or the GPU power (kW, Cividis); racks
    without a fresh sample are grey; the ``selected`` rack is outlined. The temperature
    scale steps at ``thresholds_c`` (the alert's clear level and threshold, °C). Racks in
    ``alerting`` (rack -> the severity of its worst firing alert) get a vermillion
    outline, a ▲ and the alert in their hover. Each square is a
    layout shape (so it scales with the figure); one scatter trace carries the labels,
    the hover text (its ``customdata[0]`` is the rack, for click drill-down) and the
    colour bar.
    """
    if df is None or len(df) == 0:
        return empty_figure(
            "No floor layout yet: the topology has no racks. "
            "Load an inventory file or Slurm's topology.conf."
        )
    df = _positions(df.reset_index(drop=True))
    m = FLOOR_METRICS[metric]
    values = df[m.column].astype(float)
    lo, hi = _colour_range(values, metric, temp_range_c)
    alerting = alerting or {}
    scale = temp_colorscale(*thresholds_c, (lo, hi)) if metric == "temp" else m.colorscale
    shapes, text, text_colours = _tiles(df, values, scale, m, lo, hi, selected, alerting)
    # Unvalidated (base.figure): validating one layout shape per rack took most of the
    # callback at 384 racks (issue 17); the shapes are plain dicts made here.
    fig = figure(_rack_trace(df, values, scale, lo, hi, text, text_colours,
                             _colorbar(m, metric, lo, hi, thresholds_c), alerting),
                 layout=_floor_layout(df, shapes))
    if values.isna().all():
        fig.add_annotation(
            text=(
                "No telemetry yet: the collector has not delivered a sample in the last "
                f"{fmt_span(stale_after_s)}"
            ),
            xref="paper", yref="paper", x=0.5, y=1.0, yanchor="bottom",
            showarrow=False, font={"size": 13, "color": MUTED},
        )
    return fig

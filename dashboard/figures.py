"""Pure figure builders: a DataFrame in, a ``plotly.graph_objects.Figure`` out.

No database, no Dash: the same builders draw the live pages and the weekly report.
Scales are colour-blind safe (a trimmed Inferno for temperature); every axis and colour
bar names its unit; a builder given no data returns :func:`empty_figure` saying why.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dashboard.formatting import fmt_kw, fmt_pct, fmt_span, fmt_temp, missing

FONT = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
INK = "#1f2933"
MUTED = "#7b8794"
NO_DATA = "#d9dee4"  # tile fill of a rack without a fresh sample
#: Inferno without its near-black end: perceptually uniform, colour-blind safe.
TEMP_COLORSCALE = [
    [i / 10, colour]
    for i, colour in enumerate(sample_colorscale("Inferno", [0.12 + 0.083 * i for i in range(11)]))
]
TEMP_RANGE_C = (30.0, 90.0)  # colour scale limits, °C
#: Okabe-Ito: eight colours told apart with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")


def _scale(name: str) -> list:
    return [[i / 10, c] for i, c in enumerate(sample_colorscale(name, [i / 10 for i in range(11)]))]


VIRIDIS, CIVIDIS = _scale("Viridis"), _scale("Cividis")


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


def base_layout(**overrides) -> dict:
    """Layout defaults of every gpulens figure (fonts, margins, transparent paper)."""
    layout = {
        "font": {"family": FONT, "color": INK, "size": 13},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "margin": {"l": 56, "r": 24, "t": 16, "b": 48},
        "hoverlabel": {"font": {"family": FONT, "size": 13}, "bgcolor": "white"},
        "modebar": {"bgcolor": "rgba(0,0,0,0)", "color": "#b8c0c8", "activecolor": INK},
    }
    layout.update(overrides)
    return layout


def empty_layout(message: str, *, height: int = 320) -> dict:
    """The layout of a blank figure carrying ``message`` (why there is nothing to draw)."""
    return base_layout(
        height=height, meta={"empty": True}, xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[{
            "text": html.escape(message), "xref": "paper", "yref": "paper", "x": 0.5,
            "y": 0.5, "showarrow": False, "font": {"size": 15, "color": MUTED},
        }],
    )


def empty_figure(message: str, *, height: int = 320) -> go.Figure:
    """A blank figure carrying ``message`` (why there is nothing to draw)."""
    return go.Figure(layout=empty_layout(message, height=height))


def _text_colour(fill: str) -> str:
    r, g, b = (int(v) for v in fill[fill.index("(") + 1 : -1].split(","))
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


def _positions(df: pd.DataFrame) -> pd.DataFrame:
    """Racks without a floor position go in a row below the placed ones, by name."""
    df = df.copy()
    unplaced = df["x"].isna() | df["y"].isna()
    if unplaced.any():
        below = (df.loc[~unplaced, "y"].max() + 1.5) if (~unplaced).any() else 0.0
        df.loc[unplaced, "y"] = below
        df.loc[unplaced, "x"] = range(int(unplaced.sum()))
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


def _hover_rows(df: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in df.itertuples(index=False):
        if missing(r.hottest_temp_c):
            hottest = "no fresh sample"
        else:
            hottest = f"{html.escape(str(r.hottest_node))}/{int(r.hottest_gpu_index)}"
            hottest += f" at {fmt_temp(r.hottest_temp_c)}"
        rows.append(
            [
                html.escape(str(r.rack)),
                html.escape(str(r.zone)) if not missing(r.zone) else "—",
                hottest,
                fmt_pct(r.mean_util_pct),
                fmt_kw(r.power_kw),
                f"{int(r.gpus_reporting)} of {int(r.gpus)} GPUs reporting",
            ]
        )
    return rows


def floor_map(
    df: pd.DataFrame,
    *,
    stale_after_s: float = 120,
    temp_range_c: tuple[float, float] = TEMP_RANGE_C,
    metric: str = "temp",
    selected: str | None = None,
) -> go.Figure:
    """The machine-room floor: one square per rack at its (x, y) tile.

    ``df`` is :func:`warehouse.queries.overview.rack_floor`'s frame. Squares are coloured
    by ``metric`` (:data:`FLOOR_METRICS`): the hottest GPU's temperature (°C, trimmed
    Inferno), the mean utilisation (%, Viridis) or the GPU power (kW, Cividis); racks
    without a fresh sample are grey; the ``selected`` rack is outlined. Each square is a
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
    temps = df[m.column].astype(float)
    if metric == "temp":
        lo, hi = temp_range_c
    else:
        lo, hi = m.range or (0.0, max(float(temps.max()) if temps.notna().any() else 1.0, 1e-9))
    scaled = ((temps - lo) / (hi - lo)).clip(0, 1)
    shapes, text, text_colours = [], [], []
    for i, r in df.iterrows():
        has_temp = not missing(temps[i])
        fill = sample_colorscale(m.colorscale, [scaled[i]])[0] if has_temp else NO_DATA
        half = TILE / 2
        chosen = selected is not None and str(r.rack) == selected
        shapes.append(
            {
                "type": "rect", "xref": "x", "yref": "y", "layer": "below",
                "x0": r.x - half, "x1": r.x + half, "y0": r.y - half, "y1": r.y + half,
                "fillcolor": fill, "name": html.escape(str(r.rack)),
                "line": {"color": INK if chosen else "white", "width": 3 if chosen else 1},
            }
        )
        label = f"<b>{html.escape(str(r.rack))}</b><br>"
        text.append(label + (m.fmt(temps[i]) if has_temp else "no data"))
        text_colours.append(_text_colour(fill) if has_temp else MUTED)
    trace = go.Scatter(
        x=df["x"], y=df["y"], mode="markers+text", text=text,
        textfont={"color": text_colours, "size": 12},
        customdata=_hover_rows(df),
        hovertemplate=(
            "<b>Rack %{customdata[0]}</b> · zone %{customdata[1]}<br>"
            "Hottest GPU: %{customdata[2]}<br>"
            "Mean utilisation: %{customdata[3]}<br>"
            "Power: %{customdata[4]}<br>"
            "%{customdata[5]}<extra></extra>"
        ),
        marker={
            "symbol": "square", "size": 2, "opacity": 0,
            "color": temps.tolist(), "colorscale": m.colorscale,
            "cmin": lo, "cmax": hi, "showscale": True,
            "colorbar": {
                "title": {"text": m.title, "side": "right"},
                "thickness": 12, "outlinewidth": 0, "len": 0.9,
            },
        },
        name="racks", showlegend=False,
    )
    rows = df["y"].max() - df["y"].min() + 1
    fig = go.Figure(trace)
    axis = {"showgrid": False, "zeroline": False, "ticks": "", "constrain": "domain",
            "title": {"font": {"size": 11, "color": MUTED}}}
    fig.update_layout(
        **base_layout(height=int(min(720, max(280, 140 + 90 * rows))),
                      margin={"l": 96, "r": 24, "t": 40, "b": 40}),
        shapes=shapes, uirevision="floor-map", clickmode="event", hovermode="closest",
        hoverdistance=-1,
        xaxis={**axis, "title": {**axis["title"], "text": "Floor x (rack tiles)"},
               "showticklabels": False,
               "range": [df["x"].min() - 0.6, df["x"].max() + 0.6]},
        yaxis={**axis, "title": {**axis["title"], "text": "Floor y (rack tiles)"},
               **_row_ticks(df), "tickfont": {"size": 11, "color": MUTED},
               "autorange": "reversed", "scaleanchor": "x", "scaleratio": 1},
    )
    if temps.isna().all():
        fig.add_annotation(
            text=(
                "No telemetry yet: the collector has not delivered a sample in the last "
                f"{fmt_span(stale_after_s)}"
            ),
            xref="paper", yref="paper", x=0.5, y=1.0, yanchor="bottom",
            showarrow=False, font={"size": 13, "color": MUTED},
        )
    return fig

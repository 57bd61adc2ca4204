"""What every gpulens figure shares: fonts, colour scales, layouts, the empty figure.

Scales are colour-blind safe (Okabe-Ito for categories, a trimmed Inferno for
temperature, Viridis and Cividis for amounts); every axis and colour bar names its unit;
a builder given no data returns :func:`empty_figure` saying why.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

FONT = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
INK = "#1f2933"
MUTED = "#7b8794"
GREY = "#9aa5b1"
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
#: Failure categories (warehouse/failures.py) and their colours, on every page.
CATEGORIES = ("infrastructure", "framework", "script", "scheduler", "unknown")
CATEGORY_COLOURS = dict(zip(CATEGORIES, (PALETTE[5], PALETTE[1], PALETTE[0], PALETTE[3],
                                         GREY), strict=True))
TIME_AXIS = {"title": {"text": "Time (UTC)"}, "showgrid": False}
GRID = {"gridcolor": "#eef1f4", "zeroline": False}


def _scale(name: str) -> list:
    return [[i / 10, c] for i, c in enumerate(sample_colorscale(name, [i / 10 for i in range(11)]))]


VIRIDIS, CIVIDIS = _scale("Viridis"), _scale("Cividis")


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


def chart_layout(height: int = 320, **overrides) -> dict:
    """Layout of a chart: the base layout, a legend on top, hover across series."""
    layout = {"height": height, "hovermode": "x unified",
              "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0,
                         "font": {"size": 12}},
              "margin": {"l": 64, "r": 24, "t": 36, "b": 48}}
    return base_layout(**{**layout, **overrides})


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
    fig.update_layout(**chart_layout(height, uirevision=uirevision), xaxis=TIME_AXIS,
                      yaxis={**GRID, "title": {"text": y_title}, "rangemode": "tozero"})
    return fig

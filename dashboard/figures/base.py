"""What every gpulens figure shares: fonts, colour scales, layouts, the empty figure.

Scales are colour-blind safe (Okabe-Ito for categories, a trimmed Inferno for
temperature, Viridis and Cividis for amounts); every axis and colour bar names its unit;
a builder given no data returns :func:`empty_figure` saying why.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

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


def _inferno(x: float) -> str:
    return sample_colorscale("Inferno", [x])[0]


def temp_colorscale(clear_c: float, alert_c: float,
                    temp_range_c: tuple[float, float] = TEMP_RANGE_C) -> list:
    """The temperature scale with steps at the alert's clear level and threshold (°C):
    trimmed Inferno up to ``clear_c``, an orange band up to ``alert_c``, pale yellow
    above, so 85 °C and 88 °C (either side of an 87 °C threshold) never look alike."""
    lo, hi = temp_range_c

    def pos(t: float) -> float:
        return min(1.0, max(0.0, (t - lo) / (hi - lo)))

    return [[0.0, _inferno(0.12)], [pos(clear_c), _inferno(0.62)],
            [pos(clear_c), _inferno(0.72)], [pos(alert_c), _inferno(0.80)],
            [pos(alert_c), _inferno(0.93)], [1.0, _inferno(0.99)]]


def colour_at(scale: list, frac: float) -> str:
    """The colour of ``scale`` at ``frac`` (0..1), linear between stops; at a step (two
    stops at one position) the upper colour."""
    frac = min(1.0, max(0.0, float(frac)))
    below = scale[0]
    for stop in scale:
        if stop[0] > frac:
            span = stop[0] - below[0]
            w = 0.0 if span <= 0 else (frac - below[0]) / span
            return _mix(below[1], stop[1], w)
        below = stop
    return below[1]


def _rgb(colour: str) -> tuple[float, ...]:
    if colour.startswith("#"):
        return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(float(v) for v in colour[colour.index("(") + 1:-1].split(","))


def _mix(a: str, b: str, w: float) -> str:
    ra, rb = _rgb(a), _rgb(b)
    r, g, bl = (round(x + (y - x) * w) for x, y in zip(ra, rb, strict=True))
    return f"rgb({r}, {g}, {bl})"
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


def figure(data=None, **kwargs) -> go.Figure:
    """A plotly figure that skips plotly's validation of its layout and later updates
    (issue 17: validating a chart's layout cost ~25 ms of CPU, the floor map's 384 rack
    shapes ~0.4 s, in callbacks with a 300-ms target). Traces made with ``go.Bar``,
    ``go.Scatter``... are validated as before; tests/test_figures.py checks that
    validating each builder's figure again gives the same figure."""
    return go.Figure(data, _validate=False, **kwargs)


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
              "margin": {"l": 64, "r": 40, "t": 36, "b": 48}}
    layout = base_layout(**{**layout, **overrides})
    if layout.get("showlegend", True):  # a vertical toolbar at the right edge stays
        layout["modebar"] = {**layout["modebar"], "orientation": "v"}  # clear of the legend
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
    return figure(layout=empty_layout(message, height=height))


def lines(df: pd.DataFrame | None, x: str, series: Sequence[tuple[str, str]], *,
          y_title: str, empty: str, height: int = 320, colours: Sequence[str] = PALETTE,
          dashes: dict[str, str] | None = None, uirevision: str = "lines") -> go.Figure:
    """One line per ``(column, label)`` of ``series`` over ``x`` (time). Built from
    plain traces and layout, unvalidated (:func:`figure`; issue 17: plotly's
    ``add_trace`` and ``update_layout`` took ~10-25 ms of a callback's 300 ms);
    tests/test_figures.py checks that validation gives the same JSON."""
    if df is None or len(df) == 0:
        return empty_figure(empty, height=height)
    xs = df[x].to_numpy()
    data = [{"type": "scatter", "x": xs, "y": df[col].to_numpy(), "name": label,
             "mode": "lines",
             "line": {"color": colour, "width": 2, "dash": (dashes or {}).get(col, "solid")},
             "hovertemplate": "%{y:,.1f}"}
            for (col, label), colour in zip(series, colours, strict=False)]
    return figure(data, layout={
        **chart_layout(height, uirevision=uirevision), "xaxis": TIME_AXIS,
        "yaxis": {**GRID, "title": {"text": y_title}, "rangemode": "tozero"}})


def mark_partial(fig: go.Figure, ts: Sequence, *, start: datetime | None,
                 end: datetime | None, bucket: timedelta) -> list:
    """Shade and label the buckets (starting at ``ts``, ``bucket`` long) that are not
    wholly inside ``[start, end)``: the hour or day still filling at the end of a window
    and the one cut at its start. Their totals are partial, not a collapse. Returns the
    partial buckets' starts. The shade and its label are the shape and annotation that
    plotly's ``add_vrect`` makes on a figure of one x and y axis (both callers' figures),
    given as plain dicts (issue 17: ``add_vrect`` cost ~7 ms of CPU a bucket;
    tests/test_figures.py checks they are the same)."""
    if start is None or end is None or len(ts) == 0:
        return []
    stamps = sorted(pd.to_datetime(pd.Series(list(ts))).dropna().unique())
    if not stamps:
        return []
    partial = sorted(t for t in {stamps[0], stamps[-1]}
                     if t < pd.Timestamp(start) or t + bucket > pd.Timestamp(end))
    shapes, notes = [], []
    for t in partial:
        right = min(t + bucket, pd.Timestamp(end))
        shapes.append({"type": "rect", "xref": "x", "yref": "y domain", "x0": t,
                       "x1": right if right > t else t + bucket, "y0": 0, "y1": 1,
                       "fillcolor": GREY, "opacity": 0.15, "line": {"width": 0},
                       "layer": "below"})
        notes.append({"text": "partial", "showarrow": False, "x": t, "xref": "x",
                      "xanchor": "left", "y": 1, "yref": "y domain", "yanchor": "top",
                      "font": {"size": 11, "color": MUTED}})
    if partial:
        fig.layout.shapes = (*fig.layout.shapes, *shapes)
        fig.layout.annotations = (*fig.layout.annotations, *notes)
    return partial


def round_axis(values, *, ticks: int = 5) -> dict:
    """Axis settings with round ticks from 0 (1, 2, 2.5 or 5 x a power of ten) covering
    ``values``: PUE reads 0, 0.25, 0.5.., emissions 0, 50, 100.., never 0.265 or 52.7."""
    finite = [float(v) for v in values if v is not None and not pd.isna(v)]
    top = max(finite, default=0.0)
    if top <= 0:
        return {"rangemode": "tozero"}
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return {"tick0": 0, "dtick": step, "range": [0, math.ceil(top / step) * step * 1.02]}


def detach_partial(fig: go.Figure, partial: list) -> None:
    """Lines stop at the whole buckets; a partial bucket's values (``partial``: bucket
    starts from :func:`mark_partial`) become hollow markers of the line's colour, so a
    half-filled hour reads as partial, not as a drop to a fraction. Bars in a partial
    bucket are drawn pale."""
    if not partial:
        return
    cut = {pd.Timestamp(t) for t in partial}
    for trace in list(fig.data):
        xs = [pd.Timestamp(x) for x in trace.x]
        hit = [x in cut for x in xs]
        if not any(hit):
            continue
        if trace.type == "bar":
            trace.marker.opacity = [0.35 if h else 1.0 for h in hit]
            continue
        ys = list(trace.y)
        fig.add_trace(go.Scatter(
            x=[x for x, h in zip(xs, hit, strict=True) if h],
            y=[y for y, h in zip(ys, hit, strict=True) if h], mode="markers",
            name=f"{trace.name} (partial)", showlegend=False, yaxis=trace.yaxis,
            marker={"symbol": "circle-open", "size": 8, "color": trace.line.color},
            hovertemplate="%{y:,.1f} (partial bucket)"))
        trace.y = [None if h else y for y, h in zip(ys, hit, strict=True)]

"""Overview (``/``): headline figures and the rack floor map, refreshed live.

The layout is a skeleton with placeholders; two callbacks on the page's
``dcc.Interval`` fill in the numbers and the figure, so a refresh updates values only
(no layout rebuild, no flicker) and the map keeps its zoom (``uirevision``).
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import context, figures, ids
from dashboard.formatting import fmt_span, fmt_time, headline_texts
from warehouse.queries import overview

dash.register_page(
    __name__, path="/", name="Overview", order=0,
    title=lambda **_: context.page_title("Overview"),
    description="GPU fleet at a glance: allocation, utilisation, power, failures, heat.",
)

STALE_AFTER_S = 120  # a GPU without a sample this recent counts as not reporting
CHECKPOINT_INTERVAL_H = 2.0  # assumed checkpoint interval of the lost-hours model

CARDS = {  # key -> (title, unit hint shown on hover)
    "gpus": ("GPUs", "Installed GPUs in the topology"),
    "allocated": ("Allocated now", "Share of GPUs allocated to a running job, %"),
    "util": ("Utilisation", "Mean GPU utilisation of allocated GPUs, %"),
    "power": ("Power now", "Sum of each GPU's latest power sample, kW"),
    "lost": ("Lost this week", "GPU-hours lost to failed runs since Monday 00:00 UTC"),
    "alerts": ("Active alerts", "Alerting arrives in a later release"),
}


def _card(key: str) -> html.Div:
    title, hint = CARDS[key]
    return html.Div(
        [
            html.Div(title, className="card-title"),
            html.Div("—", id=ids.card_value(key), className="card-value"),
            html.Div("\u00a0", id=ids.card_note(key), className="card-note"),
        ],
        className="card" + (" card-muted" if key == "alerts" else ""),
        title=hint,
    )


def layout(**query) -> html.Div:
    """The page skeleton; values arrive from the callbacks (no data read here)."""
    return html.Div(
        [
            html.Div(
                [
                    html.H1("Overview"),
                    html.Span("Loading…", id=ids.OVERVIEW_UPDATED, className="updated"),
                ],
                className="page-header",
            ),
            html.Div([_card(key) for key in ids.OVERVIEW_CARDS], className="cards"),
            html.Section(
                [
                    html.Div(
                        [
                            html.H2("Machine-room floor"),
                            html.P(
                                "One square per rack, coloured by its hottest GPU (°C) "
                                f"in the last {fmt_span(STALE_AFTER_S)}. Hover for "
                                "utilisation and power.",
                                className="panel-sub",
                            ),
                        ],
                        className="panel-header",
                    ),
                    dcc.Graph(
                        id=ids.OVERVIEW_FLOOR_MAP,
                        figure=figures.empty_figure("Loading the floor map…"),
                        config={"displaylogo": False, "responsive": True,
                                "modeBarButtonsToRemove": ["select2d", "lasso2d"]},
                    ),
                ],
                className="panel",
            ),
            dcc.Interval(id=ids.OVERVIEW_REFRESH, interval=context.refresh_ms()),
        ],
        className="page",
    )


_CARD_OUTPUTS = [
    out
    for key in ids.OVERVIEW_CARDS
    for out in (Output(ids.card_value(key), "children"), Output(ids.card_note(key), "children"))
]


@callback(
    *_CARD_OUTPUTS,
    Output(ids.OVERVIEW_UPDATED, "children"),
    Input(ids.OVERVIEW_REFRESH, "n_intervals"),
)
def update_headline(_n_intervals):
    """Headline cards: values and notes (text), then the "updated" line."""
    now = context.now()
    h = overview.headline(
        context.reader(), now=now, week_start=overview.iso_week_start(now),
        checkpoint_interval_h=CHECKPOINT_INTERVAL_H, stale_after_s=STALE_AFTER_S,
    )
    texts = headline_texts(h)
    flat = [text for key in ids.OVERVIEW_CARDS for text in texts[key]]
    return *flat, f"Updated {fmt_time(now)} · latest sample {fmt_time(h['latest_sample_ts'])}"


@callback(
    Output(ids.OVERVIEW_FLOOR_MAP, "figure"),
    Input(ids.OVERVIEW_REFRESH, "n_intervals"),
)
def update_floor_map(_n_intervals):
    """The floor map figure from each rack's latest samples."""
    df = overview.rack_floor(context.reader(), now=context.now(), stale_after_s=STALE_AFTER_S)
    return figures.floor_map(df, stale_after_s=STALE_AFTER_S)

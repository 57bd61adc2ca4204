"""Overview (``/``): headline figures, the rack floor map with drill-down, active alerts.

The layout is a skeleton with placeholders; callbacks on the page's ``dcc.Interval``
fill in the numbers and the figures, so a refresh updates values only (no layout
rebuild, no flicker) and the map keeps its zoom (``uirevision``). A click on a rack
selects it in the URL (``?rack=r03``) and opens the drill-down panel.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, html, no_update

from dashboard import components, context, drilldown, ids
from dashboard.alerts_view import (
    ALERT_COLUMNS,
    alert_card_texts,
    firing_racks,
    order_alerts,
)
from dashboard.figures import overview as fig
from dashboard.filters import from_query
from dashboard.formatting import fmt_int, fmt_span, fmt_time, headline_texts
from warehouse.queries import alerts, overview, utilisation
from warehouse.queries.fleet import STALE_AFTER_S

dash.register_page(
    __name__, path="/", name="Overview", order=0,
    title=lambda **_: context.page_title("Overview"),
    description="GPU fleet at a glance: allocation, utilisation, power, failures, heat.",
)

HEADLINE_CARDS = ("gpus", "allocated", "util", "power", "lost")  # from overview.headline

CARDS = {  # key -> (title, unit hint shown on hover)
    "gpus": ("GPUs", "Installed GPUs in the topology"),
    "allocated": ("Allocated now", "Share of GPUs allocated to a running job, %"),
    "util": ("Utilisation", "Mean GPU utilisation of allocated GPUs, %"),
    "power": ("Power now", "Sum of each GPU's latest power sample, kW"),
    "lost": ("Lost this week", "GPU-hours lost to failed runs since Monday 00:00 UTC"),
    "energy": ("Energy, week", "GPU energy since Monday 00:00 UTC, kWh"),
    "alerts": ("Active alerts", "Firing and pending alerts"),
}


def _card(key: str) -> html.Div:
    title, hint = CARDS[key]
    return html.Div(
        [
            html.Div(title, className="card-title"),
            html.Div("—", id=ids.card_value(key), className="card-value"),
            html.Div("\u00a0", id=ids.card_note(key), className="card-note"),
        ],
        className="card", title=hint,
    )


def layout(**query) -> html.Div:
    """The page skeleton; values arrive from the callbacks (no data read here)."""
    f = from_query(query)
    return components.page(
        "overview", "Overview", f,
        html.Div([_card(key) for key in ids.OVERVIEW_CARDS], className="cards"),
        components.panel(
            "Machine-room floor",
            f"One square per rack, coloured by its hottest GPU, mean utilisation or power "
            f"in the last {fmt_span(STALE_AFTER_S)}. Click a rack to see its nodes and GPUs.",
            components.graph(ids.OVERVIEW_FLOOR_MAP, "Loading the floor map…"),
            extra=drilldown.metric_picker(),
        ),
        drilldown.panel(f),
        components.panel("Active alerts", "Firing and pending alerts per rack, the most severe "
                         "first.",
                         html.Div(components.empty("Loading…"), id=ids.OVERVIEW_ALERTS)),
        filters=(),
    )


_CARD_OUTPUTS = [
    out
    for key in HEADLINE_CARDS
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
        stale_after_s=STALE_AFTER_S,
    )
    texts = headline_texts(h)
    flat = [text for key in HEADLINE_CARDS for text in texts[key]]
    return *flat, f"Updated {fmt_time(now)} · latest sample {fmt_time(h['latest_sample_ts'])}"


@callback(
    Output(ids.card_value("energy"), "children"),
    Output(ids.card_note("energy"), "children"),
    Input(ids.OVERVIEW_REFRESH, "n_intervals"),
)
def update_energy(_n_intervals):
    """GPU energy since Monday 00:00 UTC, from the rollups."""
    now = context.now()
    week = overview.iso_week_start(now)
    kwh = utilisation.fleet_energy_kwh(context.reader(), start=week, end=now)
    if not kwh:
        return "—", "No telemetry rolled up this week yet"
    return f"{fmt_int(kwh)} kWh", f"GPUs only, since {week:%a %d %b} 00:00 UTC"


@callback(
    Output(ids.card_value("alerts"), "children"),
    Output(ids.card_note("alerts"), "children"),
    Output(ids.OVERVIEW_ALERTS, "children"),
    Input(ids.OVERVIEW_REFRESH, "n_intervals"),
)
def update_alerts(_n_intervals):
    """Active alerts: the count card and the list (text cells)."""
    df = alerts.list_alerts(context.reader(), now=context.now(),
                            states=("pending", "firing"), limit=50)
    value, note = alert_card_texts(df)
    return value, note, components.table(
        order_alerts(df), ALERT_COLUMNS, empty_message="No active alerts: every rack is within its "
        "thresholds.", table_id=ids.OVERVIEW_ALERTS + "-table")


@callback(
    Output(ids.OVERVIEW_FLOOR_MAP, "figure"),
    Input(ids.OVERVIEW_REFRESH, "n_intervals"),
    Input(ids.FLOOR_METRIC, "value"),
    State(ids.FILTERS, "data"),
)
def update_floor_map(_n_intervals, metric="temp", data=None):
    """The floor map figure from each rack's latest samples."""
    df = overview.rack_floor(context.reader(), now=context.now(), stale_after_s=STALE_AFTER_S)
    firing = firing_racks(overview.firing_by_rack(context.reader()))
    return fig.floor_map(df, stale_after_s=STALE_AFTER_S, metric=metric or "temp",
                         selected=from_query(data).rack, alerting=firing)


@callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.OVERVIEW_FLOOR_MAP, "clickData"),
    State(ids.FILTERS, "data"),
    prevent_initial_call=True,
)
def select_rack(click, data):
    """A click on a rack drills into it (the URL gains ``?rack=``)."""
    return drilldown.search_for_rack_click(click, data) or no_update

"""Thermal (``/thermal``): is a rack overheating right now, and what did heat cost?

The live floor map with drill-down, per-rack temperature distributions, throttling over
time, XID/ECC/throttle events, the active alerts with acknowledge and silence (buttons
for operators only), and the rule tuner (dashboard/pages/thermal_tuner.py).
"""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, callback, ctx, html, no_update

from dashboard import alerts_view, auth, components, context, drilldown, ids
from dashboard.components import Column, num
from dashboard.figures import overview as floor_fig
from dashboard.figures import thermal as fig
from dashboard.filters import from_query
from dashboard.formatting import fmt_span, fmt_time
from dashboard.pages import thermal_tuner
from warehouse.queries import alerts, overview, thermal
from warehouse.queries.fleet import STALE_AFTER_S

dash.register_page(
    __name__, path="/thermal", name="Thermal", order=5,
    title=lambda **_: context.page_title("Thermal"),
    description="Live floor map, rack temperatures, throttling, XIDs and alerts.",
)


thermal_tuner.register()  # its callbacks, each time Dash loads this page


EVENT_COLUMNS = (
    Column("ts", "Time", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    Column("rack", "Rack"), Column("node", "Node"),
    num("gpu_index", "GPU"),
    Column("kind", "Kind"), Column("code", "Code", lambda v: str(int(v)) if v else "—"),
    Column("detail", "Detail"),
)


def layout(**query) -> html.Div:
    f = from_query(query)
    return components.page(
        "thermal", "Thermal", f,
        components.panel(
            "Live floor map",
            f"Latest samples of the last {fmt_span(STALE_AFTER_S)}. Click a rack to see "
            "its nodes; click a GPU to see its node's jobs.",
            components.graph(ids.THERMAL_FLOOR, "Loading the floor map…"),
            extra=drilldown.metric_picker()),
        drilldown.panel(f),
        components.panel(
            "Alerts", "Firing and pending alerts. Acknowledge to tell the team you are on "
            "it; silence to stop notifications for an hour.",
            html.Div(id=ids.THERMAL_ALERT_MSG, className="panel-sub"),
            html.Div(components.empty("Loading…"), id=ids.THERMAL_ALERTS)),
        components.grid(
            components.panel("Rack temperatures", "Distribution of each GPU's hottest "
                             "reading per rollup bucket.",
                             components.graph(ids.THERMAL_RACK_TEMPS), wide=False),
            components.panel("Throttling", "Share of GPU time throttled, and the hottest "
                             "GPU.", components.graph(ids.THERMAL_THROTTLE), wide=False),
        ),
        components.panel("XID, ECC and throttle events", "Most recent first.",
                         html.Div(components.empty("Loading…"), id=ids.THERMAL_EVENTS)),
        thermal_tuner.panel(),
    )


@callback(
    Output(ids.THERMAL_FLOOR, "figure"),
    Output(ids.updated("thermal"), "children"),
    Input(ids.refresh("thermal"), "n_intervals"),
    Input(ids.FLOOR_METRIC, "value"),
    State(ids.FILTERS, "data"),
)
def update_floor_map(_n, metric="temp", data=None):
    now = context.now()
    df = overview.rack_floor(context.reader(), now=now, stale_after_s=STALE_AFTER_S)
    firing = alerts_view.firing_racks(overview.firing_by_rack(context.reader()))
    floor = floor_fig.floor_map(df, stale_after_s=STALE_AFTER_S, metric=metric or "temp",
                                selected=from_query(data).rack, alerting=firing)
    return floor, f"{from_query(data).label} · updated {fmt_time(now)}"


@callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.THERMAL_FLOOR, "clickData"),
    State(ids.FILTERS, "data"),
    prevent_initial_call=True,
)
def select_rack(click, data):
    return drilldown.search_for_rack_click(click, data) or no_update


@callback(
    Output(ids.THERMAL_RACK_TEMPS, "figure"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("thermal"), "n_intervals"),
)
def update_rack_temperatures(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = thermal.rack_temperatures(context.reader(), start=start, end=end,
                                   partition=f.partition, rack=f.rack)
    return fig.rack_temperature_boxes(df)


@callback(
    Output(ids.THERMAL_THROTTLE, "figure"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("thermal"), "n_intervals"),
)
def update_throttling(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = thermal.throttling(context.reader(), start=start, end=end,
                            partition=f.partition, rack=f.rack)
    return fig.throttling_over_time(df)


@callback(
    Output(ids.THERMAL_EVENTS, "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("thermal"), "n_intervals"),
)
def update_events(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = thermal.events(context.reader(), start=start, end=end, partition=f.partition,
                        rack=f.rack, limit=100)
    return components.table(df, EVENT_COLUMNS, table_id=ids.THERMAL_EVENTS + "-table",
                            empty_message=f"No GPU events in the {f.label.lower()}.")


@callback(
    Output(ids.THERMAL_ALERTS, "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("thermal"), "n_intervals"),
    Input(ids.THERMAL_ALERT_MSG, "children"),
)
def update_alerts(data, _n=None, _msg=None):
    f = from_query(data)
    df = alerts.list_alerts(context.reader(), now=context.now(),
                            states=("pending", "firing"), rack=f.rack, limit=100)
    return alerts_view.actionable_list(df, actions=auth.can_operate())


@callback(
    Output(ids.THERMAL_ALERT_MSG, "children"),
    Input({"type": ids.ALERT_ACK, "alert": ALL}, "n_clicks"),
    Input({"type": ids.ALERT_SILENCE, "alert": ALL}, "n_clicks"),
    prevent_initial_call=True,
)
def act_on_alert(_acks, _silences):
    """Acknowledge or silence the alert whose button was clicked."""
    trigger = ctx.triggered_id
    if not trigger or not any(t.get("value") for t in ctx.triggered):
        return no_update
    if not auth.can_operate():  # viewers read; operators act (issue #13)
        return f"{auth.current_user()} is a viewer: acknowledging and silencing need the " \
               "operator role."
    alert = alerts.get_alert(context.reader(), str(trigger["alert"]))
    if alert is None:
        return "That alert no longer exists."
    who, now = auth.current_user() or "dashboard", context.now()
    if trigger["type"] == ids.ALERT_ACK:
        alerts_view.acknowledge(context.warehouse(), alert["alert_id"], by=who, now=now)
        return f"Acknowledged {alert['rule']} on {alert.get('rack') or alert.get('node')}."
    alerts_view.silence(context.warehouse(), alert, by=who, now=now)
    until = now + alerts_view.SILENCE_FOR
    return (f"Silenced {alert['rule']} on {alert.get('rack') or alert.get('node')} "
            f"until {until:%H:%M} UTC.")

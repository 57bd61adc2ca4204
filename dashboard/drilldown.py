"""Drill-down by clicking: floor map rack -> its nodes x GPUs -> a node's GPUs -> the job.

The level lives in the URL (``?rack=r03&node=n05``, see :mod:`dashboard.filters`), so a
link reproduces it and the browser's Back button climbs back up. Pages with a floor map
(Overview, Thermal) add :func:`panel` under it and send the map's clicks through
:func:`search_for_rack_click`; :func:`register` adds, once per app, the callbacks that
draw the panel and turn a click on a GPU cell into the node level. A GPU's job links to
``/jobs/<id>``.
"""

from __future__ import annotations

import pandas as pd
from dash import dcc, html

from dashboard import context, ids
from dashboard.components import Column, graph, job_href, node_href, num, table
from dashboard.filters import Filters, from_query
from dashboard.formatting import missing
from warehouse.queries.fleet import STALE_AFTER_S

NODE_COLUMNS = (
    num("gpu_index", "GPU"),
    Column("model", "Model"),
    num("temp_c", "Temperature", 0, "°C"),
    num("util_pct", "Utilisation", 1, "%"),
    num("power_w", "Power", 0, "W"),
    num("mem_used_gib", "Memory used", 1, "GiB"),
    Column("job_id", "Job", href=job_href),
    Column("name", "Job name"),
    Column("user_name", "User"),
)


def gpu_table(df: pd.DataFrame, node: str, *, table_id: str, empty_message: str) -> html.Div:
    """A node's GPUs (``topology.gpus_now`` rows) with their latest sample and job."""
    rows = df[df["node"] == node]
    rows = rows.assign(mem_used_gib=rows["mem_used_mib"] / 1024)
    return table(rows, NODE_COLUMNS, table_id=table_id, empty_message=empty_message)


def metric_picker(value: str = "temp") -> dcc.RadioItems:
    """Colour the floor map (and the rack's GPUs) by temperature, utilisation or power."""
    return dcc.RadioItems(
        id=ids.FLOOR_METRIC, value=value, inline=True, className="segmented",
        options=[{"label": "Hottest GPU", "value": "temp"},
                 {"label": "Utilisation", "value": "util"},
                 {"label": "Power", "value": "power"}],
    )


def panel(f: Filters) -> html.Section:
    """The drill-down panel below a floor map; empty until a rack is chosen."""
    return html.Section(
        [html.Div(id=ids.DRILL_CRUMBS, className="crumbs"),
         html.Div(graph(ids.DRILL_RACK, "Click a rack on the floor map to see its nodes.",
                        height=220), id=ids.DRILL_RACK + "-wrap"),
         html.Div(id=ids.DRILL_NODE),
         dcc.Interval(id=ids.DRILL_RACK + "-refresh", interval=context.refresh_ms())],
        className="panel panel-wide drill",
    )


def search_for_rack_click(click: dict | None, data: dict | None) -> str | None:
    """The query string selecting the clicked rack (None if the click is not on a rack)."""
    point = ((click or {}).get("points") or [{}])[0]
    custom = point.get("customdata")
    if not custom:
        return None
    f = from_query(data)
    return f.drill(rack=str(custom[0]), node=None).query_string()


def crumbs(f: Filters) -> list:
    """``Fleet › r03 › n05`` with links to the levels above."""
    parts = [dcc.Link("Fleet", href=f.drill(node=None).with_(rack=None).query_string() or "?")]
    if f.rack:
        parts += [" › ", dcc.Link(f"Rack {f.rack}", href=f.drill(node=None).query_string())
                  if f.node else html.B(f"Rack {f.rack}")]
    if f.node:
        parts += [" › ", html.B(f"Node {f.node}")]
    if not f.rack:
        parts.append(html.Span(" · click a rack on the floor map", className="panel-sub"))
    return parts


def register(app) -> None:
    """Callbacks of the drill-down panel (its ids are shared by the pages using it)."""
    from dash import Input, Output, State, no_update

    from dashboard.figures import drilldown as figs
    from warehouse.queries import topology

    @app.callback(
        Output(ids.DRILL_CRUMBS, "children"),
        Output(ids.DRILL_RACK, "figure"),
        Output(ids.DRILL_RACK + "-wrap", "style"),
        Output(ids.DRILL_NODE, "children"),
        Input(ids.FILTERS, "data"),
        Input(ids.FLOOR_METRIC, "value"),
        Input(ids.DRILL_RACK + "-refresh", "n_intervals"),
    )
    def drill_view(data, metric, _n):
        """The rack's nodes x GPUs, and the selected node's GPUs with their jobs."""
        f = from_query(data)
        if not f.rack:
            return crumbs(f), no_update, {"display": "none"}, None
        df = topology.gpus_now(context.reader(), now=context.now(), rack=f.rack,
                               stale_after_s=STALE_AFTER_S)
        fig = figs.rack_gpus(df, rack=f.rack, metric=metric or "temp")
        node_view = None
        if f.node:
            node_view = html.Div([
                html.H3([f"GPUs of node {f.node} · ",
                         dcc.Link("node page: jobs, events, alerts",
                                  href=node_href({"node": f.node}) or "/node")]),
                gpu_table(df, f.node, table_id=ids.DRILL_NODE + "-table",
                          empty_message=f"Node {f.node} is not in rack {f.rack}."),
            ])
        return crumbs(f), fig, {}, node_view

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.DRILL_RACK, "clickData"),
        State(ids.FILTERS, "data"),
        prevent_initial_call=True,
    )
    def drill_to_node(click, data):
        """A click on a GPU cell opens its node (the cell's row label)."""
        return search_for_node_click(click, data) or no_update


def search_for_node_click(click: dict | None, data: dict | None) -> str | None:
    """The query string opening the node of a clicked GPU cell (None if not on a cell).

    Dash hands a heat map click over with the cell's ``y`` (the row label, escaped by
    the figure builder), not its customdata.
    """
    import html as html_lib

    point = ((click or {}).get("points") or [{}])[0]
    node = point.get("y")
    if node is None or missing(node):
        return None
    return from_query(data).drill(node=html_lib.unescape(str(node))).query_string()

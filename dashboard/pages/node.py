"""Node (``/node?node=n012``): one node's GPUs, the job runs that held them, its events
and alerts, so no name on another page is a dead end.

Linked from the drill-down, the alert lists and the event tables; not in the bar (it
is a page of one thing). The range of the URL (``range=7d``, ``week=...``) bounds the
runs and events; its GPUs show their latest sample.
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, drilldown, ids
from dashboard.alerts_view import ALERT_COLUMNS, order_alerts
from dashboard.components import Column, job_href, num
from dashboard.filters import from_query
from dashboard.formatting import fmt_int, fmt_time
from warehouse.queries import node as nq
from warehouse.queries import topology

dash.register_page(
    __name__, path="/node", name="Node", order=9, nav=False,
    title=lambda node=None, **_: context.page_title(f"Node {node or ''}".strip()),
    description="A node's GPUs, the jobs on them, its events and alerts.",
)

RUN_COLUMNS = (
    Column("job_id", "Job", href=job_href),
    num("run_index", "Run"),
    Column("name", "Name"),
    Column("user_name", "User"),
    Column("state", "State"),
    Column("gpu_indices", "GPUs of this node"),
    Column("start_ts", "Started", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    Column("end_ts", "Ended", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    num("hours", "Hours here", 1, "h"),
)
EVENT_COLUMNS = (
    Column("ts", "Time", lambda v: f"{v:%a %d %b %H:%M:%S} UTC"),
    num("gpu_index", "GPU"),
    Column("kind", "Kind"),
    Column("code", "Code", lambda v: str(int(v)) if v else "—"),
    Column("detail", "Detail"),
)


def layout(node: str | None = None, **query) -> html.Div:
    f = from_query(query)
    node = str(node or "").strip()[:128]
    return components.page(
        "node", f"Node {node}" if node else "Node", f,
        dcc.Store(id=ids.NODE_NAME, data=node),
        html.Div(components.empty("Loading…"), id=ids.NODE_SUMMARY),
        components.panel("GPUs", "Latest sample of each GPU and the job holding it.",
                         html.Div(id=ids.NODE_GPUS)),
        components.panel("Alerts", "On this node, and rack-wide alerts of its rack, in the "
                         "last 24 hours; the most severe first.",
                         html.Div(id=ids.NODE_ALERTS)),
        components.panel("Job runs", "Runs that held GPUs of this node in the range.",
                         html.Div(id=ids.NODE_RUNS)),
        components.panel("XID, ECC and throttle events", "Most recent first.",
                         html.Div(id=ids.NODE_EVENTS)),
        filters=("range",),
    )


def summary(info: dict | None, node: str, gpus_reporting: int) -> html.Div:
    """Cards: rack (a link to its drill-down), partition, GPUs reporting."""
    if info is None:
        return components.empty(f"No node {node!r} in the topology: check the name, or "
                                "load the inventory (topology) first.")
    rack = info.get("rack")
    return html.Div([
        components.cards([
            ("Rack", str(rack or "—"), "its floor map: Thermal"),
            ("Partition", str(info.get("partition") or "—"), "Slurm partition"),
            ("GPUs", fmt_int(info.get("gpus")),
             f"{fmt_int(gpus_reporting)} reporting now"),
        ]),
        dcc.Link(f"Rack {rack} on the Thermal page", href=f"/thermal?rack={rack}",
                 className="page-link")
        if rack else None,
    ])


@callback(
    Output(ids.NODE_SUMMARY, "children"),
    Output(ids.NODE_GPUS, "children"),
    Output(ids.NODE_ALERTS, "children"),
    Output(ids.NODE_RUNS, "children"),
    Output(ids.NODE_EVENTS, "children"),
    Output(ids.updated("node"), "children"),
    Input(ids.NODE_NAME, "data"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("node"), "n_intervals"),
)
def update_node(node, data, _n=None):
    """Every panel of the node from five bounded queries."""
    f = from_query(data)
    now = context.now()
    start, end = f.window(now)
    cur = context.reader()
    info = nq.node_info(cur, node) if node else None
    if info is None:
        missing = summary(None, node or "", 0)
        return missing, None, None, None, None, fmt_time(now)
    gpus = topology.gpus_now(context.reader(), now=now, node=node,
                             stale_after_s=drilldown.STALE_AFTER_S)
    reporting = int(gpus["sample_ts"].notna().sum()) if len(gpus) else 0
    alerts = order_alerts(nq.alerts(context.reader(), node, rack=info.get("rack"), now=now))
    runs = nq.runs(context.reader(), node, start=start, end=end, now=now)
    events = nq.events(context.reader(), node, start=start, end=end)
    return (
        summary(info, node, reporting),
        drilldown.gpu_table(gpus, node, table_id=ids.NODE_GPUS + "-table",
                            empty_message=f"Node {node} has no GPUs in the topology."),
        components.table(alerts, ALERT_COLUMNS, table_id=ids.NODE_ALERTS + "-table",
                         empty_message="No alert on this node in the last 24 hours."),
        components.table(runs, RUN_COLUMNS, table_id=ids.NODE_RUNS + "-table",
                         empty_message=f"No job held a GPU of {node} in the "
                         f"{f.label.lower()}."),
        components.table(events, EVENT_COLUMNS, table_id=ids.NODE_EVENTS + "-table",
                         empty_message=f"No GPU events on {node} in the {f.label.lower()}."),
        f"{f.label} · updated {fmt_time(now)}",
    )

"""Failures (``/failures``): what fails, where, why, and is heat behind it?

Heat maps of failed runs by rack x day and category x week, GPU-hours lost by reason,
XIDs, lemon nodes with their evidence, and failures against temperature. Reads the
classified ``failures`` table through ``warehouse.queries.failures`` (analytics).
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.components import Column, node_href, num
from dashboard.figures import failures as fig
from dashboard.figures.base import CATEGORIES
from dashboard.filters import from_query
from dashboard.formatting import fmt_time
from warehouse.queries import failures as fq
from warehouse.queries import thermal

dash.register_page(
    __name__, path="/failures", name="Failures", order=2,
    title=lambda **_: context.page_title("Failures"),
    description="Failures by rack, day, category and reason; XIDs; lemon nodes.",
)

LEMON_COLUMNS = (
    Column("node", "Node", href=node_href), Column("rack", "Rack"),
    num("infra_failures", "Infra failures"),
    num("expected_failures", "Expected", 2),
    Column("p_value", "p-value", lambda v: f"{v:.2g}", numeric=True),
    num("xids", "XIDs"),
    Column("xid_codes", "XID codes", lambda v: ", ".join(str(int(c)) for c in v)),
    Column("reasons", "Reasons", lambda v: "; ".join(str(r) for r in v)),
    num("gpu_hours_lost", "Lost", 1, "GPU·h"),
    Column("lemon", "Lemon", lambda v: "yes" if v else "not yet"),
)


def category_picker() -> dcc.Dropdown:
    """Which failure categories the charts count (all by default): script errors of one
    rack can swamp the infrastructure signal."""
    return dcc.Dropdown(id=ids.FAIL_CATEGORY, multi=True, value=list(CATEGORIES),
                        options=[{"label": c, "value": c} for c in CATEGORIES],
                        clearable=False, className="filter filter-category")


def layout(**query) -> html.Div:
    f = from_query(query)
    return components.page(
        "failures", "Failures", f,
        html.Div([html.Span("Failure categories counted: ", className="panel-sub"),
                  category_picker()], className="filter-bar category-bar"),
        components.grid(
            components.panel("Failures by rack and day", "Classified failed runs.",
                             components.graph(ids.FAIL_RACK_DAY), wide=False),
            components.panel("Failures by category and week", "Infrastructure, "
                             "framework, script, scheduler.",
                             components.graph(ids.FAIL_CATEGORY_WEEK), wide=False),
            components.panel("Reasons", "GPU-hours lost by reason, coloured by category.",
                             components.graph(ids.FAIL_REASONS), wide=False),
            components.panel("XIDs", "Failed runs by the XID codes on their GPUs.",
                             components.graph(ids.FAIL_XIDS), wide=False),
            components.panel("Failures against temperature", "Hottest GPU on the failed "
                             "node in the hour before, against the fleet median.",
                             components.graph(ids.FAIL_TEMPERATURE), wide=False),
        ),
        components.panel("Lemon nodes", "Candidates: nodes that failed runs from "
                         "infrastructure, ranked by how unlikely that many failures are "
                         "under the fleet's rate (Poisson p-value), with the evidence; "
                         "a lemon once the p-value and the count pass the settings.",
                         html.Div(components.empty("Loading…"), id=ids.FAIL_LEMONS)),
    )


def _scoped(df, f, categories=None):
    """Rows of the URL's partition and rack (the analytics queries take a range only),
    and of the chosen failure ``categories`` (None: all)."""
    if categories is not None and "category" in df:
        df = df[df["category"].isin(categories)]
    if f.partition and "partition" in df:
        df = df[df["partition"] == f.partition]
    if f.rack and "rack" in df:
        df = df[df["rack"] == f.rack]
    return df


@callback(
    Output(ids.FAIL_RACK_DAY, "figure"), Output(ids.FAIL_CATEGORY_WEEK, "figure"),
    Output(ids.FAIL_REASONS, "figure"), Output(ids.FAIL_XIDS, "figure"),
    Output(ids.updated("failures"), "children"),
    Input(ids.FILTERS, "data"), Input(ids.refresh("failures"), "n_intervals"),
    Input(ids.FAIL_CATEGORY, "value"),
)
def update_failures(data, _n=None, categories=None):
    """The failures in range summed per breakdown (of the URL's partition and rack and
    the chosen categories), four pure figures."""
    f = from_query(data)
    start, end = f.window(context.now())
    b = fq.breakdowns(context.reader(), start=start, end=end, categories=categories,
                      partition=f.partition, rack=f.rack)
    return (fig.failures_heatmap(b["rack_day"], rows="rack", period="D"),
            fig.failures_heatmap(b["category_day"], rows="category", period="W"),
            fig.failure_reasons(b["reasons"]), fig.xid_counts(b["xids"]),
            f"{f.label} · {b['runs']:,} failed runs · {fmt_time(end)}")


@callback(Output(ids.FAIL_TEMPERATURE, "figure"), Input(ids.FILTERS, "data"),
          Input(ids.refresh("failures"), "n_intervals"), Input(ids.FAIL_CATEGORY, "value"))
def update_temperatures(data, _n=None, categories=None):
    f = from_query(data)
    start, end = f.window(context.now())
    return fig.failure_temperatures(_scoped(thermal.failure_temperatures(
        context.reader(), start=start, end=end, partition=f.partition, rack=f.rack), f,
        categories))


@callback(Output(ids.FAIL_LEMONS, "children"), Input(ids.FILTERS, "data"),
          Input(ids.refresh("failures"), "n_intervals"))
def update_lemons(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    opts = context.options()
    df = _scoped(fq.lemon_nodes(context.reader(), start=start, end=end,
                                min_failures=opts.lemon_min_failures,
                                p_value=opts.lemon_p_value), f)
    df = df[df["infra_failures"] > 0].head(25)  # candidates: nodes that failed a run
    return components.table(df, LEMON_COLUMNS, table_id=ids.FAIL_LEMONS + "-table",
                            empty_message="No node failed a run from infrastructure in "
                            "this range, so there is no lemon candidate.")

"""The fleet view (``gpulens fleet --lake DIR``, issue 18): every cluster of a lake side by
side.

    app = create_fleet_app(Lake("/lake/gpulens"))
    waitress.serve(app.server)

One page, its own small Dash app (no page registry, so it never mixes with the
single-cluster dashboard's pages): a window from the URL (``?range=30d``, the same
:mod:`dashboard.filters` windows as the dashboard), a table of each cluster's headline
figures and six figures (:mod:`dashboard.figures.fleet`). One callback reads every
cluster once per refresh (:func:`warehouse.queries.lake_fleet.fleet_figures`) and fills
them all. The same request checks as the dashboard guard it
(:mod:`dashboard.web_security`, :mod:`dashboard.auth`: Host, Origin, CSRF, the login
or trusted proxy, the security headers).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import dash
import pandas as pd
from dash import Input, Output, dcc, html

from dashboard import auth, components, web_security
from dashboard.app import HERE, user_badge
from dashboard.components import Column, num
from dashboard.figures import fleet as figs
from dashboard.filters import DEFAULT_RANGE, RANGES, from_search
from dashboard.formatting import fmt_time
from warehouse.analytics import Options
from warehouse.clock import utcnow as utcnow_naive
from warehouse.queries.lake_fleet import Lake, Window, fleet_figures

URL = "fleet-url"
RANGE = "fleet-range"
REFRESH = "fleet-refresh"
UPDATED = "fleet-updated"
TABLE = "fleet-table"
ERRORS = "fleet-errors"
CLUSTERS = "fleet-clusters"
RATE, MTTF, LOST, ETTR, UTIL, ENERGY = ("fleet-rate", "fleet-mttf", "fleet-lost",
                                        "fleet-ettr", "fleet-util", "fleet-energy")
GRAPHS = (RATE, MTTF, LOST, ETTR, UTIL, ENERGY)
#: Seconds between refreshes: the lake changes at each export (lake.interval_min, the
#: demo's every 10 minutes) and a refresh reads every cluster (~0.2-1 s each), so the
#: dashboard's 15 s would only repeat the same reads.
REFRESH_S = 300.0
FLEET_DEFAULT_RANGE = "30d"  # a failure rate needs weeks of node-days to mean much

SUMMARY_COLUMNS = (  # units in the titles: the cells stay narrow
    Column("cluster", "Cluster"),
    num("gpus", "GPUs"),
    num("coverage_pct", "Telemetry (% of installed)", 1),
    num("allocated_share_pct", "Allocated (%)", 1),
    num("util_of_allocated_pct", "Utilised (%)", 1),
    num("r_f", "r_f (per 1,000 node-days)", 2),
    num("r_f_low", "r_f 95 % low", 2),
    num("r_f_high", "r_f 95 % high", 2),
    num("infra_failures", "Infra failures"),
    num("node_days", "Node-days", 1),
    num("mttf_1024_h", "MTTF 1,024 GPUs (h)", 1),
    num("large_ettr", "ETTR large jobs", 3),
    num("gpu_hours_lost", "Lost (GPU·h)", 1),
    num("facility_mwh", "Facility (MWh)", 2),
    num("tco2e", "Emissions (t CO₂e)", 3),
)


def summary(figures: dict[str, dict]) -> pd.DataFrame:
    """One row per readable cluster: the columns of :data:`SUMMARY_COLUMNS`."""
    rows = []
    for name, f in figures.items():
        if "error" in f:
            continue
        rate, mttf = f["rate"], f["rate"]["mttf"].set_index("gpus")["mttf_h"]
        rows.append({
            "cluster": name, "gpus": f["fleet"]["gpus"],
            "coverage_pct": f["fleet"]["coverage_pct"],
            "allocated_share_pct": f["fleet"]["allocated_share_pct"],
            "util_of_allocated_pct": f["fleet"]["util_of_allocated_pct"],
            "r_f": rate["r_f_per_1000_node_days"], "r_f_low": rate["r_f_low"],
            "r_f_high": rate["r_f_high"], "infra_failures": rate["failures"],
            "node_days": rate["node_days"],
            "mttf_1024_h": float(mttf[1024]) if 1024 in mttf.index else None,
            "large_ettr": f["ettr"]["ettr"],
            "gpu_hours_lost": float(f["lost"]["gpu_hours_lost"].sum()),
            "facility_mwh": f["energy"]["facility_kwh"] / 1000,
            "tco2e": f["energy"]["carbon_kg"] / 1000,
        })
    return pd.DataFrame(rows)


def create_fleet_app(
    lake: Lake,
    *,
    now: Callable[[], datetime] = utcnow_naive,
    refresh_s: float = REFRESH_S,
    auth_config: auth.AuthConfig | None = None,
    options: Options | None = None,
    title: str = "gpulens fleet",
) -> dash.Dash:
    """The fleet view over ``lake`` at the clock ``now`` (naive UTC), refreshed every
    ``refresh_s`` s; ``options`` are the analytics settings applied to every cluster
    (PUE, node overhead, carbon region, checkpoint interval, large-job size: the lake
    holds no settings)."""
    options = options or Options()
    app = dash.Dash("gpulens_fleet", use_pages=False, assets_folder=str(HERE / "assets"),
                    title=title, update_title=None, suppress_callback_exceptions=True)
    auth_config = auth_config or auth.AuthConfig()
    web_security.install(app, auth_config)
    auth.install(app.server, auth_config)
    web_security.install_callback_check(app)
    app.layout = lambda: _layout(title, lake, refresh_s)

    @app.callback(Output(URL, "search"), Output(RANGE, "value"), Input(URL, "search"),
                  Input(RANGE, "value"))
    def sync_range(search, rng):
        """The menu shows the URL's window; picking another rewrites the URL (one
        callback both ways: two would be a circular dependency)."""
        if dash.ctx.triggered_id == RANGE and rng in RANGES:
            return ("" if rng == FLEET_DEFAULT_RANGE else f"?range={rng}"), rng
        return dash.no_update, _range(search)

    @app.callback(
        Output(UPDATED, "children"), Output(CLUSTERS, "children"), Output(TABLE, "children"),
        Output(ERRORS, "children"), *(Output(g, "figure") for g in GRAPHS),
        Input(URL, "search"), Input(REFRESH, "n_intervals"))
    def update(search, _n=None):
        return render(lake, search, now(), options)

    return app


def _range(search: str | None) -> str:
    """The window key of the URL (the fleet's default when none is given)."""
    f = from_search(search)
    if f.range == DEFAULT_RANGE and "range=" not in (search or ""):
        return FLEET_DEFAULT_RANGE
    return f.range if f.range in RANGES else FLEET_DEFAULT_RANGE


def render(lake: Lake, search: str | None, at: datetime, options: Options) -> tuple:
    """Everything the page shows for the URL query ``search`` at ``at``: the updated
    line, the clusters line, the table, the errors and the six figures (pure but for the
    lake's reads; tests call it directly)."""
    f = from_search(f"?range={_range(search)}")
    start, end = f.window(at)
    figures = fleet_figures(lake, Window(start, end, at, rolling=True), options)
    errors = [html.P(f"Cluster {n}: its files could not be read ({c['error']})",
                     className="panel-sub") for n, c in figures.items() if "error" in c]
    errors += [html.P(f"Cluster {n}: the lake holds no {', '.join(c['missing'])}; the "
                      "figures that read them count nothing for it (export every table "
                      "into the lake: lake.tables).", className="panel-sub")
               for n, c in figures.items() if c.get("missing")]
    names = ", ".join(figures) or "none yet"
    table = components.table(summary(figures), SUMMARY_COLUMNS, table_id=TABLE + "-grid",
                             empty_message=figs.NO_CLUSTER)
    return (f"{f.label} · {fmt_time(end)}", f"{len(figures)} clusters: {names}", table,
            errors, figs.failure_rates(figures), figs.mttf_by_cluster(figures),
            figs.lost_by_cluster(figures),
            figs.ettr_by_cluster(figures, min_gpus=options.large_job_gpus),
            figs.utilisation_by_cluster(figures), figs.energy_by_cluster(figures))


def _layout(title: str, lake: Lake, refresh_s: float) -> html.Div:
    head = html.Header(html.Div([
        html.Span([html.Span(className="brand-mark"), html.Span(title)], className="brand"),
        html.Span(lake.path, className="cluster", title="the lake read"),
        html.Div(className="nav"), user_badge()], className="topbar-inner"),
        className="topbar")
    ranges = [{"label": label, "value": key} for key, (label, _) in RANGES.items()]
    g = components.graph
    page = html.Div([
        html.Div([html.Div([html.H1("Fleet"),
                            html.Span("Loading…", id=UPDATED, className="updated")],
                           className="page-title"),
                  html.Div(dcc.Dropdown(id=RANGE, options=ranges, value=FLEET_DEFAULT_RANGE,
                                        clearable=False, searchable=False),
                           className="filter-bar")], className="page-header"),
        html.P(id=CLUSTERS, className="page-intro"),
        html.Div(id=ERRORS),
        components.panel("Clusters side by side", "Each cluster's figures over the window, "
                         "computed from the lake by the functions of its own dashboard.",
                         html.Div(id=TABLE)),
        components.grid(
            components.panel("Failure rate", "Infrastructure failures per 1,000 node-days "
                             "with the exact 95 % Poisson interval; over 30 days or 10 "
                             "failures at least.", g(RATE), wide=False),
            components.panel("MTTF by job size", "Mean time to failure each cluster's rate "
                             "projects: 1 / (nodes x r_f).", g(MTTF), wide=False),
            components.panel("GPU-hours lost", "To failed runs and restarts, by failure "
                             "category.", g(LOST), wide=False),
            components.panel("ETTR of large jobs", "Productive / wall time of each large "
                             "job.", g(ETTR), wide=False),
            components.panel("Utilisation", "GPU-hours allocated of installed, and "
                             "utilised of allocated.", g(UTIL), wide=False),
            components.panel("Energy and carbon", "Facility energy (IT x PUE) and its "
                             "emissions.", g(ENERGY), wide=False),
        ),
        dcc.Interval(id=REFRESH, interval=int(refresh_s * 1000)),
    ], className="page")
    return html.Div([dcc.Location(id=URL, refresh="callback-nav"), head,
                     html.Main(page, className="content")], className="shell")

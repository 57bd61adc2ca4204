"""Energy & carbon (``/energy``): how much energy do we burn, and how much carbon?

Energy and emissions over time; by rack, partition, user and job; PUE and grid
intensity with the source that applied to each hour; the carbon cost of failures; the
energy of idle GPUs; carbon per productive GPU-hour (issue 21). Reads
``warehouse.queries.energy`` (analytics: counter-based hourly GPU energy, node overhead,
PUE, grid intensity) and ``warehouse.queries.goodput_carbon``.
"""

from __future__ import annotations

from datetime import timedelta

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.figures import energy as fig
from dashboard.filters import from_query
from dashboard.formatting import DASH, fmt_num, fmt_time, missing
from warehouse.queries import energy as eq
from warehouse.queries import energy_method as em
from warehouse.queries import goodput_carbon as gc

dash.register_page(
    __name__, path="/energy", name="Energy", order=4,
    title=lambda **_: context.page_title("Energy & carbon"),
    description="Energy and emissions over time, by rack, user and job; PUE; idle energy.",
)

HOURLY_UP_TO = timedelta(days=2)  # longer ranges are drawn per day
BY = {"rack": "Rack", "partition": "Partition", "user_name": "User", "job_id": "Job"}
GOODPUT_BY = {"user_name": "User", "job_id": "Job"}
GOODPUT_COLUMNS = {
    "user_name": [components.Column("user_name", "User")],
    "job_id": [components.Column("job_id", "Job", href=components.job_href),
               components.Column("user_name", "User")],
}
GOODPUT_NUMBERS = [
    components.num("g_per_productive_gpu_h", "Per productive GPU-hour", 0, "g CO₂e"),
    components.num("carbon_kg", "Emissions", 1, "kg CO₂e"),
    components.num("gpu_hours", "GPU-hours", 1, "GPU·h"),
    components.num("gpu_hours_lost", "Lost to failures", 1, "GPU·h"),
    components.num("productive_gpu_hours", "Productive", 1, "GPU·h"),
]


def layout(**query) -> html.Div:
    f = from_query(query)
    return components.page(
        "energy", "Energy & carbon", f,
        html.Div(components.cards(totals(None)), id=ids.ENERGY_TOTALS),
        components.panel("Energy and emissions", "IT energy (GPUs and the rest of the "
                         "nodes) and emissions of the facility energy.",
                         components.graph(ids.ENERGY_OVER_TIME)),
        components.grid(
            components.panel(
                "Who uses it", "Facility energy; emissions on hover.",
                components.graph(ids.ENERGY_BY), wide=False,
                extra=dcc.RadioItems(id=ids.ENERGY_BY_KEY, value="rack", inline=True,
                                     className="segmented",
                                     options=[{"label": v, "value": k}
                                              for k, v in BY.items()])),
            components.panel("PUE and grid intensity", "Facility / IT energy, and the "
                             "carbon intensity applied, one line per source (a provider, "
                             "an import or the annual table).",
                             components.graph(ids.ENERGY_PUE), wide=False),
            components.panel("Carbon cost of failures", "Emissions of the GPU-hours lost, "
                             "by failure category.", components.graph(ids.ENERGY_FAILURES),
                             wide=False),
            components.panel("Idle energy", "GPU energy of unallocated, allocated-but-idle "
                             "and busy GPUs.", components.graph(ids.ENERGY_IDLE), wide=False),
        ),
        components.panel(
            "Carbon of goodput", "Emissions of all GPU-hours (failures, restarts, idle "
            "GPUs included) per GPU-hour that produced kept work; the cluster's counts "
            "GPUs no job held too.",
            html.Div(components.empty("Loading…"), id=ids.ENERGY_GOODPUT),
            extra=dcc.RadioItems(id=ids.ENERGY_GOODPUT_KEY, value="user_name", inline=True,
                                 className="segmented",
                                 options=[{"label": v, "value": k}
                                          for k, v in GOODPUT_BY.items()])),
    )


def _window(data):
    f = from_query(data)
    start, end = f.window(context.now())
    return f, start, end


def totals(df, x: str = "hour", gpu_method: str | None = None) -> list[tuple[str, str, str]]:
    """Headline cards of the window from the energy-over-time frame (kWh, t CO₂e); the
    emissions say which intensity sources applied to how many hours (days: ``x``), IT
    energy where the node energy came from, the GPU share how the jobs' GPU energy was
    measured (``gpu_method``: warehouse/queries/energy_method.py:window_method)."""
    if df is None or len(df) == 0:
        return [(t, DASH, "no energy data in this window") for t in
                ("IT energy", "Facility energy", "Emissions", "GPU share")]
    s = df[["gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg"]].sum()
    pue = s["facility_kwh"] / s["it_kwh"] if s["it_kwh"] else None
    return [
        ("IT energy", fmt_num(s["it_kwh"], 0, "kWh"), fig.node_energy_method(df)),
        ("Facility energy", fmt_num(s["facility_kwh"], 0, "kWh"),
         f"IT x PUE {fmt_num(pue, 2)}"),
        ("Emissions", fmt_num(s["carbon_kg"] / 1000, 2, "t CO₂e"),
         f"facility energy x grid intensity: {fig.intensity_sources(df, x=x)}"),
        ("GPU share", fmt_num(100 * s["gpu_kwh"] / s["it_kwh"] if s["it_kwh"] else None, 0,
                              "%"), f"{fmt_num(s['gpu_kwh'], 0, 'kWh')} in GPUs"
                             + (f"; jobs' GPU energy from: {gpu_method}" if gpu_method
                                else "")),
    ]


@callback(Output(ids.ENERGY_OVER_TIME, "figure"), Output(ids.ENERGY_PUE, "figure"),
          Output(ids.ENERGY_TOTALS, "children"), Output(ids.updated("energy"), "children"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("energy"), "n_intervals"))
def update_over_time(data, _n=None):
    """One query (energy per hour or day), two figures."""
    f, start, end = _window(data)
    by = "hour" if end - start <= HOURLY_UP_TO else "day"
    df = eq.energy_by(context.reader(), start=start, end=end, by=by, opts=context.options())
    how = em.window_method(context.reader(), start=start, end=end)
    return (fig.energy_over_time(df, x=by, start=start, end=end),
            fig.pue_and_intensity(df, x=by), components.cards(totals(df, by, how)),
            f"{f.label} · {fmt_time(end)}")


@callback(Output(ids.ENERGY_BY, "figure"), Input(ids.FILTERS, "data"),
          Input(ids.ENERGY_BY_KEY, "value"), Input(ids.refresh("energy"), "n_intervals"))
def update_by(data, key="rack", _n=None):
    _, start, end = _window(data)
    key = key if key in BY else "rack"
    opts = context.options()
    if key in ("rack", "partition"):
        df = eq.energy_by(context.reader(), start=start, end=end, by=key, opts=opts)
    else:
        df = eq.job_energy(context.reader(), start=start, end=end, by=key, opts=opts)
    return fig.energy_by(df, key=key, label=BY[key])


@callback(Output(ids.ENERGY_FAILURES, "figure"), Input(ids.FILTERS, "data"),
          Input(ids.refresh("energy"), "n_intervals"))
def update_failures(data, _n=None):
    _, start, end = _window(data)
    df = eq.failure_carbon(context.reader(), start=start, end=end, opts=context.options(),
                           by="category")
    return fig.categories_bar(df, cat="category", value="lost_carbon_kg",
                             x_title="Emissions of lost GPU-hours (kg CO₂e)",
                             empty="No failure cost any energy in this range.")


@callback(Output(ids.ENERGY_IDLE, "figure"), Input(ids.FILTERS, "data"),
          Input(ids.refresh("energy"), "n_intervals"))
def update_idle(data, _n=None):
    _, start, end = _window(data)
    df = eq.idle_energy(context.reader(), start=start, end=end,
                        idle_util_pct=context.options().idle_util_pct)
    return fig.categories_bar(df, cat="state", value="gpu_kwh", x_title="GPU energy (kWh)",
                             empty="No 1-minute telemetry in this range.")


def goodput_carbon_frame(data, key: str = "user_name"):
    """(the cluster's figure, the per-user or per-job frame) of the filtered window
    (warehouse/queries/goodput_carbon.py: gCO2e per productive GPU-hour)."""
    _, start, end = _window(data)
    key = key if key in GOODPUT_BY else "user_name"
    cur, opts = context.reader(), context.options()
    per = gc.carbon_per_productive_gpu_hour(cur, start=start, end=end, by=key, opts=opts)
    cluster = gc.cluster_carbon_per_productive_gpu_hour(  # every run is in one group
        cur, start=start, end=end, opts=opts, held_gpu_hours=float(per["gpu_hours"].sum()))
    return cluster, per


def goodput_cards(cluster: dict) -> list[tuple[str, str, str]]:
    """The cluster's carbon per productive GPU-hour and what it is made of."""
    g = cluster["g_per_productive_gpu_h"]
    return [
        ("Cluster, per productive GPU-hour",
         "no kept work" if missing(g) else fmt_num(g, 0, "g CO₂e"),
         f"{fmt_num(cluster['carbon_kg'], 1, 'kg CO₂e')} over "
         f"{fmt_num(cluster['productive_gpu_hours'], 1, 'GPU·h')} productive"),
        ("GPU-hours lost to failures", fmt_num(cluster["gpu_hours_lost"], 1, "GPU·h"),
         f"of {fmt_num(cluster['gpu_hours'], 1, 'GPU·h')} held by jobs"),
    ]


@callback(Output(ids.ENERGY_GOODPUT, "children"), Input(ids.FILTERS, "data"),
          Input(ids.ENERGY_GOODPUT_KEY, "value"), Input(ids.refresh("energy"), "n_intervals"))
def update_goodput_carbon(data, key="user_name", _n=None):
    key = key if key in GOODPUT_BY else "user_name"
    cluster, df = goodput_carbon_frame(data, key)
    return [components.cards(goodput_cards(cluster)),
            components.table(df, GOODPUT_COLUMNS[key] + GOODPUT_NUMBERS,
                             table_id=ids.ENERGY_GOODPUT + "-table",
                             empty_message="No job used a GPU in this window.")]

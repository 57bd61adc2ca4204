"""One job (``/jobs/<job_id>``): its runs on a timeline, the telemetry of its GPUs, its
energy and carbon, and the evidence behind each failure.

The job id comes from the URL and is only ever a query parameter and text.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.components import Column, num
from dashboard.figures import job as fig
from dashboard.filters import from_query
from dashboard.formatting import DASH, fmt_int, fmt_time, missing
from warehouse.queries import jobs
from warehouse.queries import stragglers as sq

dash.register_page(
    __name__, path_template="/jobs/<job_id>", name="Job", order=7,
    title=lambda job_id=None, **_: context.page_title(f"Job {unquote(str(job_id))}"),
    description="A job's runs, GPUs, telemetry, energy, carbon and failures.",
)

FAILURE_COLUMNS = (
    num("run_index", "Run"),
    Column("end_ts", "Failed at", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    Column("category", "Category"), Column("reason", "Reason"),
    Column("source", "Decided by"), Column("node", "Node"),
    Column("xids", "XIDs", lambda v: ", ".join(str(x) for x in v) or DASH),
    num("gpu_hours_lost", "Lost", 1, "GPU·h"),
)
EVIDENCE_CHARS = 2000  # of one evidence value (log tails can be long)


def _evidence_items(text) -> list[tuple[str, str]]:
    """The evidence JSON as (key, value) text pairs; anything else as one pair."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return [("evidence", str(text))] if not missing(text) else []
    if not isinstance(data, dict):
        return [("evidence", str(data))]
    out = []
    for k, v in data.items():
        value = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        out.append((str(k).replace("_", " "), value[:EVIDENCE_CHARS]))
    return out


def evidence(df) -> html.Div | None:
    """Each failed run's evidence as a readable block below the table: one line per
    item, long values (log tails) in a scrolling pre-formatted box; text, never HTML."""
    if df is None or len(df) == 0 or "evidence" not in df:
        return None
    blocks = []
    for rec in df.to_dict("records"):
        items = _evidence_items(rec.get("evidence"))
        if not items:
            continue
        rows = [html.Div([html.Dt(k), html.Dd(html.Pre(v) if len(v) > 80 or "\n" in v
                                               else v)], className="evidence-item")
                for k, v in items]
        blocks.append(html.Details([
            html.Summary(f"Run {int(rec['run_index'])}: why it was classified "
                         f"{rec.get('category') or DASH}"),
            html.Dl(rows, className="evidence")], open=len(blocks) == 0))
    return html.Div(blocks, className="evidence-list") if blocks else None


def layout(job_id: str | None = None, **query) -> html.Div:
    f = from_query(query)
    job_id = unquote(str(job_id or ""))[:128]
    return components.page(
        "job", f"Job {job_id}", f,
        dcc.Store(id=ids.JOB_ID, data=job_id),
        html.Div(components.empty("Loading…"), id=ids.JOB_SUMMARY),
        components.panel("Runs", "Each attempt from start to end; requeues after a "
                         "failure start a new run.", components.graph(ids.JOB_TIMELINE,
                                                                      height=200)),
        components.panel("Telemetry of its GPUs", "Across the GPUs allocated to its runs.",
                         components.graph(ids.JOB_TELEMETRY, height=460)),
        components.panel("Stragglers", "Its nodes over time (MegaScale's heat map): the "
                         "SM clock of each node's slowest GPU against the job's other "
                         "nodes. A synchronous job runs at the pace of its slowest member; "
                         "outlined: the suspected stragglers, with their evidence below.",
                         components.graph(JOB_HEATMAP, height=300),
                         html.Div(id=JOB_STRAGGLERS)),
        components.panel("Energy and carbon", "GPU energy per run; emissions from "
                         "the grid's carbon intensity at the time.",
                         html.Div(id=ids.JOB_ENERGY)),
        components.panel("Failures", "How each failed run was classified, and the "
                         "evidence behind it.", html.Div(id=ids.JOB_FAILURES)),
        live=False, filters=(),
    )


def summary_cards(job: dict | None, job_id: str, now) -> html.Div:
    """Headline cards of a job (its row of ``jobs``); names are text."""
    if job is None:
        return components.empty(f"No job {job_id!r} in the warehouse: check the id, or the "
                                "scheduler collector on /healthz.")
    def txt(key):
        v = job.get(key)
        return DASH if missing(v) or v is None else str(v)
    ended = job.get("end_ts")
    return html.Div([
        html.H2(txt("name"), className="job-name"),
        components.cards([
            ("User", txt("user_name"), f"account {txt('account')}"),
            ("State", txt("state"), f"{txt('job_type')} · partition {txt('partition')}"),
            ("GPUs", fmt_int(job.get("gpus")), f"on {fmt_int(job.get('nodes'))} nodes"),
            ("Requeues", fmt_int(job.get("restarts")), "runs after the first"),
            ("Started", DASH if missing(job.get("start_ts")) else
             f"{job['start_ts']:%d %b %H:%M}",
             "still running" if missing(ended) and txt("state") == "RUNNING" else
             "ended " + (DASH if missing(ended) else f"{ended:%d %b %H:%M} UTC")),
        ]),
    ])


@callback(Output(ids.JOB_SUMMARY, "children"), Output(ids.updated("job"), "children"),
          Input(ids.JOB_ID, "data"))
def update_summary(job_id):
    now = context.now()
    job = jobs.job(context.reader(), job_id=job_id)
    return summary_cards(job, job_id, now), f"As of {fmt_time(now)}"


@callback(Output(ids.JOB_TIMELINE, "figure"), Input(ids.JOB_ID, "data"))
def update_timeline(job_id):
    now = context.now()
    return fig.job_timeline(jobs.runs(context.reader(), job_id=job_id, now=now),
                                     now=now)


@callback(Output(ids.JOB_TELEMETRY, "figure"), Input(ids.JOB_ID, "data"))
def update_telemetry(job_id):
    return fig.job_telemetry(
        jobs.telemetry(context.reader(), job_id=job_id, now=context.now()))


JOB_HEATMAP = "job-straggler-heatmap"  # ids of the stragglers panel (issue 15)
JOB_STRAGGLERS = "job-stragglers"
STRAGGLER_COLUMNS = (
    Column("node", "Node", href=components.node_href),
    Column("gpu_indices", "GPUs", lambda v: ", ".join(str(int(g)) for g in v)),
    Column("start_ts", "From", lambda v: f"{v:%a %d %b %H:%M}"),
    Column("end_ts", "To", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    num("slowdown_frac", "Slowdown", 2),
    num("clock_mhz", "Clock", 0, "MHz"), num("peer_clock_mhz", "Peers' clock", 0, "MHz"),
    num("power_w", "Power", 0, "W"), num("peer_power_w", "Peers' power", 0, "W"),
    num("thermal_s", "Thermal throttling", 0, "s"),
    num("power_brake_s", "Power throttling", 0, "s"),
    Column("xids", "XIDs", lambda v: ", ".join(str(x) for x in v) or DASH),
    num("gpu_hours_lost", "Lost", 1, "GPU·h"),
)


@callback(Output(JOB_HEATMAP, "figure"), Output(JOB_STRAGGLERS, "children"),
          Input(ids.JOB_ID, "data"))
def update_stragglers(job_id):
    cur, now = context.reader(), context.now()
    cells = sq.heatmap(cur, job_id=job_id, now=now)
    start = cells["ts"].min() if len(cells) else now
    eps = sq.episodes(cur, start=start, end=now, job_id=job_id)
    return fig.straggler_heatmap(cells, eps), components.table(
        eps, STRAGGLER_COLUMNS, table_id=JOB_STRAGGLERS + "-table",
        empty_message="No straggler: its nodes kept pace with each other (multi-node "
        "jobs only).")


ENERGY_COLUMNS = (
    num("run_index", "Run"),
    num("gpu_hours", "GPU-hours", 1, "GPU·h"),
    num("gpu_kwh", "GPU energy", 1, "kWh"),
    num("facility_kwh", "Facility energy", 1, "kWh"),
    num("carbon_kg", "Emissions", 1, "kg CO₂e"),
    Column("method", "GPU energy from"),
)


@callback(Output(ids.JOB_ENERGY, "children"), Input(ids.JOB_ID, "data"))
def update_energy(job_id):
    df = jobs.energy(context.reader(), job_id=job_id, now=context.now(),
                     opts=context.options())
    if len(df):
        total = df[["gpu_kwh", "facility_kwh", "carbon_kg"]].sum()
        note = html.P(f"Total {total['facility_kwh']:,.1f} kWh at the facility (GPUs "
                      f"{total['gpu_kwh']:,.1f} kWh, the rest the nodes' other parts and "
                      f"cooling), {total['carbon_kg']:,.1f} kg CO₂e", className="panel-sub")
    else:
        note = None
    return [note, components.table(df, ENERGY_COLUMNS, empty_message=(
        "No energy recorded: the job never held a GPU with telemetry."))]


@callback(Output(ids.JOB_FAILURES, "children"), Input(ids.JOB_ID, "data"))
def update_failures(job_id):
    df = jobs.failures(context.reader(), job_id=job_id)
    return [components.table(df, FAILURE_COLUMNS, table_id=ids.JOB_FAILURES + "-table",
                             empty_message="No classified failure: every run completed, is "
                             "running, or has not been classified yet."), evidence(df)]

"""Placement (``/placement``): are jobs placed along the network tree, and how fragmented
are the free GPUs?

Headline numbers; fragmentation over time (the largest job that could start within one
rack and one zone, the stranded GPUs); each multi-node run's placement score; the runs
spread over more racks or zones than their size needed, linked to the job and its first
rack; large jobs that waited while enough GPUs were free but scattered. Definitions and
formulas: :mod:`warehouse.placement` and docs/analytics.md.
"""

from __future__ import annotations

from urllib.parse import quote

import dash
from dash import Input, Output, callback, html

from dashboard import components, context, ids
from dashboard.components import Column, job_href, num
from dashboard.figures import placement as fig
from dashboard.filters import from_query
from dashboard.formatting import fmt_time, missing
from warehouse import placement, placement_runs, placement_waits

dash.register_page(
    __name__, path="/placement", name="Placement", order=6,
    title=lambda **_: context.page_title("Placement"),
    description="Jobs' span over racks and zones, fragmentation and stranded GPUs.",
)


def rack_href(rec: dict) -> str | None:
    """Link to the Overview's drill-down of the run's first rack (``/?rack=...``)."""
    racks = rec.get("rack_names")
    if not racks or missing(racks):
        return None
    return f"/?rack={quote(str(racks).split()[0], safe='')}"


JOB_COLUMNS = (
    Column("job_id", "Job", href=job_href), Column("name", "Job name"),
    Column("user_name", "User"), num("gpus", "GPUs"), num("nodes", "Nodes"),
    num("racks", "Racks"), num("min_racks", "Fewest racks"),
    num("zones", "Zones"), num("min_zones", "Fewest zones"),
    num("score", "Score", 2), num("gpu_hours", "Ran so", 1, "GPU·h"),
    Column("rack_names", "First rack", lambda v: str(v).split()[0], href=rack_href),
)

WAIT_COLUMNS = (
    Column("job_id", "Job", href=job_href), Column("name", "Job name"),
    Column("user_name", "User"), num("gpus", "GPUs"),
    Column("submit_ts", "Submitted", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    num("pending_h", "Pending", 0, "h"), num("scattered_h", "Free but scattered", 0, "h"),
)


def layout(**query) -> html.Div:
    f = from_query(query)
    large = context.options().large_job_gpus
    return components.page(
        "placement", "Placement", f,
        html.Div([html.Div(id=ids.PLACEMENT_NOW_CARDS), html.Div(id=ids.PLACEMENT_CARDS)],
                 className="card-groups"),
        components.panel(
            "Fragmentation", "Per hour: free GPUs, the largest job that could start within "
            "one zone and within one rack (wholly free nodes), and GPUs stranded: free but "
            "unusable for a job of the usual multi-node size placed within one zone.",
            components.graph(ids.PLACEMENT_FRAG)),
        components.panel(
            "Placement of multi-node jobs", "Score = (fewest racks + fewest zones) / "
            "(racks + zones spanned): 1 is as tight as the job's size allows (Meta: tensor "
            "parallel within a rack, pipeline within a zone).",
            components.graph(ids.PLACEMENT_SCORES)),
        components.panel(
            "Jobs spread more than needed", "Runs spanning more racks or zones than their "
            "size needed, worst first, with the GPU-hours they ran that way.",
            html.Div(components.empty("Loading…"), id=ids.PLACEMENT_JOBS)),
        components.panel(
            "Large jobs waiting on scattered GPUs", f"Jobs of {large} GPUs or more "
            "(reports.large_job_gpus) pending while their partition had enough GPUs free, "
            "but not on whole nodes (or one node) where they could start; hourly.",
            html.Div(components.empty("Loading…"), id=ids.PLACEMENT_WAITS)),
    )


def now_cards(frag, *, reaches_now: bool) -> html.Div:
    """Cards: the largest job that could start in a rack and in a zone now, and the
    stranded GPUs now: the fragmentation chart's last row (its "now", with the chart's
    usual job size), so a card and the chart's last point never differ; dashes when the
    window does not reach now. Values in GPUs."""
    now = frag.iloc[-1] if reaches_now and len(frag) else None
    usual = ", ".join(f"{v:,.0f}" for v in frag.attrs.get("usual_gpus", {}).values())

    def n(key):
        return "—" if now is None else f"{int(now[key]):,}"

    return components.cards([
        ("Largest job in a rack", n("largest_rack_gpus"), "GPUs that could start now"),
        ("Largest job in a zone", n("largest_zone_gpus"), "GPUs that could start now"),
        ("Stranded GPUs", n("stranded_gpus"),
         f"free of {n('free_gpus')}; usual job {usual or '—'} GPUs"),
    ])


def placement_cards(summary: dict) -> html.Div:
    """Cards: the window's GPU-hour weighted placement score and GPU-hours spread over
    more racks or zones than needed (:func:`warehouse.placement_runs.placement_summary`)."""
    score = summary["mean_score"]
    return components.cards([
        ("Placement score", "—" if score != score else f"{score:.2f}",
         f"GPU-hour weighted, {summary['runs']:,} multi-node runs"),
        ("Spread too widely", f"{summary['misplaced_gpu_hours']:,.0f} GPU·h",
         f"{summary['misplaced_runs']:,} run{'' if summary['misplaced_runs'] == 1 else 's'} "
         "over more racks or zones than needed"),
    ])


@callback(Output(ids.PLACEMENT_FRAG, "figure"), Output(ids.PLACEMENT_NOW_CARDS, "children"),
          Output(ids.PLACEMENT_WAITS, "children"), Output(ids.updated("placement"), "children"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("placement"), "n_intervals"))
def update_frag(data, _n=None):
    """Fragmentation over the range, the cards of now, and the large jobs that waited
    while scattered, read from the same free GPUs per hour (issue 17: the waits read and
    counted them again, ~0.4 s of a 24,576-GPU week; the weekly report shares them too)."""
    f = from_query(data)
    now = context.now()
    start, end = f.window(now)
    frag = placement.fleet_fragmentation(context.reader(), start=start, end=end, now=now,
                                         partition=f.partition)
    waits = placement_waits.waits_while_scattered(context.reader(), start=start, end=end, now=now,
                                            min_gpus=context.options().large_job_gpus,
                                            partition=f.partition, frag=frag)
    return (fig.fragmentation_over_time(frag), now_cards(frag, reaches_now=start <= now <= end),
            waits_panel(waits), f"{f.label} · updated {fmt_time(min(end, now))}")


def waits_panel(waits) -> list:
    """The scattered waits' summary line (large jobs, job-hours pending and scattered)
    and table (hours per job; :func:`warehouse.placement_waits.waits_summary`)."""
    s = placement_waits.waits_summary(waits)
    note = html.P(f"{s['scattered']:,} of {s['waited']:,} large jobs that waited did so "
                  f"while their GPUs were free but scattered ({s['scattered_h']:,.0f} of "
                  f"{s['pending_h']:,.0f} job-hours pending).", className="panel-sub")
    shown = waits[waits["pending_h"] > 0] if len(waits) else waits
    return [note, components.table(shown, WAIT_COLUMNS, table_id=ids.PLACEMENT_WAITS + "-table",
                                   empty_message="No large job waited in this range.")]


@callback(Output(ids.PLACEMENT_SCORES, "figure"), Output(ids.PLACEMENT_JOBS, "children"),
          Output(ids.PLACEMENT_CARDS, "children"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("placement"), "n_intervals"))
def update_jobs(data, _n=None):
    f = from_query(data)
    now = context.now()
    start, end = f.window(now)
    # the multi-node runs' markers, summary and worst rows; only the table's are named
    runs = placement_runs.placed_runs(context.reader(), start=start, end=end, now=now,
                                      partition=f.partition, rows=components.MAX_TABLE_ROWS)
    shown = placement.name_runs(context.reader(), runs.worst, start=start, end=end, now=now)
    table = components.table(shown, JOB_COLUMNS, table_id=ids.PLACEMENT_JOBS + "-table",
                             empty_message="Every multi-node run in this range was placed "
                             "as tightly as its size allowed.")
    return fig.placement_scores(runs.markers), table, placement_cards(runs.summary)

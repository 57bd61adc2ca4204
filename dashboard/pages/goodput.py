"""Goodput (``/goodput``): how much GPU time do failures and restarts cost, and how often
should a large job checkpoint?

GPU-hours lost over time by category; the ETTR of large jobs; the fleet's failure rate
r_f with its confidence interval and the MTTF it projects by job size; and a checkpoint
advisor: enter a job size and a restart overhead, get Daly's optimal interval and the
expected ETTR curve (warehouse/reliability.py).
"""

from __future__ import annotations

import math
from datetime import datetime

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.components import Column, num
from dashboard.figures import goodput as fig
from dashboard.filters import RANGES, from_query
from dashboard.formatting import fmt_time
from warehouse import reliability
from warehouse.queries import failures as fq
from warehouse.queries import goodput as gq
from warehouse.queries import stragglers as sq

dash.register_page(
    __name__, path="/goodput", name="Goodput", order=3,
    title=lambda **_: context.page_title("Goodput"),
    description="GPU-hours lost, ETTR, failure rate, MTTF and a checkpoint advisor.",
)


def _number(label: str, cid: str, value: float, step: float) -> html.Label:
    return html.Label([label, dcc.Input(id=cid, type="number", value=value, min=step,
                                        step=step, debounce=True)])


def layout(**query) -> html.Div:
    f = from_query(query)
    return components.page(
        "goodput", "Goodput", f,
        components.grid(
            components.panel("GPU-hours lost", "Per day, by failure category.",
                             components.graph(ids.GOODPUT_LOST), wide=False),
            components.panel("ETTR of large jobs", f"Productive / wall time of jobs with "
                             f"{context.options().large_job_gpus} GPUs or more.",
                             components.graph(ids.GOODPUT_ETTR), wide=False),
        ),
        components.panel(
            "Lost to slow members", "A synchronous job runs at the pace of its slowest "
            "GPU or node: job GPUs x slowdown x duration (warehouse/stragglers.py), next "
            "to the GPU-hours failures cost in the same window.",
            html.Div(id=GOODPUT_SLOW_CARDS), html.Div(id=GOODPUT_SLOW)),
        components.panel(
            "Fleet failure rate and MTTF", "Infrastructure failures per 1,000 node-days "
            "(exact 95 % Poisson interval) and the mean time to failure it projects for a "
            "job of each size (MTTF = 1 / (nodes x r_f)).",
            html.Div(id=ids.GOODPUT_RATE_CARDS), components.graph(ids.GOODPUT_MTTF),
            dcc.Store(id=ids.GOODPUT_RATE_STORE)),
        components.panel(
            "Checkpoint advisor", "The optimal checkpoint interval (Daly 2006) for a job "
            "on this fleet, from the failure rate above; the band is r_f's 95 % interval.",
            html.Div([_number("Job size (GPUs)", ids.GOODPUT_ADV_GPUS, 1024, 8),
                      _number("Restart overhead (minutes)", ids.GOODPUT_ADV_RESTART, 15, 1),
                      _number("Checkpoint write (minutes)", ids.GOODPUT_RATE, 2, 0.5)],
                     className="advisor"),
            html.Div(id=ids.GOODPUT_ADVICE, className="advice"),
            components.graph(ids.GOODPUT_ADVICE + "-curve")),
    )


@callback(Output(ids.GOODPUT_LOST, "figure"), Output(ids.updated("goodput"), "children"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("goodput"), "n_intervals"))
def update_lost(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = gq.lost_per_day(context.reader(), start=start, end=end)
    return fig.lost_over_time(df), f"{f.label} · {fmt_time(end)}"


@callback(Output(ids.GOODPUT_ETTR, "figure"), Input(ids.FILTERS, "data"),
          Input(ids.refresh("goodput"), "n_intervals"))
def update_ettr(data, _n=None):
    f = from_query(data)
    now = context.now()
    start, end = f.window(now)
    opts = context.options()  # "large" is one setting for every view (issue 19)
    df = gq.large_jobs(context.reader(), start=start, end=end, now=now, opts=opts)
    return fig.ettr_jobs(df, min_gpus=opts.large_job_gpus)


GOODPUT_SLOW_CARDS = "goodput-slow-cards"  # ids of the stragglers panel (issue 15)
GOODPUT_SLOW = "goodput-slow"
SLOW_COLUMNS = (
    Column("job_id", "Job", href=components.job_href),
    num("job_gpus", "Job GPUs"),
    Column("node", "Node", href=components.node_href),
    Column("start_ts", "From", lambda v: f"{v:%a %d %b %H:%M} UTC"),
    num("minutes", "Lagging", 0, "min"),
    num("slowdown_frac", "Slowdown", 2),
    num("gpu_hours_lost", "Lost", 1, "GPU·h"),
)


def slow_cards(slow: dict, failed: dict) -> html.Div:
    """Cards: GPU-hours lost to slow members beside those lost to failures."""
    return components.cards([
        ("Lost to slow members", f"{slow['gpu_hours_lost']:,.1f} GPU·h",
         f"{slow['episodes']:,} straggler episode{'' if slow['episodes'] == 1 else 's'}"
         " in multi-node jobs"),
        ("Lost to failures", f"{failed['gpu_hours_lost']:,.1f} GPU·h",
         f"{failed['failed_runs']:,} failed runs"),
    ])


@callback(Output(GOODPUT_SLOW_CARDS, "children"), Output(GOODPUT_SLOW, "children"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("goodput"), "n_intervals"))
def update_slow(data, _n=None):
    start, end = from_query(data).window(context.now())
    cur = context.reader()
    slow = sq.lost_total(cur, start=start, end=end)
    eps = sq.episodes(cur, start=start, end=end)
    return slow_cards(slow, gq.lost_total(cur, start=start, end=end)), components.table(
        eps, SLOW_COLUMNS, table_id=GOODPUT_SLOW + "-table",
        empty_message="No straggler in this window.")


def rate_span(f, now: datetime) -> tuple[datetime, datetime]:
    """The window of the failure rate: a rolling range reaches back at least as far as
    :func:`warehouse.queries.failures.rate_window` (30 days or 10 failures: a rate from
    3 failures in 24 hours means little); an ISO week or a custom range is taken as is."""
    start, end = f.window(now)
    return fq.rate_span(context.reader(), start=start, end=end, rolling=f.range in RANGES)


def _rate(data) -> tuple[dict, datetime, datetime]:
    f = from_query(data)
    start, end = rate_span(f, context.now())
    return fq.failure_rate(context.reader(), start=start, end=end), start, end


def rate_cards(rate: dict, start: datetime, end: datetime) -> html.Div:
    """Cards: r_f with its interval, failures and node-days behind it, and its window."""
    r = rate["r_f_per_1000_node_days"]
    ok = rate["failures"] > 0 and math.isfinite(r)
    days = (end - start).total_seconds() / 86400
    return components.cards([
        ("Failure rate r_f", f"{r:.2f}" if ok else "—",
         f"per 1,000 node-days; 95 %: {rate['r_f_low']:.2f}-{rate['r_f_high']:.2f}"
         if ok else "No infrastructure failure in this window"),
        ("Infrastructure failures", f"{rate['failures']:,}", "behind the rate"),
        ("Node-days of work", f"{rate['node_days']:,.1f}", "the exposure behind r_f"),
        ("Rate window", f"{days:,.1f} days", f"{start:%d %b %H:%M} to {end:%d %b %H:%M} UTC"),
    ])


#: What the advisor reads of the rate (:func:`rate_for_advice`).
ADVICE_KEYS = ("failures", "r_f_per_1000_node_days", "r_f_low", "r_f_high", "gpus_per_node")


def rate_for_advice(rate: dict) -> dict:
    """The rate's figures the advisor needs, as JSON for the page's store (a rate that
    is not finite, with no failure, as null)."""
    return {k: (None if isinstance(rate[k], float) and not math.isfinite(rate[k])
                else rate[k]) for k in ADVICE_KEYS}


@callback(Output(ids.GOODPUT_RATE_CARDS, "children"), Output(ids.GOODPUT_MTTF, "figure"),
          Output(ids.GOODPUT_RATE_STORE, "data"),
          Input(ids.FILTERS, "data"), Input(ids.refresh("goodput"), "n_intervals"))
def update_rate(data, _n=None):
    """The rate's cards and MTTF chart, and the rate for the advisor: computed once per
    window and refresh, not again by the advisor (issue 17: ~0.7 s at 24,576 GPUs, on
    every change of the advisor's inputs too)."""
    rate, start, end = _rate(data)
    return rate_cards(rate, start, end), fig.mttf_projection(rate), rate_for_advice(rate)


def _fmt_span(lo: float, hi: float, fmt) -> str:
    return f"{fmt(min(lo, hi))}-{fmt(max(lo, hi))}"


def advice(rate: dict, gpus: float, restart_min: float, write_min: float):
    """Text and ETTR curve for the advisor (pure: the failure rate is an input). The
    interval of r_f carries through: the MTTF, the optimal interval and the expected
    ETTR are given for r_f's 95 % bounds too, and the curve has their band."""
    r_f = rate["r_f_per_1000_node_days"]
    if not (rate["failures"] > 0 and math.isfinite(r_f)):
        return ("No infrastructure failure in this window, so no rate to plan against: "
                "pick a longer range.", None)
    gpn = rate["gpus_per_node"]
    nodes = max(gpus / gpn, 1.0)
    restart_h, write_h = restart_min / 60, write_min / 60

    def plan(r_per_1000: float) -> tuple[float, float, float]:
        r = r_per_1000 / 1000
        best = reliability.optimal_checkpoint_interval_h(nodes, r, write_h)
        return (reliability.mttf_hours(gpus, r, gpn), best,
                reliability.expected_ettr(nodes, r, restart_h, best, write_h))

    (mttf, best, ettr), low, high = (plan(r_f), plan(rate["r_f_low"]),
                                     plan(rate["r_f_high"]))
    curve = gq.ettr_curve(n_nodes=nodes, failures_per_1000_node_days=r_f,
                          restart_overhead_h=restart_h, checkpoint_write_h=write_h)
    for name, r in (("low", rate["r_f_high"]), ("high", rate["r_f_low"])):
        bound = gq.ettr_curve(n_nodes=nodes, failures_per_1000_node_days=r,
                              restart_overhead_h=restart_h, checkpoint_write_h=write_h,
                              intervals_h=curve["checkpoint_interval_h"])
        curve[f"expected_ettr_{name}"] = bound["expected_ettr"].to_numpy()
    text = (f"A {gpus:,.0f}-GPU job fails every {mttf:,.1f} h on average "
            f"({_fmt_span(low[0], high[0], lambda v: f'{v:,.1f}')} h across r_f's 95 % "
            f"interval). Checkpoint every {best * 60:,.0f} minutes "
            f"({_fmt_span(low[1] * 60, high[1] * 60, lambda v: f'{v:,.0f}')}): expected "
            f"ETTR {ettr:.1%} ({_fmt_span(high[2], low[2], lambda v: f'{v:.1%}')}).")
    return text, curve


@callback(Output(ids.GOODPUT_ADVICE, "children"), Output(ids.GOODPUT_ADVICE + "-curve", "figure"),
          Input(ids.GOODPUT_RATE_STORE, "data"), Input(ids.GOODPUT_ADV_GPUS, "value"),
          Input(ids.GOODPUT_ADV_RESTART, "value"), Input(ids.GOODPUT_RATE, "value"))
def update_advice(stored, gpus=1024, restart_min=15, write_min=2):
    """The advice for the rate :func:`update_rate` stored (None until it has)."""
    if not stored:
        return "Loading the failure rate…", fig.ettr_curve(None)
    rate = {k: (math.nan if stored.get(k) is None else stored[k]) for k in ADVICE_KEYS}
    text, curve = advice(rate, float(gpus or rate["gpus_per_node"]), float(restart_min or 0),
                         float(write_min or 0))
    return text, fig.ettr_curve(curve)

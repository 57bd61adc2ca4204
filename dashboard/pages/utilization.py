"""Utilisation (``/utilization``): are the GPUs we pay for busy, and who wastes them?

Allocated against utilised GPUs over time; allocated and utilised GPU-hours by rack,
partition, user or job type; the distribution of per-job utilisation; and the GPUs
allocated to a running job but idle right now, with their jobs and users. Every chart
follows the URL's range, partition and rack.
"""

from __future__ import annotations

from datetime import timedelta

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.components import Column, job_href, num
from dashboard.figures import utilization as fig
from dashboard.filters import from_query
from dashboard.formatting import fmt_time
from warehouse.queries import tensor, utilisation

dash.register_page(
    __name__, path="/utilization", name="Utilisation", order=1,
    title=lambda **_: context.page_title("Utilisation"),
    description="Allocated against utilised GPUs, by rack, partition, user and job type.",
)

IDLE_MINUTES = 15

IDLE_COLUMNS = (
    Column("rack", "Rack"), Column("node", "Node"),
    num("gpu_index", "GPU"),
    Column("job_id", "Job", href=job_href), Column("name", "Job name"),
    Column("user_name", "User"), Column("job_type", "Type"),
    Column("allocated_since", "Allocated since", lambda v: f"{v:%a %H:%M} UTC"),
    num("util_max_pct", f"Max util, {IDLE_MINUTES} min", 1, "%"),
    num("power_w", "Power", 0, "W"),
)

_ACTIVITY = (num("gpu_h", "GPU-hours", 1), num("util_pct", "GPU_UTIL", 1, "%"),
             num("sm_active_pct", "SM active", 1, "%"),
             num("tensor_active_pct", "Tensor active", 1, "%"),
             num("dram_active_pct", "DRAM active", 1, "%"))
TENSOR_COLUMNS = {
    "job": (Column("job_id", "Job", href=job_href), Column("name", "Job name"), *_ACTIVITY),
    "user": (Column("user_name", "User"), *_ACTIVITY),
}
TENSOR_CAVEAT = (
    "GPU_UTIL says a kernel ran, not how much of the GPU worked (Acme saw it at 97-99 % "
    "while SM activity was ~50 %). Tensor-pipe activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) "
    "is a proxy of model FLOPs utilisation for matmul-bound training, not a FLOP count: "
    "precision, sparsity and kernels off the tensor cores are not in it. Empty where the "
    "exporter has no profiling fields.")


def layout(**query) -> html.Div:
    f = from_query(query)
    return components.page(
        "utilization", "Utilisation", f,
        components.panel(
            "Allocated and utilised GPUs",
            "Mean GPUs allocated to jobs, and GPU-equivalents busy (utilisation / 100, "
            "summed), per time bucket.",
            components.graph(ids.UTIL_OVER_TIME)),
        components.grid(
            components.panel(
                "Where the GPU-hours go", "Allocated and utilised GPU-hours; the label is "
                "the utilisation.", components.graph(ids.UTIL_BY), wide=False,
                extra=dcc.RadioItems(
                    id=ids.UTIL_BY_KEY, value="rack", inline=True, className="segmented",
                    options=[{"label": v, "value": k} for k, v in fig.BY_LABELS.items()])),
            components.panel(
                "Per-job utilisation", "GPU-hours of jobs by their mean utilisation.",
                components.graph(ids.UTIL_JOB_DIST), wide=False),
        ),
        components.panel(
            "Tensor-core activity", TENSOR_CAVEAT,
            html.Div(components.empty("Loading…"), id=ids.UTIL_TENSOR),
            extra=dcc.RadioItems(
                id=ids.UTIL_TENSOR_BY, value="job", inline=True, className="segmented",
                options=[{"label": "Job", "value": "job"}, {"label": "User", "value": "user"}])),
        components.panel(
            "Allocated but idle now",
            f"GPUs held by a running job with utilisation below "
            f"{context.options().idle_util_pct:g} % (energy.idle_util_pct) for the "
            f"last {IDLE_MINUTES} minutes.",
            html.Div(components.empty("Loading…"), id=ids.UTIL_IDLE)),
    )


@callback(
    Output(ids.UTIL_OVER_TIME, "figure"),
    Output(ids.updated("utilization"), "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("utilization"), "n_intervals"),
)
def update_over_time(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = utilisation.allocated_vs_used(context.reader(), start=start, end=end,
                                       partition=f.partition, rack=f.rack)
    bucket = timedelta(seconds=utilisation.bucket_s(start, end))
    return (fig.utilisation_over_time(df, start=start, end=end, bucket=bucket),
            f"{f.label} · updated {fmt_time(end)}")


@callback(
    Output(ids.UTIL_BY, "figure"),
    Input(ids.FILTERS, "data"),
    Input(ids.UTIL_BY_KEY, "value"),
    Input(ids.refresh("utilization"), "n_intervals"),
)
def update_by(data, by="rack", _n=None):
    f = from_query(data)
    by = by if by in utilisation.GROUPS else "rack"
    start, end = f.window(context.now())
    df = utilisation.utilisation_by(context.reader(), by=by, start=start, end=end,
                                    partition=f.partition, rack=f.rack, limit=30)
    return fig.utilisation_by(df, by)


@callback(
    Output(ids.UTIL_JOB_DIST, "figure"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("utilization"), "n_intervals"),
)
def update_job_distribution(data, _n=None):
    f = from_query(data)
    start, end = f.window(context.now())
    df = utilisation.job_utilisation(context.reader(), start=start, end=end,
                                     partition=f.partition, rack=f.rack)
    return fig.job_utilisation_histogram(df)


@callback(
    Output(ids.UTIL_IDLE, "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.refresh("utilization"), "n_intervals"),
)
def update_idle(data, _n=None):
    f = from_query(data)
    df = utilisation.idle_allocated_now(context.reader(), now=context.now(),
                                        partition=f.partition, rack=f.rack,
                                        idle_pct=context.options().idle_util_pct,
                                        recent_min=IDLE_MINUTES)
    return components.table(df, IDLE_COLUMNS, table_id=ids.UTIL_IDLE + "-table",
                            empty_message="No idle allocated GPU: every GPU held by a "
                            "running job has worked in the last 15 minutes (or none "
                            "reported a sample).")


@callback(
    Output(ids.UTIL_TENSOR, "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.UTIL_TENSOR_BY, "value"),
    Input(ids.refresh("utilization"), "n_intervals"),
)
def update_tensor(data, by="job", _n=None):
    f = from_query(data)
    by = by if by in TENSOR_COLUMNS else "job"
    start, end = f.window(context.now())
    df = tensor.tensor_activity(context.reader(), start=start, end=end, by=by,
                                partition=f.partition, rack=f.rack, limit=100)
    return components.table(df, TENSOR_COLUMNS[by], table_id=ids.UTIL_TENSOR + "-table",
                            empty_message="No job held GPUs with hourly telemetry in this "
                            "range.")

"""Jobs (``/jobs``): find a job by id, name, user or state; its page is ``/jobs/<id>``.

The list covers jobs alive in the URL's range (an exact job id is found whatever its
age), newest first, capped at :data:`LIMIT` rows. Names and users are shown as text.
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import components, context, ids
from dashboard.components import Column, job_href, num
from dashboard.filters import from_query
from dashboard.formatting import fmt_time
from warehouse.queries import jobs

dash.register_page(
    __name__, path="/jobs", name="Jobs", order=6,
    title=lambda **_: context.page_title("Jobs"),
    description="Search jobs by id, name, user and state.",
)

LIMIT = 500  # rows (one DataTable, 50 to a page)


def _ts(v) -> str:
    return f"{v:%a %d %b %H:%M}"


JOB_COLUMNS = (
    Column("job_id", "Job", href=job_href), Column("name", "Name"),
    Column("user_name", "User"), Column("partition", "Partition"),
    Column("job_type", "Type"), Column("state", "State"),
    num("gpus", "GPUs"),
    Column("start_ts", "Started (UTC)", _ts), Column("end_ts", "Ended (UTC)", _ts),
    num("restarts", "Requeues"),
    num("gpu_h", "GPU-hours", 1, "GPU·h"),
)


def layout(**query) -> html.Div:
    f = from_query(query)
    q = str(query.get("q") or "")[:128]
    return components.page(
        "jobs", "Jobs", f,
        html.Div([
            dcc.Input(id=ids.JOBS_QUERY, type="search", value=q, debounce=True,
                      placeholder="Job id or name…", className="search"),
            dcc.Dropdown(id=ids.JOBS_USER, placeholder="Any user", className="filter"),
            dcc.Dropdown(id=ids.JOBS_STATE, placeholder="Any state", className="filter",
                         options=[{"label": s.replace("_", " ").title(), "value": s}
                                  for s in jobs.STATES]),
        ], className="search-bar"),
        components.panel("Jobs", f"Jobs alive in the selected range, newest first (at most "
                         f"{LIMIT}).", html.Div(components.empty("Loading…"),
                                                id=ids.JOBS_TABLE)),
        live=False,
    )


@callback(
    Output(ids.JOBS_USER, "options"),
    Input(ids.FILTERS, "data"),
)
def user_options(data):
    f = from_query(data)
    now = context.now()
    return jobs.users(context.reader(), now=now, start=f.window(now)[0])


@callback(
    Output(ids.JOBS_TABLE, "children"),
    Output(ids.updated("jobs"), "children"),
    Input(ids.FILTERS, "data"),
    Input(ids.JOBS_QUERY, "value"),
    Input(ids.JOBS_USER, "value"),
    Input(ids.JOBS_STATE, "value"),
)
def update_jobs(data, q=None, user=None, state=None):
    f = from_query(data)
    now = context.now()
    start, end = f.window(now)
    df = jobs.search(context.reader(), now=now, start=start, end=end, q=q, user=user,
                     state=state, partition=f.partition, rack=f.rack, limit=LIMIT)
    why = ("No job matches: try a longer range, another user or state, or clear the "
           "search." if (q or user or state) else
           f"No job ran in the {f.label.lower()} (with these partition and rack filters).")
    return (components.table(df, JOB_COLUMNS, table_id=ids.JOBS_TABLE + "-table",
                             empty_message=why),
            f"{f.label} · {_count(df)} · {fmt_time(now)}")


def _count(df) -> str:
    """``"1,234 jobs (the newest 200 shown)"``: the real count, not the display cap."""
    total = int(df["matches"].iloc[0]) if len(df) else 0
    shown = f" (the newest {len(df):,} shown)" if total > len(df) else ""
    return f"{total:,} jobs{shown}"

"""Failures: classified failed runs, breakdowns, the fleet failure rate and lemon nodes.

Reads the derived ``failures`` table (warehouse/analytics.py refreshes it); every query
is bounded by ``[start, end)`` on the run's end (naive UTC). r_f is in failures per
1,000 node-days as Meta reports it; hours elsewhere.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from gpulens.settings import default
from warehouse import reliability
from warehouse.db import fill
from warehouse.queries import fleet

#: Columns a breakdown may group by (constant SQL expressions, never user text).
GROUPS = {
    "category": "category", "reason": "category, reason", "rack": "rack", "node": "node",
    "user": "user_name", "partition": "partition", "job_type": "job_type",
    "week": "date_trunc('week', end_ts)",
}

_LIST_SQL = {  # all columns, or without the evidence (JSON text per run)
    kind: fill("""
SELECT {columns} FROM failures
WHERE end_ts >= $start AND end_ts < $end AND ($category IS NULL OR category = $category)
ORDER BY end_ts DESC, job_id, run_index
""", columns=columns) for kind, columns in (("all", "*"), ("no evidence", "* EXCLUDE (evidence)"))}

#: The failed runs of :func:`breakdowns`: ended in [$start, $end), of the categories
#: $categories (NULL: all), the partition $partition and the rack $rack (NULL: any).
_SCOPED = """
SELECT * FROM failures
WHERE end_ts >= $start AND end_ts < $end
  AND ($categories IS NULL OR list_contains($categories, category))
  AND ($partition IS NULL OR partition = $partition) AND ($rack IS NULL OR rack = $rack)
"""

#: Per breakdown of :func:`breakdowns`, its SQL over the scoped runs (``f``).
_BREAKDOWN_SQL = {name: fill("WITH f AS ({scoped}) " + sql, scoped=_SCOPED) for name, sql in {
    "rack_day": "SELECT coalesce(rack, '(unknown)') AS row, "
                "date_trunc('day', end_ts)::TIMESTAMP AS day, count(*) AS failures "
                "FROM f GROUP BY ALL ORDER BY row, day",
    "category_day": "SELECT category AS row, date_trunc('day', end_ts)::TIMESTAMP AS day, "
                    "count(*) AS failures FROM f GROUP BY ALL ORDER BY row, day",
    "reasons": "SELECT category, reason, count(*) AS failures, "
               "coalesce(sum(gpu_hours_lost), 0) AS gpu_hours_lost "
               "FROM f GROUP BY ALL ORDER BY category, reason",
    "xids": "SELECT xid, count(*) AS failures FROM (SELECT unnest(xids) AS xid FROM f) "
            "WHERE xid IS NOT NULL GROUP BY xid ORDER BY xid",
    "runs": "SELECT count(*) AS failures FROM f",
}.items()}

#: Node-days of the runs overlapping ``[$start, $end)``: each run's overlap x its nodes
#: (the distinct nodes of its allocations, else the job's node count, else its GPUs over
#: $gpus_per_node). Issue 17: a correlated subquery per run took ~1 s at 24,576 GPUs;
#: then the runs' allocations counted per run, ~240 ms of CPU; then a DISTINCT over the
#: window's runs' ``run_nodes`` rows (1.3 M for bench/scale.py's 24,576-GPU week) joined
#: back to the runs, ~270 ms. Now each run's count is kept (``run_node_counts``,
#: warehouse/run_nodes.py, migration 031) and joined to the window's runs: ~65 ms (the
#: rate + MTTF callback over 7 days ~300 -> ~85-125 ms); only the runs without
#: allocations join ``jobs``.
_EXPOSURE_SQL = """
WITH r AS (
    SELECT job_id, run_index, gpus,
           greatest(0, epoch_us(least(coalesce(end_ts, $end), $end))
                       - epoch_us(greatest(start_ts, $start))) / 8.64e10 AS days
    FROM job_runs WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
x AS (  -- the run's distinct nodes; NULL for a run without any allocation
    SELECT r.job_id, r.days, r.gpus, c.nodes
    FROM r LEFT JOIN run_node_counts c USING (job_id, run_index)
)
SELECT coalesce((SELECT sum(days * nodes) FROM x WHERE nodes IS NOT NULL), 0)
     + coalesce((SELECT sum(x.days * coalesce(j.nodes,
                                              ceil(coalesce(x.gpus, j.gpus, 0) / $gpus_per_node)))
                 FROM x LEFT JOIN jobs j USING (job_id) WHERE x.nodes IS NULL), 0)
    AS node_days
"""

_INFRA_COUNT_SQL = """
SELECT count(*) FROM failures
WHERE end_ts >= $start AND end_ts < $end AND category = 'infrastructure'
"""

#: Per node: the node-days of allocated work (``exposure``: each ``run_nodes`` row's GPUs x
#: its overlap with the window, over the node's GPUs), its infrastructure failures, the
#: failed runs that held it (``involved``) and its XIDs. ``run_nodes`` stands for the
#: allocations (issue 17: 350 -> 130 ms for bench/scale.py's 24,576-GPU week).
_NODE_SQL = """
WITH exposure AS (
    SELECT a.node, sum(a.gpus * greatest(0, epoch_us(least(coalesce(a.end_ts, $end), $end))
                                        - epoch_us(greatest(a.start_ts, $start))) / 8.64e10)
               / any_value(coalesce(n.gpus, $gpus_per_node)) AS node_days
    FROM run_nodes a LEFT JOIN nodes n USING (node)
    WHERE a.start_ts < $end AND coalesce(a.end_ts, $end) > $start
    GROUP BY a.node
),
infra AS (
    SELECT node, count(*) AS infra_failures, sum(gpu_hours_lost) AS gpu_hours_lost,
           list(DISTINCT reason) AS reasons, list(job_id || '#' || run_index) AS runs
    FROM failures WHERE end_ts >= $start AND end_ts < $end AND category = 'infrastructure'
      AND node IS NOT NULL GROUP BY node
),
involved AS (
    SELECT a.node, count(DISTINCT (f.job_id, f.run_index)) AS failed_runs_on_node
    FROM failures f JOIN run_nodes a USING (job_id, run_index)
    WHERE f.end_ts >= $start AND f.end_ts < $end GROUP BY a.node
),
xids AS (
    SELECT node, count(*) AS xids, list(DISTINCT code ORDER BY code) AS xid_codes
    FROM gpu_events WHERE kind = 'xid' AND ts >= $start AND ts < $end GROUP BY node
)
SELECT n.node, n.rack, coalesce(e.node_days, 0) AS node_days,
       coalesce(i.infra_failures, 0) AS infra_failures,
       coalesce(v.failed_runs_on_node, 0) AS failed_runs_on_node,
       coalesce(x.xids, 0) AS xids, x.xid_codes, i.reasons, i.runs,
       coalesce(i.gpu_hours_lost, 0) AS gpu_hours_lost
FROM (SELECT node, rack FROM nodes
      UNION SELECT node, NULL FROM infra WHERE node NOT IN (SELECT node FROM nodes)) n
LEFT JOIN exposure e USING (node) LEFT JOIN infra i USING (node)
LEFT JOIN involved v USING (node) LEFT JOIN xids x USING (node)
"""


def failures(cur, *, start: datetime, end: datetime, category: str | None = None,
             evidence: bool = True) -> pd.DataFrame:
    """Classified failed runs that ended in ``[start, end)``, newest first, with their
    reason, source, GPU-hours lost and (``evidence``) the evidence as JSON text."""
    kind = "all" if evidence else "no evidence"
    return cur.execute(_LIST_SQL[kind], {"start": start, "end": end, "category": category}
                       ).df()


#: The frames :func:`breakdowns` can give.
BREAKDOWNS = ("rack_day", "category_day", "reasons", "xids", "runs")


def breakdowns(cur, *, start: datetime, end: datetime, categories: list[str] | None = None,
               partition: str | None = None, rack: str | None = None,
               parts: tuple[str, ...] = BREAKDOWNS) -> dict:
    """The Failures page's breakdowns of the classified failed runs that ended in
    ``[start, end)``, of ``categories`` (None: all; a text: that one), ``partition`` and
    ``rack`` (None: any): frames ``rack_day`` and ``category_day`` (``row``: the rack,
    ``(unknown)`` where none, or the category; ``day``: naive UTC midnight; ``failures``: runs),
    ``reasons`` (category, reason, failures, gpu_hours_lost in GPU-hours, by category
    and reason), ``xids`` (xid, failures: runs with that XID on their GPUs) and ``runs``
    (the failed runs counted). Issue 17: summed here, not from every failed run's row
    in pandas (201,000 runs in a 24,576-GPU week). ``parts``: only those of them (the
    weekly report draws the reasons)."""
    if isinstance(categories, str):  # one category, not its letters
        categories = [categories]
    p = {"start": start, "end": end, "partition": partition or None, "rack": rack or None,
         "categories": None if categories is None else list(categories)}
    out = {name: cur.execute(_BREAKDOWN_SQL[name], p).df() for name in parts
           if name != "runs"}
    if "runs" in parts:
        out["runs"] = int(cur.execute(_BREAKDOWN_SQL["runs"], p).fetchall()[0][0])
    return out


def failures_by(cur, *, start: datetime, end: datetime, by: str = "category") -> pd.DataFrame:
    """Failed runs and GPU-hours lost grouped by one of :data:`GROUPS`: columns are the
    group, ``failures``, ``gpu_hours_lost`` (GPU-hours) and ``share_of_lost`` (0..1)."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    sql = fill("SELECT {group}, count(*) AS failures, sum(gpu_hours_lost) AS gpu_hours_lost,"
               " sum(gpu_hours_lost) / nullif(sum(sum(gpu_hours_lost)) OVER (), 0)"
               " AS share_of_lost FROM failures WHERE end_ts >= $start AND end_ts < $end"
               " GROUP BY ALL ORDER BY gpu_hours_lost DESC NULLS LAST", group=GROUPS[by])
    return cur.execute(sql, {"start": start, "end": end}).df()


def failure_rate(cur, *, start: datetime, end: datetime, gpus_per_node: int | None = None,
                 confidence: float = 0.95,
                 job_gpus: tuple[int, ...] = (8, 64, 512, 1024, 4096, 16384, 131072)) -> dict:
    """The fleet's infrastructure failure rate r_f and the MTTF it projects.

    r_f = infrastructure failures / node-days of runs in ``[start, end)`` (Kokolis et al.
    2024), with an exact Poisson confidence interval. Returns ``failures``,
    ``node_days``, ``r_f_per_1000_node_days``, ``r_f_low``, ``r_f_high`` (same unit) and
    ``mttf`` (a DataFrame: gpus, nodes, mttf_h and its bounds mttf_h_low/high, hours)
    and ``gpus_per_node`` (None: read from the warehouse, see warehouse/queries/fleet.py).
    """
    gpus_per_node = gpus_per_node or fleet.gpus_per_node(cur)
    p = {"start": start, "end": end}
    n = int(cur.execute(_INFRA_COUNT_SQL, p).fetchone()[0])
    node_days = float(cur.execute(_EXPOSURE_SQL, {**p, "gpus_per_node": gpus_per_node}
                                  ).fetchone()[0])
    rate = n / node_days if node_days > 0 else float("nan")
    low, high = reliability.rate_interval(n, node_days, confidence)
    rows = [{"gpus": g, "nodes": g / gpus_per_node,
             "mttf_h": reliability.mttf_hours(g, rate, gpus_per_node),
             "mttf_h_low": reliability.mttf_hours(g, high, gpus_per_node),
             "mttf_h_high": reliability.mttf_hours(g, low, gpus_per_node)}
            for g in job_gpus]
    return {"failures": n, "node_days": node_days, "confidence": confidence,
            "r_f_per_1000_node_days": 1000 * rate, "r_f_low": 1000 * low,
            "r_f_high": 1000 * high, "mttf": pd.DataFrame(rows), "gpus_per_node": gpus_per_node}


#: A failure rate from fewer events than this, or over fewer days, means little (issue
#: 19: r_f from 3 failures in 24 h had a 95 % interval of 10-146): :func:`rate_window`.
RATE_MIN_FAILURES = 10
RATE_MIN_DAYS = 30.0

_NTH_FAILURE_SQL = """
SELECT end_ts FROM failures
WHERE category = 'infrastructure' AND end_ts < $end
ORDER BY end_ts DESC LIMIT 1 OFFSET $n
"""


def rate_window(cur, *, end: datetime, min_failures: int = RATE_MIN_FAILURES,
                min_days: float = RATE_MIN_DAYS) -> tuple[datetime, datetime]:
    """A default ``[start, end)`` for :func:`failure_rate` long enough to mean something:
    at least ``min_days`` days, and further back until it holds ``min_failures``
    infrastructure failures (as far as the failures table reaches)."""
    start = end - timedelta(days=min_days)
    rows = cur.execute(_NTH_FAILURE_SQL, {"end": end, "n": max(0, min_failures - 1)}
                       ).fetchall()
    if rows and rows[0][0] < start:
        start = rows[0][0]
    return start, end


def rate_span(cur, *, start: datetime, end: datetime, rolling: bool) -> tuple[datetime, datetime]:
    """The window of the failure rate shown for a page's window ``[start, end)``: a
    rolling range (``rolling``) reaches back at least as far as :func:`rate_window`
    (a rate from 3 failures in 24 hours means little); an ISO week or a custom range is
    taken as is. The Goodput page and the fleet view both call it."""
    if rolling:
        start = min(start, rate_window(cur, end=end)[0])
    return start, end


def lemon_nodes(cur, *, start: datetime, end: datetime,
                min_failures: int = default("failures.lemon_min_failures"),
                p_value: float = default("failures.lemon_p_value"),
                gpus_per_node: int | None = None) -> pd.DataFrame:
    """Nodes ranked by how unlikely their infrastructure failures are under the fleet rate.

    expected = fleet r_f x the node's node-days of allocated work; ``p_value`` =
    P(Poisson(expected) >= observed). A node is a ``lemon`` when it has at least
    ``min_failures`` failures attributed to it and p_value < the threshold (Meta's lemon
    nodes fail jobs repeatedly yet pass health checks). Columns include the evidence:
    XID counts and codes, reasons and the failed runs. A node missing from ``nodes`` counts
    ``gpus_per_node`` GPUs (None: the fleet's typical node, warehouse/queries/fleet.py).
    """
    gpus_per_node = gpus_per_node or fleet.gpus_per_node(cur)
    params = {"start": start, "end": end, "gpus_per_node": gpus_per_node}
    df = cur.execute(_NODE_SQL, params).df()
    total_days = float(df["node_days"].sum())
    rate = float(df["infra_failures"].sum()) / total_days if total_days > 0 else 0.0
    df["expected_failures"] = df["node_days"] * rate
    df["p_value"] = [reliability.poisson_tail(int(o), float(e))
                     for o, e in zip(df["infra_failures"], df["expected_failures"], strict=True)]
    xid_mean = float(df["xids"].mean()) if len(df) else 0.0
    df["xids_vs_fleet"] = df["xids"] / xid_mean if xid_mean > 0 else 0.0
    df["lemon"] = (df["infra_failures"] >= min_failures) & (df["p_value"] < p_value)
    return df.sort_values(["lemon", "p_value", "xids"], ascending=[False, True, False]
                          ).reset_index(drop=True)

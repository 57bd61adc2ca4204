"""Queries of the Jobs pages: search, and one job's runs, GPUs, telemetry, energy, failures.

Search is bounded by the range (jobs whose life overlaps ``[start, end)``; an exact
job id is found whatever its age) and a row cap. A job's telemetry and energy read the
rollup tier fitting its length (:func:`warehouse.queries.utilisation.tier`) over its
allocation intervals, at most :data:`MAX_JOB_SPAN` back from ``now``; its energy is the
Energy page's per-run energy (warehouse/queries/energy.py) over that span.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse.analytics import Options
from warehouse.clock import ceil_hour, floor_hour
from warehouse.db import fill
from warehouse.node_minutes import BLOCK_S, MASK_BIT
from warehouse.queries import energy as qe
from warehouse.queries import energy_method as em
from warehouse.queries.job_minutes import (
    BLOCK_MINUTES,
    JOB_ALLOCATIONS,
    job_allocations,
    job_node_minutes,
)
from warehouse.queries.utilisation import TIERS, bucket_s, tier

MAX_JOB_SPAN = timedelta(days=31)
STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "NODE_FAIL", "TIMEOUT",
          "OUT_OF_MEMORY", "CANCELLED", "REQUEUED", "PREEMPTED")

_SEARCH = """
SELECT j.job_id, j.name, j.user_name, j.account, j.partition, j.job_type, j.state,
       j.submit_ts, j.start_ts, j.end_ts, j.gpus, j.nodes, j.restarts,
       count(*) OVER () AS matches,
       coalesce(j.gpus, 0) * greatest(0, epoch(least(coalesce(j.end_ts, $now), $now))
                                       - epoch(j.start_ts)) / 3600.0 AS gpu_h
FROM jobs j
WHERE ($q::VARCHAR IS NULL OR j.job_id = $q OR starts_with(j.job_id, $q)
       OR contains(lower(coalesce(j.name, '')), lower($q)))
  AND ($user::VARCHAR IS NULL OR j.user_name = $user)
  AND ($state::VARCHAR IS NULL OR j.state = $state)
  AND ($partition::VARCHAR IS NULL OR j.partition = $partition)
  AND ($rack::VARCHAR IS NULL OR j.job_id IN (
        SELECT a.job_id FROM allocations a JOIN nodes n USING (node)
        WHERE n.rack = $rack AND a.start_ts < $end
          AND (a.end_ts IS NULL OR a.end_ts >= $start)))
  AND (j.job_id = $q OR (coalesce(j.end_ts, $now) >= $start
                         AND coalesce(j.start_ts, j.submit_ts, $now) < $end))
ORDER BY coalesce(j.start_ts, j.submit_ts) DESC NULLS LAST, j.job_id
LIMIT $limit
"""

_USERS = """
SELECT user_name FROM jobs
WHERE user_name IS NOT NULL AND coalesce(end_ts, $now) >= $start
GROUP BY user_name ORDER BY user_name LIMIT $limit
"""

_JOB = "SELECT * FROM jobs WHERE job_id = $job_id"

_RUNS = """
SELECT r.run_index, r.start_ts, r.end_ts, r.state, r.exit_code, r.signal, r.reason,
       r.failed_node, coalesce(r.gpus, j.gpus) AS gpus, r.nodelist,
       greatest(0, epoch(coalesce(r.end_ts, $now)) - epoch(r.start_ts)) / 3600.0 AS hours
FROM job_runs r LEFT JOIN jobs j USING (job_id)
WHERE r.job_id = $job_id ORDER BY r.run_index LIMIT $limit
"""

_GPUS = """
SELECT a.run_index, n.rack, a.node, a.gpu_index, a.start_ts, a.end_ts
FROM allocations a LEFT JOIN nodes n USING (node)
WHERE a.job_id = $job_id ORDER BY a.run_index, a.node, a.gpu_index LIMIT $limit
"""

#: Of the job's allocations (:func:`job_minutes.job_allocations`' view).
_HELD_RUNS = "SELECT DISTINCT run_index FROM job_allocations"

_SPAN = """
SELECT CASE WHEN min(start_ts) IS NOT NULL THEN greatest(min(start_ts), $floor::TIMESTAMP) END,
       least(max(coalesce(end_ts, $now::TIMESTAMP)), $now::TIMESTAMP)
FROM job_allocations WHERE start_ts <= $now
"""

#: Each rollup row of ``{tier}`` on a GPU the job held, once per allocation of the job
#: that overlaps its bucket (``share``: the part of the bucket the allocation covers).
_ON_JOB_GPUS = """
s AS (
    SELECT t.*, al.run_index,
           (epoch(least(al.end_ts, t.ts + to_seconds($step_s)))
            - epoch(greatest(al.start_ts, t.ts))) / $step_s AS share
    FROM {tier} t JOIN al ON t.node = al.node AND t.gpu_index = al.gpu_index
        AND t.ts < al.end_ts AND t.ts + to_seconds($step_s) > al.start_ts
    WHERE t.ts >= $start - to_seconds($step_s) AND t.ts < $end
)"""

_TELEMETRY_ROWS_SQL = """
WITH {al}, {on_job_gpus}
SELECT time_bucket(to_seconds($bucket_s), ts) AS ts,
       count(DISTINCT (node, gpu_index)) AS gpus,
       avg(util_pct_avg) AS util_mean_pct, min(util_pct_avg) AS util_min_pct,
       avg(temp_c_avg) AS temp_mean_c, max(temp_c_max) AS temp_max_c,
       sum(power_w_avg) / 1000.0 / count(DISTINCT s.ts) AS power_kw,
       sum(throttle_thermal_s) AS throttle_thermal_s
FROM s GROUP BY 1 ORDER BY 1
"""

#: The same figures from the minute tier (issue 17: an 8,192-GPU job's day was 8.5 M
#: minute rows joined with its allocations). Where, in a minute, every GPU row of a node
#: belongs to a GPU the job held once (``gpu_mask`` within the GPUs its allocations of
#: that node overlap, no GPU twice), the node's sums in ``gpu_nodes_1m`` stand for its
#: rows (warehouse/node_minutes.py); the other node-minutes (a GPU of the node not held,
#: one held by two runs, an index beyond 0-63) join their GPU rows with the allocations,
#: as the hour tier's do. Either way a row counts once per allocation of the job that
#: overlaps its minute. GPUs per bucket: per node, the union of its minutes' bits, plus
#: the GPUs without one.
_TELEMETRY_MINUTES_SQL = """
WITH {al},
{node_minutes},
{rows}
per_node AS (  -- per bucket and node; a minute's bit: its place in the bucket
    SELECT time_bucket(to_seconds($bucket_s), ts) AS ts, node,
           coalesce(bit_count(bit_or(bits)), 0) AS gpus,
           bit_or({mins}::UBIGINT << ((epoch(ts) - epoch(time_bucket(to_seconds($bucket_s), ts)))
                                      // 60)::UBIGINT) AS minutes,
           sum(util_n) AS util_n, sum(util_sum) AS util_sum, min(util_min) AS util_min,
           sum(temp_n) AS temp_n, sum(temp_c_sum) AS temp_c_sum, max(temp_c_max) AS temp_c_max,
           sum(power_w_sum) AS power_w_sum, sum(throttle_thermal_s) AS throttle_thermal_s,
           count(*) FILTER (WHERE NOT whole) AS not_whole
    FROM rows GROUP BY ALL
),
{odd}
SELECT ts, (sum(gpus) + coalesce(any_value(odd.n), 0))::BIGINT AS gpus,
       sum(util_sum) / nullif(sum(util_n), 0) AS util_mean_pct, min(util_min) AS util_min_pct,
       sum(temp_c_sum) / nullif(sum(temp_n), 0) AS temp_mean_c, max(temp_c_max) AS temp_max_c,
       sum(power_w_sum) / 1000.0 / bit_count(bit_or(minutes)) AS power_kw,
       sum(throttle_thermal_s) AS throttle_thermal_s, sum(not_whole) AS not_whole
FROM per_node LEFT JOIN odd USING (ts) GROUP BY 1 ORDER BY 1
"""
_TELEMETRY_FIRST = "date_trunc('minute', $start::TIMESTAMP - INTERVAL 1 MICROSECOND)"
_TELEMETRY_COLUMNS = ("ts", "node", "gpu_mask", "util_n", "util_pct_sum", "util_pct_min",
                      "temp_n", "temp_c_sum", "temp_c_max", "power_w_sum",
                      "throttle_thermal_s")
#: Where a node-minute is not whole, its GPU rows (``s``) instead of its sums; GPUs
#: without a bit counted apart (``odd``).
#: The GPU rows are found by their minutes, between the first and last (a few distinct
#: ones: DuckDB filters the minute tier's scan with them instead of reading the job's
#: whole range of every GPU; the bounds hold where its plan does not).
#: ``{part_ts}``: a ``d`` row's minutes; ``{mins}``: its minutes' bits.
_ROWS_ALL = fill("""part AS (SELECT node, {part_ts} AS ts FROM d WHERE NOT whole),
{on_job_gpus},
rows AS (  -- one row per node-minute served whole, one per GPU row and allocation else
    SELECT ts, node, gpu_mask AS bits, {mins} AS mins, util_n,
           util_pct_sum AS util_sum, util_pct_min AS util_min, temp_n, temp_c_sum,
           temp_c_max, power_w_sum, throttle_thermal_s, whole
    FROM d WHERE whole
    UNION ALL
    SELECT ts, node, {s_bit}, 1, (util_pct_avg IS NOT NULL)::INTEGER, util_pct_avg,
           util_pct_avg, (temp_c_avg IS NOT NULL)::INTEGER, temp_c_avg, temp_c_max,
           power_w_avg, throttle_thermal_s, true
    FROM s
),""", s_bit=MASK_BIT, on_job_gpus=fill(
    _ON_JOB_GPUS, tier="(SELECT * FROM gpu_samples_1m SEMI JOIN part USING (node, ts) "
                       "WHERE ts IN (SELECT ts FROM part) AND ts >= (SELECT min(ts) FROM part)"
                       " AND ts <= (SELECT max(ts) FROM part))"))
_ODD_ALL = """odd AS (  -- GPUs without a bit (index beyond 0-63), on the row path only
    SELECT time_bucket(to_seconds($bucket_s), ts) AS ts, count(DISTINCT (node, gpu_index)) AS n
    FROM s WHERE gpu_index NOT BETWEEN 0 AND 63 GROUP BY 1
)"""
#: The first try: every node-minute's sums, ``not_whole`` counting those that are not
#: whole. Where none is (whole-node jobs), these are the figures, in one pass over ``d``
#: (the full query above reads ``d`` twice, which DuckDB materialises: ~30 % of its CPU).
_ROWS_WHOLE = """rows AS (
    SELECT ts, node, gpu_mask AS bits, {mins} AS mins, util_n, util_pct_sum AS util_sum,
           util_pct_min AS util_min, temp_n, temp_c_sum, temp_c_max, power_w_sum,
           throttle_thermal_s, whole
    FROM d
),"""
_NO_ODD = "odd AS (SELECT NULL::TIMESTAMP AS ts, 0 AS n WHERE false)"
#: Keyed by (blocks, first try). ``blocks``: from the 5-minute blocks where the job held a
#: node all of one (issue 17: an 8,192-GPU job's day read 1.2 M node-minutes, ~0.3 s),
#: for buckets of whole blocks (``node_minutes.BLOCK_S``); a row's minutes are its bits.
#: There ``d`` is small (a fifth of the rows), so there is no first try: the full query
#: at once (an 8,192-GPU job with two buckets not whole: the first try ~175 ms, then the
#: full query ~200 ms).
_TELEMETRY_MINUTES = {
    (blocks, first): fill(
        _TELEMETRY_MINUTES_SQL, al=JOB_ALLOCATIONS, mins="mins",
        node_minutes=job_node_minutes(_TELEMETRY_FIRST, _TELEMETRY_COLUMNS, blocks=blocks),
        rows=(fill(_ROWS_WHOLE, mins="1") if first else
              fill(_ROWS_ALL, mins="minutes" if blocks else "1",
                   part_ts=BLOCK_MINUTES if blocks else "ts")),
        odd=_NO_ODD if first else _ODD_ALL)
    for blocks, first in ((False, True), (False, False), (True, False))}

#: The row path for any tier, keyed by table (the hour tier's query; the minute tier's
#: when a bucket holds more minutes than ``per_node.minutes`` has bits).
_TELEMETRY_ROWS = {table: fill(_TELEMETRY_ROWS_SQL, al=JOB_ALLOCATIONS,
                               on_job_gpus=fill(_ON_JOB_GPUS, tier=table)) for table in TIERS}
MINUTES_BUCKET_MAX_S = 64 * 60  # a bucket's minutes are bits of a UBIGINT

_FAILURES = """
SELECT run_index, start_ts, end_ts, state, node, rack, category, reason, source, xids,
       evidence, since_checkpoint_h, restart_overhead_h, gpu_hours_lost, checkpoint_known
FROM failures WHERE job_id = $job_id ORDER BY run_index LIMIT $limit
"""


def search(cur, *, now: datetime, start: datetime, end: datetime, q: str | None = None,
           user: str | None = None, state: str | None = None, partition: str | None = None,
           rack: str | None = None, limit: int = 200) -> pd.DataFrame:
    """Jobs alive in ``[start, end)`` matching the criteria, newest first.

    ``q`` matches a job id exactly or as a prefix, or appears in the job name (plain
    text, no wildcards). Columns: job_id, name, user_name, account, partition,
    job_type, state, submit_ts, start_ts, end_ts, gpus, nodes, restarts, gpu_h
    (GPU-hours so far), matches (how many jobs match before ``limit`` cuts the list).
    """
    params = {"now": now, "start": start, "end": end, "q": (q or "").strip() or None,
              "user": user or None, "state": state or None, "partition": partition,
              "rack": rack, "limit": limit}
    return cur.execute(_SEARCH, params).df()


def users(cur, *, now: datetime, start: datetime, limit: int = 2000) -> list[str]:
    """User names of jobs alive since ``start``."""
    rows = cur.execute(_USERS, {"now": now, "start": start, "limit": limit}).fetchall()
    return [r[0] for r in rows]


def job(cur, *, job_id: str) -> dict | None:
    """The job's row as a dict (columns of ``jobs``), or None if unknown."""
    df = cur.execute(_JOB, {"job_id": job_id}).df()
    return None if df.empty else df.iloc[0].to_dict()


def runs(cur, *, job_id: str, now: datetime, limit: int = 500) -> pd.DataFrame:
    """The job's runs: run_index, start_ts, end_ts, state, exit_code, signal, reason,
    failed_node, gpus, nodelist, hours (wall hours, to ``now`` while running)."""
    return cur.execute(_RUNS, {"job_id": job_id, "now": now, "limit": limit}).df()


def gpus(cur, *, job_id: str, limit: int = 5000) -> pd.DataFrame:
    """The job's GPUs per run: run_index, rack, node, gpu_index, start_ts, end_ts."""
    return cur.execute(_GPUS, {"job_id": job_id, "limit": limit}).df()


def _span(own, now: datetime) -> tuple[datetime, datetime] | None:
    """The job's span to ``now`` (at most :data:`MAX_JOB_SPAN`), on a cursor of
    :func:`job_minutes.job_allocations`; None when it held nothing before ``now``."""
    lo, hi = own.execute(_SPAN, {"now": now, "floor": now - MAX_JOB_SPAN}).fetchone()
    if lo is None or hi is None or hi <= lo:
        return None
    return lo, hi


def span(cur, *, job_id: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The span :func:`telemetry` and :func:`energy` read: from the job's first
    allocation (at most :data:`MAX_JOB_SPAN` before ``now``) to its last end or ``now``."""
    with job_allocations(cur, job_id) as own:
        return _span(own, now)


def telemetry(cur, *, job_id: str, now: datetime) -> pd.DataFrame:
    """The telemetry of the job's GPUs over its allocations, aggregated per bucket.

    Columns: ts, gpus (reporting), util_mean_pct, util_min_pct (percent), temp_mean_c,
    temp_max_c (°C), power_kw (total, kW), throttle_thermal_s (GPU-seconds throttled).
    Empty when the job never held a GPU.
    """
    with job_allocations(cur, job_id) as own:
        span = _span(own, now)
        if span is None:
            return pd.DataFrame(columns=["ts", "gpus", "util_mean_pct", "util_min_pct",
                                         "temp_mean_c", "temp_max_c", "power_kw",
                                         "throttle_thermal_s"])
        start, end = span
        table = tier(start, end)
        width = bucket_s(start, end)
        if table != "gpu_samples_1m" or width > MINUTES_BUCKET_MAX_S:
            return own.execute(_TELEMETRY_ROWS[table], {
                "start": start, "end": end, "step_s": TIERS[table], "bucket_s": width}).df()
        return _minute_telemetry(own, start, end, width)


def minute_telemetry(cur, *, job_id: str, start: datetime, end: datetime,
                     bucket_s: int) -> pd.DataFrame:
    """:func:`telemetry`'s figures from the minute tier over ``[start, end)`` in buckets
    of ``bucket_s`` seconds (whole minutes, at most :data:`MINUTES_BUCKET_MAX_S`) from the
    per-node sums where the job held the node's GPUs (5-minute blocks where a bucket holds
    whole blocks), from the GPU rows elsewhere."""
    with job_allocations(cur, job_id) as own:
        return _minute_telemetry(own, start, end, bucket_s)


def _minute_telemetry(own, start: datetime, end: datetime, bucket_s: int) -> pd.DataFrame:
    params = {"start": start, "end": end, "bucket_s": int(bucket_s)}
    full = {**params, "step_s": TIERS["gpu_samples_1m"]}
    if bucket_s % BLOCK_S == 0:
        return own.execute(_TELEMETRY_MINUTES[True, False], full).df().drop(
            columns="not_whole")
    df = own.execute(_TELEMETRY_MINUTES[False, True], params).df()
    if df["not_whole"].sum() > 0:  # some node-minutes need their GPU rows
        df = own.execute(_TELEMETRY_MINUTES[False, False], full).df()
    return df.drop(columns="not_whole")


def energy(cur, *, job_id: str, now: datetime, opts: Options | None = None) -> pd.DataFrame:
    """Energy and carbon of each of the job's runs, counted as the Energy page counts
    them (:func:`warehouse.queries.energy.run_energy`: GPU energy, the node's non-GPU
    share, PUE, grid intensity). Columns: run_index, gpu_hours, gpu_kwh, it_kwh,
    facility_kwh, carbon_kg, embodied_kg, method (how the GPU energy was measured:
    warehouse/queries/energy_method.py). Empty when the job never held a GPU.

    Read over whole hours, from the hour of the job's first allocation to the hour after
    its last (never past ``now``, nor before ``now - MAX_JOB_SPAN``): the runs have no
    usage outside their allocations, and the hours the usage table holds are read there,
    priced per hour as the Energy page prices them, instead of every GPU's minutes of a
    partial first or last hour (issue 17: the first 45 minutes of an 8,192-GPU job were
    ~0.25 s of CPU)."""
    cols = ["run_index", "gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg",
            "embodied_kg", "method"]
    with job_allocations(cur, job_id) as own:
        span = _span(own, now)
        if span is None:
            return pd.DataFrame(columns=cols)
        runs = [(job_id, int(r)) for (r,) in own.execute(_HELD_RUNS).fetchall()]
        how = em.run_methods(own, start=span[0], end=span[1], runs=runs, job_rows=True)
    lo = max(floor_hour(span[0]), now - MAX_JOB_SPAN)  # never before the span's floor
    df = qe.run_energy(cur, start=lo, end=min(ceil_hour(span[1]), now), opts=opts, runs=runs)
    df = df.merge(how[["job_id", "run_index", "method"]], on=["job_id", "run_index"],
                  how="left")
    return df.sort_values("run_index", ignore_index=True)[cols]


def failures(cur, *, job_id: str, limit: int = 500) -> pd.DataFrame:
    """The classified failures of the job's runs (table ``failures``), with evidence."""
    return cur.execute(_FAILURES, {"job_id": job_id, "limit": limit}).df()

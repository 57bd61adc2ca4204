"""Queries of the Utilisation page: allocated against utilised GPUs, by group, idle now.

Telemetry comes from a rollup tier chosen by the range (:func:`tier`): ``gpu_samples_1m``
up to :data:`MINUTE_TIER_MAX`, ``gpu_samples_1h`` beyond, so a 30-day view reads ~720
rows per GPU instead of 172,800 raw ones. Every function takes ``start``/``end`` (naive
UTC, ``[start, end)``), optional ``partition`` and ``rack`` filters (None = all) and a
row cap where rows are listed. Table names come from the fixed :data:`TIERS`; values are
always parameters.

"Allocated" is the time a GPU spent in ``allocations`` intervals (open intervals end at
``end``) in minutes with telemetry; "utilised" is ``util_pct / 100`` of those
GPU-seconds, so a GPU allocated for an hour at 25 % utilisation is 1 allocated and 0.25
utilised GPU-hour. :func:`utilisation_by` and :func:`job_utilisation` read whole hours
from ``gpu_usage_1h`` and the rest live, minute by minute (warehouse/usage.py:plan);
where the 1-minute tier does not reach, hourly rows are joined with each allocation
expanded to the hours it touches (an equi-join).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from gpulens.settings import default
from warehouse import run_usage, usage
from warehouse.db import fill, own_cursor, transaction
from warehouse.queries import fleet
from warehouse.usage import MINUTE_TIER_MAX, SCOPE

TIERS = {"gpu_samples_1m": 60, "gpu_samples_1h": 3600}  # table -> bucket seconds
NICE_STEPS_S = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
DEFAULT_LIMIT = 500

#: Group keys of :func:`utilisation_by` (fixed SQL expressions, never user text).
GROUPS = {"rack": "n.rack", "partition": "n.partition",
          "user": "coalesce(j.user_name, '(unknown)')",
          "job_type": "coalesce(j.job_type, '(unknown)')"}


def tier(start: datetime, end: datetime) -> str:
    """The rollup table to read for ``[start, end)``."""
    return "gpu_samples_1m" if end - start <= MINUTE_TIER_MAX else "gpu_samples_1h"


def bucket_s(start: datetime, end: datetime, points: int = 160) -> int:
    """A round bucket width giving about ``points`` buckets, never finer than the tier."""
    floor = TIERS[tier(start, end)]
    want = (end - start).total_seconds() / points
    return max(floor, next((s for s in NICE_STEPS_S if s >= want), NICE_STEPS_S[-1]))


def scope_params(start, end, partition=None, rack=None, **extra) -> dict:
    """Parameters shared by the scoped queries (also used by thermal and topology)."""
    return {"start": start, "end": end, "partition": partition, "rack": rack, **extra}


def per_tier(template: str) -> dict[str, str]:
    """``template`` with its ``{tier}`` marker filled by each rollup table, by table."""
    return {table: fill(template, tier=table) for table in TIERS}


#: GPUs allocated per bucket without grouping the allocations by span (issue 17: the
#: ~1.2 M distinct spans of a 24,576-GPU week's 4.9 M allocations grouped for the range
#: join with the buckets, ~190 ms of ~350). The GPU-time held before a bucket boundary
#: ``t`` is ``sum over spans started before t of (t - lo) - sum over spans ended before t
#: of (t - hi)``: counts and sums of the spans' ends per bucket, accumulated, in integer
#: microseconds from the first bucket (exact; the join summed double seconds). A bucket's
#: allocated GPUs are the difference at its two boundaries over its width. Spans are
#: valid (the collectors refuse an end before its start).
_OVER_TIME_SQL = fill("""
WITH buckets AS (
    SELECT unnest(range(time_bucket(to_seconds($bucket_s), $start::TIMESTAMP),
                        $end::TIMESTAMP, to_seconds($bucket_s))) AS ts
),
installed AS (
    SELECT count(*) AS gpus FROM gpus g JOIN nodes n USING (node) WHERE {scope}
),
alloc AS (  -- each allocation's span in the range, microseconds from the first bucket
    SELECT epoch_us(greatest(a.start_ts, $start::TIMESTAMP)) - epoch_us(f.b0) AS lo,
           epoch_us(least(coalesce(a.end_ts, $end::TIMESTAMP), $end::TIMESTAMP))
               - epoch_us(f.b0) AS hi
    FROM allocations a JOIN nodes n USING (node),
         (SELECT time_bucket(to_seconds($bucket_s), $start::TIMESTAMP) AS b0) f
    WHERE a.start_ts < $end AND (a.end_ts IS NULL OR a.end_ts > $start) AND {scope}
),
pairs AS (  -- per (bucket of the start, bucket of the end): spans and their ends' sums
    SELECT lo // ($bucket_s::BIGINT * 1000000) AS klo, hi // ($bucket_s::BIGINT * 1000000) AS khi,
           count(*) AS n, sum(lo::HUGEINT) AS slo, sum(hi::HUGEINT) AS shi
    FROM alloc GROUP BY ALL
),
steps AS (  -- from boundary k + 1 on, a span started (or ended) in bucket k is counted
    SELECT klo + 1 AS j, sum(n) AS dn, sum(slo) AS ds FROM pairs GROUP BY 1
    UNION ALL
    SELECT khi + 1, -sum(n), -sum(shi) FROM pairs GROUP BY 1
),
cum AS (
    SELECT j, sum(sum(dn)) OVER (ORDER BY j) AS c, sum(sum(ds)) OVER (ORDER BY j) AS s
    FROM steps GROUP BY j
),
held AS (  -- GPU-microseconds held before each bucket boundary j: j x width x c - s
    SELECT k.j, coalesce(k.j * ($bucket_s::BIGINT * 1000000) * cm.c - cm.s, 0) AS g
    FROM (SELECT range AS j FROM range(0, (SELECT count(*) FROM buckets) + 1)) k
    ASOF LEFT JOIN cum cm ON k.j >= cm.j
),
allocated AS (  -- a bucket's GPU-microseconds over its width: the GPUs held on average
    SELECT b.ts, (h1.g - h0.g) / ($bucket_s::BIGINT * 1000000) AS allocated_gpus
    FROM (SELECT ts, row_number() OVER (ORDER BY ts) - 1 AS j FROM buckets) b
    JOIN held h0 ON h0.j = b.j JOIN held h1 ON h1.j = b.j + 1
),
per_ts AS (  -- first per rollup timestamp, then the mean over the display bucket
    {per_ts}
    WHERE t.ts >= $start AND t.ts < $end
      AND ($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL
           OR t.node IN (SELECT node FROM nodes n WHERE {scope}))
    GROUP BY t.ts
),
used AS (
    SELECT time_bucket(to_seconds($bucket_s), ts) AS ts, avg(gpus) AS gpus_reporting,
           avg(busy) AS utilised_gpus, avg(kw) AS power_kw
    FROM per_ts GROUP BY 1
)
SELECT b.ts, (SELECT gpus FROM installed) AS gpus_installed,
       u.gpus_reporting, coalesce(a.allocated_gpus, 0) AS allocated_gpus,
       u.utilised_gpus, u.power_kw
FROM buckets b LEFT JOIN allocated a USING (ts) LEFT JOIN used u USING (ts)
WHERE b.ts >= time_bucket(to_seconds($bucket_s), $start::TIMESTAMP)
ORDER BY b.ts
""", scope=SCOPE)

#: GPUs reporting, busy GPU-equivalents and kW per rollup timestamp: the minute tier's
#: from its per node sums (issue 17: 8x fewer rows than the GPUs' minute rows, the
#: same figures; warehouse/node_minutes.py), the hour tier's from its rows.
_PER_TS = {
    "gpu_samples_1m": """SELECT t.ts, sum(t.gpus) AS gpus, sum(t.util_pct_sum) / 100.0 AS busy,
           sum(t.power_w_sum) / 1000.0 AS kw
    FROM gpu_nodes_1m t""",
    "gpu_samples_1h": """SELECT t.ts, count(*) AS gpus, sum(t.util_pct_avg) / 100.0 AS busy,
           sum(t.power_w_avg) / 1000.0 AS kw
    FROM gpu_samples_1h t"""}
_OVER_TIME = {table: fill(_OVER_TIME_SQL, per_ts=_PER_TS[table]) for table in TIERS}

#: A usage source ``u`` (warehouse/usage.py) from the 1-hour tier: per GPU-hour in scope,
#: each allocation's seconds in the hour and their share of the hour's utilisation.
_HOUR_SOURCE = fill("""
s AS (
    SELECT t.ts, t.node, t.gpu_index, coalesce(t.util_pct_avg, 0) AS util
    FROM gpu_samples_1h t JOIN nodes n USING (node)
    WHERE t.ts >= $start AND t.ts < $end AND {scope}
),
al AS (
    SELECT job_id, node, gpu_index, greatest(start_ts, $start::TIMESTAMP) AS lo,
           least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS hi
    FROM allocations
    WHERE start_ts < $end AND (end_ts IS NULL OR end_ts > $start)
),
alb AS (  -- each allocation once per hour it touches: an equi-join, not a range join
    SELECT al.*, unnest(range(date_trunc('hour', lo), hi, INTERVAL 1 HOUR)) AS ts
    FROM al WHERE hi > lo
),
u AS (
    SELECT ts, node, job_id, gpu_s, gpu_s * util / 100.0 AS util_s
    FROM (SELECT s.ts, s.node, alb.job_id, s.util,
                 epoch(least(alb.hi, s.ts + INTERVAL 1 HOUR)) - epoch(greatest(alb.lo, s.ts))
                 AS gpu_s
          FROM s JOIN alb USING (node, gpu_index, ts))
)""", scope=SCOPE)


def _per_path(template: str, per: str) -> dict[str, str]:
    """``template`` over each part path's usage source (warehouse/usage.py:plan) summed
    as ``per`` (:data:`_PER`), and for a job's key (``per``: its ``"job"``) over the
    table's hours kept per run (``"kept"``, :data:`_PER_KEPT`)."""
    sources = {"table": usage.TABLE, "minute": usage.minutes(free=False),
               "hour": _HOUR_SOURCE}
    out = {path: fill(template, source=src + ",", per=_PER[per])
           for path, src in sources.items()}
    if per == "job":
        out["kept"] = fill(template, source="", per=_PER_KEPT)
    return out


#: Group keys of :data:`GROUPS` that are the node's (the others are the job's).
_NODE_KEYS = ("rack", "partition")

#: Allocated and utilised GPU-seconds of the usage source summed per node (for a node's
#: key) or per job of a node in the topology (for a job's key) first: the join sees 3,072
#: rows, or the week's jobs, not the 1.3 M job and node pairs of a 24,576-GPU week that
#: were summed per pair first (issue 17; the queries alone over that week: by rack 0.19
#: -> 0.025 s, by user 0.23 -> 0.12 s, the job distribution 0.14 -> 0.07 s). Only nodes of
#: the topology count, as before.
_PER = {"node": """
per AS (
    SELECT node, sum(gpu_s) AS alloc_s, sum(util_s) AS used_s
    FROM u WHERE job_id IS NOT NULL GROUP BY node
)""", "job": """
per AS (
    SELECT job_id, sum(gpu_s) AS alloc_s, sum(util_s) AS used_s
    FROM u WHERE job_id IS NOT NULL AND node IN (SELECT node FROM nodes) GROUP BY job_id
)"""}
#: The same per job from the table's hours kept per run (warehouse/run_usage.py: only
#: rows of nodes the topology listed, as ``nodes`` still does while it serves; a range
#: without a partition or rack; issue 17: 1.5 M rows of a 24,576-GPU week summed per
#: job took ~0.12 s, their 603,217 sums per run ~0.06 s).
_PER_KEPT = """
per AS (
    SELECT job_id, sum(gpu_s) AS alloc_s, sum(util_s) AS used_s FROM run_usage_1h
    WHERE ts >= $start AND ts < $end AND known GROUP BY job_id
)"""
_JOINS = {"node": "JOIN nodes n USING (node)", "job": "LEFT JOIN jobs j USING (job_id)"}


def _side(key: str) -> str:
    """Whether the group key ``key`` of :data:`GROUPS` is the node's or the job's."""
    return "node" if key in _NODE_KEYS else "job"


#: Allocated and utilised GPU-hours per group.
_BY = {key: _per_path(fill("""
WITH {source}{per}
SELECT {expr} AS "group", sum(alloc_s) / 3600.0 AS allocated_gpu_h,
       sum(used_s) / 3600.0 AS utilised_gpu_h
FROM per x {join}
GROUP BY 1
""", expr=expr, join=_JOINS[_side(key)]), _side(key)) for key, expr in GROUPS.items()}

_JOBS = _per_path("""
WITH {source}{per}
SELECT job_id, alloc_s / 3600.0 AS allocated_gpu_h, used_s / 3600.0 AS utilised_gpu_h
FROM per
""", "job")

_JOB_INFO = """
SELECT job_id, name, user_name, job_type, state, gpus FROM jobs
WHERE job_id IN (SELECT unnest($ids::VARCHAR[]))
"""

_IDLE_NOW = fleet.per_latest(fill("""
WITH latest AS (
    SELECT node, gpu_index, ts, util_pct, power_w, mem_used_mib FROM {latest_rows} r
),
recent AS (
    SELECT node, gpu_index, max(util_pct_max) AS util_max_pct
    FROM gpu_samples_1m WHERE ts >= $recent_since AND ts <= $now GROUP BY ALL
),
allocated AS (
    SELECT a.job_id, a.node, a.gpu_index, a.start_ts FROM allocations a
    WHERE a.start_ts <= $now AND (a.end_ts IS NULL OR a.end_ts > $now)
)
SELECT n.rack, a.node, a.gpu_index, a.job_id, j.name, j.user_name, j.job_type,
       a.start_ts AS allocated_since, l.util_pct, r.util_max_pct, l.power_w,
       l.mem_used_mib
FROM allocated a JOIN latest l USING (node, gpu_index) JOIN nodes n USING (node)
LEFT JOIN recent r USING (node, gpu_index) LEFT JOIN jobs j USING (job_id)
WHERE l.util_pct < $idle_pct AND coalesce(r.util_max_pct, 0) < $idle_pct AND {scope}
ORDER BY a.start_ts, a.node, a.gpu_index LIMIT $limit
""", scope=SCOPE))

_ENERGY = per_tier(fill("""
SELECT sum(t.energy_j) / 3.6e6 AS energy_kwh
FROM {tier} t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end AND {scope}
""", scope=SCOPE))


def allocated_vs_used(cur, *, start: datetime, end: datetime, partition: str | None = None,
                      rack: str | None = None) -> pd.DataFrame:
    """GPUs allocated and utilised over time, one row per bucket (:func:`bucket_s`).

    Columns: ts (bucket start), gpus_installed, gpus_reporting (mean GPUs with a
    sample), allocated_gpus (mean GPUs allocated), utilised_gpus (sum of util_pct / 100
    over reporting GPUs: GPU-equivalents busy), power_kw (mean total GPU power, kW).
    """
    params = scope_params(start, end, partition, rack, bucket_s=bucket_s(start, end))
    return cur.execute(_OVER_TIME[tier(start, end)], params).df()


#: The parts' rows summed per key (:func:`_usage_parts`, ``{parts}``: usage.union), largest
#: first, cut to $limit.
_TOP_SQL = """
SELECT * FROM ({parts}) ORDER BY allocated_gpu_h DESC NULLS LAST, {order} LIMIT $limit
"""
_SUMS = ["allocated_gpu_h", "utilised_gpu_h"]


def _usage_parts(cur, sqls: dict[str, str], keys: list[str], start: datetime,
                 end: datetime, partition: str | None, rack: str | None,
                 limit: int) -> pd.DataFrame:
    """Allocated and utilised GPU-hours per ``keys``, summed over the range's parts, the
    ``limit`` largest (ties by key), with util_pct (percent of allocated). Summed and
    cut in SQL (issue 17: the Jobs distribution's 590,000 jobs of a 24,576-GPU week went
    to pandas to be summed, sorted and cut: ~270 ms of ~480)."""
    params = scope_params(start, end, partition, rack, runs=None, idle_pct=0.0)
    with own_cursor(cur) as own, transaction(own):  # the kept rows run_usage.serves checked
        plan = usage.plan(own, start, end)
        kept = ("kept" in sqls and partition is None and rack is None  # checked only
                and any(p.path == "table" for p in plan) and run_usage.serves(own))  # if read
        parts = [usage.bind(sqls["kept" if kept and p.path == "table" else p.path],
                            **{**params, "start": p.start, "end": p.end}) for p in plan]
        if not parts:
            df = pd.DataFrame(columns=[*keys, *_SUMS])
        else:
            quoted = [f'"{k}"' for k in keys]  # "group" is a keyword
            sql, bound = usage.union(parts, quoted, _SUMS, empty="")  # parameters apart
            df = own.execute(fill(_TOP_SQL, parts=sql, order=", ".join(
                f"{k} ASC NULLS LAST" for k in quoted)), {**bound, "limit": int(limit)}).df()
    df["util_pct"] = 100.0 * df["utilised_gpu_h"] / df["allocated_gpu_h"].where(
        df["allocated_gpu_h"] != 0)
    return df


def utilisation_by(cur, *, by: str, start: datetime, end: datetime,
                   partition: str | None = None, rack: str | None = None,
                   limit: int = 50) -> pd.DataFrame:
    """Allocated and utilised GPU-hours per ``by`` (rack, partition, user or job_type).

    Columns: group, allocated_gpu_h, utilised_gpu_h (GPU-hours), util_pct (percent),
    the largest ``limit`` groups by allocated GPU-hours.
    """
    if by not in GROUPS:
        raise ValueError(f"by={by!r}: expected one of {', '.join(GROUPS)}")
    return _usage_parts(cur, _BY[by], ["group"], start, end, partition, rack, limit)


def job_utilisation(cur, *, start: datetime, end: datetime, partition: str | None = None,
                    rack: str | None = None, limit: int = 2000) -> pd.DataFrame:
    """Per job in the range: job_id, name, user_name, job_type, state, gpus,
    allocated_gpu_h (GPU-hours in the range) and util_pct (GPU-hour-weighted mean)."""
    df = _usage_parts(cur, _JOBS, ["job_id"], start, end, partition, rack, limit)
    info = cur.execute(_JOB_INFO, {"ids": df["job_id"].tolist()}).df()
    df = df.merge(info, on="job_id", how="left")
    return df[["job_id", "name", "user_name", "job_type", "state", "gpus",
               "allocated_gpu_h", "util_pct"]]


def idle_allocated_now(cur, *, now: datetime, partition: str | None = None,
                       rack: str | None = None,
                       idle_pct: float = default("energy.idle_util_pct"),
                       recent_min: float = 15, stale_after_s: float = fleet.STALE_AFTER_S,
                       limit: int = DEFAULT_LIMIT) -> pd.DataFrame:
    """GPUs allocated to a running job but idle: latest sample and every minute of the
    last ``recent_min`` minutes below ``idle_pct`` percent utilisation.

    Columns: rack, node, gpu_index, job_id, name, user_name, job_type, allocated_since,
    util_pct (latest), util_max_pct (max over the recent minutes), power_w, mem_used_mib.
    """
    params = {
        "now": now, "since": now - timedelta(seconds=stale_after_s),
        "recent_since": now - timedelta(minutes=recent_min), "idle_pct": float(idle_pct),
        "partition": partition, "rack": rack, "limit": limit,
    }
    return cur.execute(_IDLE_NOW[fleet.latest_source(cur, now)], params).df()


def fleet_energy_kwh(cur, *, start: datetime, end: datetime, partition: str | None = None,
                     rack: str | None = None) -> float:
    """GPU energy used in ``[start, end)`` from the rollups (kWh); 0.0 without data."""
    row = cur.execute(_ENERGY[tier(start, end)],
                      scope_params(start, end, partition, rack)).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0

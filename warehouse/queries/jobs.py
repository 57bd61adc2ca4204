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
from warehouse.db import fill
from warehouse.queries import energy as qe
from warehouse.queries import energy_method as em
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

_HELD_RUNS = "SELECT DISTINCT run_index FROM allocations WHERE job_id = $job_id"

_SPAN = """
SELECT greatest(min(start_ts), $floor::TIMESTAMP),
       least(max(coalesce(end_ts, $now::TIMESTAMP)), $now::TIMESTAMP)
FROM allocations WHERE job_id = $job_id AND start_ts <= $now
"""

_ON_JOB_GPUS = """
al AS (
    SELECT node, gpu_index, run_index, start_ts, coalesce(end_ts, $end::TIMESTAMP) AS end_ts
    FROM allocations WHERE job_id = $job_id
),
s AS (
    SELECT t.*, al.run_index,
           (epoch(least(al.end_ts, t.ts + to_seconds($step_s)))
            - epoch(greatest(al.start_ts, t.ts))) / $step_s AS share
    FROM {tier} t JOIN al ON t.node = al.node AND t.gpu_index = al.gpu_index
        AND t.ts < al.end_ts AND t.ts + to_seconds($step_s) > al.start_ts
    WHERE t.ts >= $start - to_seconds($step_s) AND t.ts < $end
)"""

_TELEMETRY = {
    table: fill("""
WITH {on_job_gpus}
SELECT time_bucket(to_seconds($bucket_s), ts) AS ts,
       count(DISTINCT (node, gpu_index)) AS gpus,
       avg(util_pct_avg) AS util_mean_pct, min(util_pct_avg) AS util_min_pct,
       avg(temp_c_avg) AS temp_mean_c, max(temp_c_max) AS temp_max_c,
       sum(power_w_avg) / 1000.0 / count(DISTINCT s.ts) AS power_kw,
       sum(throttle_thermal_s) AS throttle_thermal_s
FROM s GROUP BY 1 ORDER BY 1
""", on_job_gpus=fill(_ON_JOB_GPUS, tier=table))
    for table in TIERS
}

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


def _span(cur, job_id: str, now: datetime) -> tuple[datetime, datetime] | None:
    lo, hi = cur.execute(_SPAN, {"job_id": job_id, "now": now,
                                 "floor": now - MAX_JOB_SPAN}).fetchone()
    if lo is None or hi is None or hi <= lo:
        return None
    return lo, hi


def telemetry(cur, *, job_id: str, now: datetime) -> pd.DataFrame:
    """The telemetry of the job's GPUs over its allocations, aggregated per bucket.

    Columns: ts, gpus (reporting), util_mean_pct, util_min_pct (percent), temp_mean_c,
    temp_max_c (°C), power_kw (total, kW), throttle_thermal_s (GPU-seconds throttled).
    Empty when the job never held a GPU.
    """
    span = _span(cur, job_id, now)
    if span is None:
        return pd.DataFrame(columns=["ts", "gpus", "util_mean_pct", "util_min_pct",
                                     "temp_mean_c", "temp_max_c", "power_kw",
                                     "throttle_thermal_s"])
    start, end = span
    table = tier(start, end)
    params = {"job_id": job_id, "start": start, "end": end, "step_s": TIERS[table],
              "bucket_s": bucket_s(start, end)}
    return cur.execute(_TELEMETRY[table], params).df()


def energy(cur, *, job_id: str, now: datetime, opts: Options | None = None) -> pd.DataFrame:
    """Energy and carbon of each of the job's runs, counted as the Energy page counts
    them (:func:`warehouse.queries.energy.run_energy`: GPU energy, the node's non-GPU
    share, PUE, grid intensity). Columns: run_index, gpu_hours, gpu_kwh, it_kwh,
    facility_kwh, carbon_kg, embodied_kg, method (how the GPU energy was measured:
    warehouse/queries/energy_method.py). Empty when the job never held a GPU."""
    span = _span(cur, job_id, now)
    cols = ["run_index", "gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg",
            "embodied_kg", "method"]
    if span is None:
        return pd.DataFrame(columns=cols)
    held = cur.execute(_HELD_RUNS, {"job_id": job_id}).fetchall()
    runs = [(job_id, int(r)) for (r,) in held]
    df = qe.run_energy(cur, start=span[0], end=span[1], opts=opts, runs=runs)
    how = em.run_methods(cur, start=span[0], end=span[1], runs=runs)
    df = df.merge(how[["job_id", "run_index", "method"]], on=["job_id", "run_index"],
                  how="left")
    return df.sort_values("run_index", ignore_index=True)[cols]


def failures(cur, *, job_id: str, limit: int = 500) -> pd.DataFrame:
    """The classified failures of the job's runs (table ``failures``), with evidence."""
    return cur.execute(_FAILURES, {"job_id": job_id, "limit": limit}).df()

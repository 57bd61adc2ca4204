"""Stragglers read back (issue 15): GPU-hours lost to slow members, episodes, and the
per-node heat map of a job (the MegaScale view).

Episodes and their cost come from the ``stragglers`` table the analytics refresh keeps
(warehouse/stragglers.py). A window ``[start, end)`` counts each episode's GPU-hours
prorated by its overlap, so ongoing and long episodes are not counted in full twice.
Units: GPU-hours, fractions 0-1, MHz, watts, seconds; timestamps naive UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse.db import fill
from warehouse.node_minutes import BLOCK_S
from warehouse.queries.job_minutes import (
    BLOCK_MINUTES,
    JOB_ALLOCATIONS,
    job_allocations,
    job_node_minutes,
)

#: Each episode's share of ``[start, end)`` (0-1) as ``share``.
_OVERLAP = """
SELECT *, greatest(0, epoch(least(end_ts, $end::TIMESTAMP))
                    - epoch(greatest(start_ts, $start::TIMESTAMP)))
          / greatest(epoch(end_ts) - epoch(start_ts), 1) AS share
FROM stragglers
WHERE start_ts < $end AND end_ts > $start
  AND ($job_id::VARCHAR IS NULL OR job_id = $job_id)
"""

_TOTAL_SQL = fill("SELECT count(*), coalesce(sum(gpu_hours_lost * share), 0) "
                  "FROM ({overlap})", overlap=_OVERLAP)

_EPISODES_SQL = fill("""
SELECT job_id, run_index, node, start_ts, end_ts, minutes, gpu_indices, job_gpus,
       slowdown_frac, gpu_hours_lost * share AS gpu_hours_lost, clock_mhz, peer_clock_mhz,
       power_w, peer_power_w, thermal_s, power_brake_s,
       gpu_hours_lost / greatest((epoch(end_ts) - epoch(start_ts)) / 3600.0, 1 / 60.0)
           AS gpu_hours_per_hour,
       coalesce((SELECT list(DISTINCT e.code ORDER BY e.code) FROM gpu_events e
                 WHERE e.kind = 'xid' AND e.node = s.node AND e.ts >= s.start_ts
                   AND e.ts < s.end_ts), []) AS xids
FROM ({overlap}) s
ORDER BY gpu_hours_lost DESC, start_ts
LIMIT $limit
""", overlap=_OVERLAP)

#: A run's nodes over time: per bucket and node the SM clock of the node's slowest GPU
#: held by the job (lowest minute mean), their mean power and the seconds they throttled,
#: from the per-node minute sums where they can stand for the GPU rows (issue 17: the
#: GPU minute rows of an 8,192-GPU job's last 16 hours, 7.9 M, joined with its
#: allocations took ~1.1 s; tests/test_node_minutes.py keeps that query as the
#: reference). A whole node-minute (warehouse/queries/job_minutes.py: its GPU
#: rows are all of GPUs the job held once) gives the node's lowest SM clock, its power
#: summed over the rows with a reading and their count, and its throttled seconds; the
#: other node-minutes (a GPU of the node not held, one held by two runs, rows written
#: before migration 027, which keep no clock or power count) give their GPU rows joined
#: with the allocations (once per allocation of the job overlapping the minute). The GPU
#: rows are found by their minutes between the first and last such minute (a few
#: distinct ones, which DuckDB filters the minute tier's scan with). Buckets of whole
#: 5-minute blocks read ``gpu_nodes_5m`` where the job held a node all of a block
#: (:data:`_HEATMAP_BLOCKS_SQL`, warehouse/queries/job_minutes.py); a block not served
#: whole is read as its minutes' GPU rows.
_HEATMAP = """
WITH {al},
{node_minutes},
part AS (SELECT node, {part_ts} AS ts FROM d WHERE NOT (whole AND power_n IS NOT NULL)),
cells AS (
    SELECT ts, node, sm_clock_mhz_min AS clock, power_w_sum AS power_sum, power_n,
           {throttled} AS throttle_s
    FROM d WHERE whole AND power_n IS NOT NULL
    UNION ALL  -- (al has no throttle columns: they are m's)
    SELECT m.ts, m.node, m.sm_clock_mhz_avg, m.power_w_avg, (m.power_w_avg IS NOT NULL)::INTEGER,
           {throttled}
    FROM (SELECT * FROM gpu_samples_1m SEMI JOIN part USING (node, ts)
          WHERE ts IN (SELECT ts FROM part) AND ts >= (SELECT min(ts) FROM part)
            AND ts <= (SELECT max(ts) FROM part)) m
    JOIN al a ON m.node = a.node AND m.gpu_index = a.gpu_index
     AND m.ts >= date_trunc('minute', a.start_ts) AND m.ts < a.end_ts
)
SELECT time_bucket(to_seconds($bucket_s::BIGINT), ts) AS ts, node, min(clock) AS clock_mhz,
       sum(power_sum) / nullif(sum(power_n), 0) AS power_w, sum(throttle_s) AS throttle_s
FROM cells GROUP BY ALL ORDER BY ts, node
"""
#: minute rows at or after $start, as the GPU rows' were
_HEATMAP_FIRST = ("date_trunc('minute', $start::TIMESTAMP - INTERVAL 1 MICROSECOND)"
                  " + INTERVAL 1 MINUTE")
_HEATMAP_COLUMNS = ("ts", "node", "gpu_mask", "sm_clock_mhz_min", "power_w_sum", "power_n",
                    "throttle_thermal_s", "throttle_power_s")
_HEATMAP_SQL, _HEATMAP_BLOCKS_SQL = (
    fill(_HEATMAP, al=JOB_ALLOCATIONS, part_ts=part_ts,
         throttled="coalesce(throttle_thermal_s, 0) + coalesce(throttle_power_s, 0)",
         node_minutes=job_node_minutes(_HEATMAP_FIRST, _HEATMAP_COLUMNS, blocks=blocks))
    for blocks, part_ts in (
        (False, "ts"),
        (True, BLOCK_MINUTES)))
#: Of the job's allocations (:func:`job_minutes.job_allocations`' view).
_SPAN_SQL = "SELECT min(start_ts), max(coalesce(end_ts, $now)) FROM job_allocations"
HEATMAP_COLUMNS = 240  # time buckets at most
HEATMAP_DAYS = 2  # the last this many days of the job


def _params(start, end, job_id=None) -> dict:
    return {"start": start, "end": end, "job_id": job_id}


def lost_total(cur, *, start: datetime, end: datetime) -> dict:
    """``episodes`` overlapping ``[start, end)`` and the GPU-hours lost to slow members
    in it (``gpu_hours_lost``)."""
    n, lost = cur.execute(_TOTAL_SQL, _params(start, end)).fetchone()
    return {"episodes": int(n), "gpu_hours_lost": float(lost)}


def episodes(cur, *, start: datetime, end: datetime, job_id: str | None = None,
             limit: int = 200) -> pd.DataFrame:
    """Straggler episodes overlapping ``[start, end)`` (of one job if given), the
    costliest first; ``gpu_hours_lost`` is the share inside the window,
    ``gpu_hours_per_hour`` the episode's rate of loss, ``xids`` the XID codes on its node
    during it."""
    return cur.execute(_EPISODES_SQL, {**_params(start, end, job_id), "limit": limit}).df()


def heatmap_window(cur, *, job_id: str, now: datetime) -> tuple[datetime, int] | None:
    """Where :func:`heatmap` reads: the start of the job's last ``HEATMAP_DAYS`` days (its
    first allocation if later) and the bucket width (seconds: the narrowest giving at
    most ``HEATMAP_COLUMNS`` buckets to ``now`` in whole minutes up to 5 minutes, in whole
    5-minute blocks beyond, which ``gpu_nodes_5m`` serves); None when the job never held
    a GPU."""
    with job_allocations(cur, job_id) as own:
        return _window(own, now)


def _window(own, now: datetime) -> tuple[datetime, int] | None:
    first, last = own.execute(_SPAN_SQL, {"now": now}).fetchone()
    if first is None:
        return None
    start = max(first, last - timedelta(days=HEATMAP_DAYS))
    return start, heatmap_bucket_s((last - start).total_seconds())


def heatmap_bucket_s(span_s: float) -> int:
    """The heat map's bucket width (s) for a window of ``span_s`` seconds: the narrowest
    giving at most ``HEATMAP_COLUMNS`` buckets, in whole minutes up to 5 minutes and in
    whole 5-minute blocks beyond (``gpu_nodes_5m`` serves those; issue 17). Widths
    floored to the minute gave up to twice the buckets."""
    width = -(-max(60.0, span_s) // HEATMAP_COLUMNS)  # s, at least
    step = 60 if width <= BLOCK_S else BLOCK_S
    return int(-(-width // step) * step)


def heatmap(cur, *, job_id: str, now: datetime) -> pd.DataFrame:
    """A job's nodes over its last ``HEATMAP_DAYS`` days: per time bucket (at most
    ``HEATMAP_COLUMNS``, one minute or longer) and node, ``clock_mhz`` (its slowest GPU),
    ``power_w`` and ``throttle_s``, and ``clock_rel``: that clock over the bucket's median
    across the job's nodes (1: as fast as its peers)."""
    with job_allocations(cur, job_id) as own:
        window = _window(own, now)
        if window is None:
            return pd.DataFrame(columns=["ts", "node", "clock_mhz", "power_w",
                                         "throttle_s", "clock_rel"])
        df = heatmap_cells(own, start=window[0], bucket_s=window[1], now=now)
    med = df.groupby("ts").clock_mhz.transform("median")
    return df.assign(clock_rel=df.clock_mhz / med.where(med > 0))


def heatmap_cells(own, *, start: datetime, bucket_s: int, now: datetime) -> pd.DataFrame:
    """:func:`heatmap`'s cells (ts, node, clock_mhz, power_w, throttle_s) from ``start``
    to ``now`` in buckets of ``bucket_s`` seconds (whole minutes), on a cursor of
    :func:`job_minutes.job_allocations`."""
    sql = _HEATMAP_BLOCKS_SQL if bucket_s % BLOCK_S == 0 else _HEATMAP_SQL
    return own.execute(sql, {"end": now, "start": start, "bucket_s": int(bucket_s)}).df()


_RECENT_SQL = """
SELECT s.job_id, s.run_index, s.node, n.rack, s.start_ts, s.end_ts, s.gpu_indices,
       s.job_gpus, s.slowdown_frac,
       s.gpu_hours_lost / greatest((epoch(s.end_ts) - epoch(s.start_ts)) / 3600.0, 1 / 60.0)
           AS gpu_hours_per_hour
FROM stragglers s LEFT JOIN nodes n USING (node)
WHERE s.end_ts > $since AND s.start_ts <= $now
ORDER BY s.start_ts
"""


def recent(cur, *, now: datetime, span_s: float = 3600.0) -> pd.DataFrame:
    """Straggler episodes that lasted into ``(now - span_s, now]``, with the node's rack
    and their rate of loss (GPU-hours per hour): what the straggler alert rule reads."""
    return cur.execute(_RECENT_SQL, {"since": now - timedelta(seconds=span_s),
                                     "now": now}).df()

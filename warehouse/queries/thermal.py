"""Queries of the Thermal page: per-rack temperature distributions, throttling, events.

Telemetry comes from the rollup tier of the range (see
:func:`warehouse.queries.utilisation.tier`); the live floor map is
:func:`warehouse.queries.overview.rack_floor`. Values are parameters; ``partition`` and
``rack`` (None = all) scope every query through ``nodes``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse.db import fill
from warehouse.queries.utilisation import SCOPE, bucket_s, per_tier, scope_params, tier

DISTRIBUTION_MINUTES_MAX = timedelta(hours=6)


#: The five quantiles in one call share one sort per rack (issue 17: five calls took 1.0-1.7
#: instead of 0.4 s of CPU over a 24,576-GPU week; the same values).
_RACK_TEMPS = per_tier(fill("""
SELECT rack, q[1] AS p5_c, q[2] AS p25_c, q[3] AS p50_c, q[4] AS p75_c, q[5] AS p95_c,
       max_c, samples
FROM (
    SELECT n.rack, quantile_cont(t.temp_c_max, [0.05, 0.25, 0.50, 0.75, 0.95]) AS q,
           max(t.temp_c_max) AS max_c, count(*) AS samples
    FROM {tier} t JOIN nodes n USING (node)
    WHERE t.ts >= $start AND t.ts < $end AND t.temp_c_max IS NOT NULL AND {scope}
    GROUP BY n.rack
)
ORDER BY rack LIMIT $limit
""", scope=SCOPE))

_THROTTLE_SQL = fill("""
SELECT time_bucket(to_seconds($bucket_s), t.ts) AS ts,
       100.0 * sum(t.throttle_thermal_s) / nullif(sum(t.covered_s), 0) AS thermal_pct,
       100.0 * sum(t.throttle_power_s) / nullif(sum(t.covered_s), 0) AS power_pct,
       max(t.temp_c_max) AS hottest_c,
       sum({temp_x_samples}) / nullif(sum(t.samples), 0) AS mean_c
FROM {table} t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end AND {scope}
GROUP BY 1 ORDER BY 1
""", scope=SCOPE)
#: The minute tier's throttling from its per node sums (issue 17: 8x fewer rows, the same
#: figures; warehouse/node_minutes.py), the hour tier's from its rows.
_THROTTLE = {
    "gpu_samples_1m": fill(_THROTTLE_SQL, table="gpu_nodes_1m", temp_x_samples="t.temp_c_wsum"),
    "gpu_samples_1h": fill(_THROTTLE_SQL, table="gpu_samples_1h",
                           temp_x_samples="t.temp_c_avg * t.samples")}

_EVENTS = fill("""
SELECT e.ts, n.rack, e.node, e.gpu_index, e.kind, e.code, e.detail
FROM gpu_events e JOIN nodes n USING (node)
WHERE e.ts >= $start AND e.ts < $end AND {scope}
  AND ($kinds::VARCHAR[] IS NULL OR list_contains($kinds::VARCHAR[], e.kind))
ORDER BY e.ts DESC, e.node, e.gpu_index LIMIT $limit
""", scope=SCOPE)

_EVENT_COUNTS = fill("""
SELECT e.kind, e.code, count(*) AS events, count(DISTINCT (e.node, e.gpu_index)) AS gpus,
       max(e.ts) AS last_ts
FROM gpu_events e JOIN nodes n USING (node)
WHERE e.ts >= $start AND e.ts < $end AND {scope}
GROUP BY ALL ORDER BY events DESC, e.kind, e.code LIMIT $limit
""", scope=SCOPE)


def rack_temperatures(cur, *, start: datetime, end: datetime, partition: str | None = None,
                      rack: str | None = None, limit: int = 500) -> pd.DataFrame:
    """Per rack, the distribution of its GPUs' per-bucket maximum temperature (°C):
    1-minute buckets up to :data:`DISTRIBUTION_MINUTES_MAX`, hourly ones beyond.

    Columns: rack, p5_c, p25_c, p50_c, p75_c, p95_c, max_c, samples (rollup rows).
    """
    params = scope_params(start, end, partition, rack, limit=limit)
    # quantiles cost per row: minute maxima up to 6 h, hourly maxima beyond
    table = "gpu_samples_1m" if end - start <= DISTRIBUTION_MINUTES_MAX else "gpu_samples_1h"
    return cur.execute(_RACK_TEMPS[table], params).df()


def throttling(cur, *, start: datetime, end: datetime, partition: str | None = None,
               rack: str | None = None) -> pd.DataFrame:
    """Throttling and temperature over time, one row per bucket.

    Columns: ts, thermal_pct and power_pct (percent of GPU time throttled), hottest_c
    (hottest GPU in the bucket, °C), mean_c (sample-weighted mean, °C).
    """
    params = scope_params(start, end, partition, rack, bucket_s=bucket_s(start, end))
    return cur.execute(_THROTTLE[tier(start, end)], params).df()


def events(cur, *, start: datetime, end: datetime, partition: str | None = None,
           rack: str | None = None, kinds: list[str] | None = None,
           limit: int = 200) -> pd.DataFrame:
    """GPU events (XID, ECC, throttle, lost...) newest first: ts, rack, node, gpu_index,
    kind, code, detail. ``kinds`` restricts to those kinds."""
    params = scope_params(start, end, partition, rack, kinds=kinds, limit=limit)
    return cur.execute(_EVENTS, params).df()


def event_counts(cur, *, start: datetime, end: datetime, partition: str | None = None,
                 rack: str | None = None, limit: int = 50) -> pd.DataFrame:
    """Events per (kind, code): kind, code, events, gpus (distinct GPUs), last_ts."""
    params = scope_params(start, end, partition, rack, limit=limit)
    return cur.execute(_EVENT_COUNTS, params).df()


_FAILURE_TEMPS = fill("""
WITH f AS (
    SELECT fl.job_id, fl.run_index, fl.category, fl.reason, fl.node, fl.end_ts
    FROM failures fl JOIN nodes n USING (node)
    WHERE fl.end_ts >= $start AND fl.end_ts < $end AND {scope}
    ORDER BY fl.end_ts DESC LIMIT $limit
),
fh AS (  -- each failure once per clock hour overlapping the hour before it
    SELECT job_id, run_index, node,
           unnest(range(date_trunc('hour', end_ts - INTERVAL 1 HOUR), end_ts,
                        INTERVAL 1 HOUR)) AS ts
    FROM f
),
t AS (  -- an equi-join with the 1-hour tier (a range join per failure scanned every
        -- minute row of the range)
    SELECT fh.job_id, fh.run_index, max(h.temp_c_max) AS hottest_c
    FROM fh JOIN gpu_samples_1h h USING (node, ts)
    WHERE h.ts >= $start - INTERVAL 2 HOUR AND h.ts < $end
    GROUP BY ALL
)
SELECT f.*, t.hottest_c,
       (SELECT median(temp_c_max) FROM gpu_samples_1h
        WHERE ts >= $start AND ts < $end) AS fleet_median_c
FROM f LEFT JOIN t USING (job_id, run_index)
ORDER BY f.end_ts DESC
""", scope=SCOPE)


def failure_temperatures(cur, *, start: datetime, end: datetime,
                         partition: str | None = None, rack: str | None = None,
                         limit: int = 2000) -> pd.DataFrame:
    """Each classified failure in ``[start, end)`` with the hottest GPU on its node in
    the hour before it (°C; the 1-hour tier's maxima of the one or two clock hours that
    overlap that hour) and the fleet's median hourly maximum over the range. Columns:
    job_id, run_index, category, reason, node, end_ts, hottest_c, fleet_median_c."""
    params = scope_params(start, end, partition, rack, limit=limit)
    return cur.execute(_FAILURE_TEMPS, params).df()

"""The five fleet questions bench/vs_prometheus.py asks gpulens and Prometheus alike.

Benchmark-only: no page asks these, so they live with the benchmarks, not in
warehouse/queries/ (issue 14).

Each is a parameterised query over the tier a dashboard would read for its range:
the 1-hour rollups for days and weeks, the 1-minute rollups for the last hour, the
writer's latest-sample table ``gpu_latest`` for "now". ``[start, end)`` are naive UTC.
Racks come from ``nodes``.

The PromQL that answers the same question is in each docstring (series labelled
``Hostname`` and ``rack``, as dcgm-exporter plus a relabel rule would label them).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse.queries import fleet

_GPU_HOURS = """
SELECT n.rack, time_bucket(INTERVAL 1 DAY, t.ts, $start::TIMESTAMP) AS day,
       sum(t.util_pct_avg * t.covered_s) / 100.0 / 3600.0 AS gpu_h
FROM gpu_samples_1h t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end
GROUP BY ALL ORDER BY n.rack, day
"""

_TEMP_P95 = """
SELECT n.rack, t.ts, quantile_cont(t.temp_c_max, 0.95) AS p95_c
FROM gpu_samples_1h t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end AND t.temp_c_max IS NOT NULL
GROUP BY ALL ORDER BY n.rack, t.ts
"""

_ENERGY = """
SELECT n.rack, sum(t.energy_j) / 3.6e6 AS energy_kwh
FROM gpu_samples_1h t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end
GROUP BY ALL ORDER BY n.rack
"""

_NODE_UTIL = """
SELECT node, sum(util_pct_avg * samples) / nullif(sum(samples), 0) AS util_pct
FROM gpu_samples_1m
WHERE ts >= $start AND ts < $end AND util_pct_avg IS NOT NULL
GROUP BY node ORDER BY node
"""

_HOTTEST = fleet.per_latest("""
SELECT n.rack, l.node, l.gpu_index, l.ts, l.temp_c
FROM {latest_rows} l JOIN nodes n USING (node)
WHERE l.temp_c IS NOT NULL
ORDER BY l.temp_c DESC, l.node, l.gpu_index LIMIT $limit
""")


def gpu_hours_by_rack_day(cur, *, start: datetime, end: datetime) -> pd.DataFrame:
    """Utilised GPU-hours (sum of util/100 x seconds sampled / 3600) per rack and day,
    days counted from ``start``. Columns: rack, day, gpu_h.

    PromQL, range query step 1d: ``sum by (rack) (sum_over_time(DCGM_FI_DEV_GPU_UTIL[1d]))
    * interval_s / 100 / 3600``.
    """
    return cur.execute(_GPU_HOURS, {"start": start, "end": end}).df()


def rack_temp_p95_hourly(cur, *, start: datetime, end: datetime) -> pd.DataFrame:
    """Per rack and hour, the 95th percentile over its GPUs of each GPU's hottest
    reading in the hour (°C). Columns: rack, ts (hour start), p95_c.

    PromQL, range query step 1h: ``quantile by (rack) (0.95,
    max_over_time(DCGM_FI_DEV_GPU_TEMP[1h]))``.
    """
    return cur.execute(_TEMP_P95, {"start": start, "end": end}).df()


def energy_by_rack(cur, *, start: datetime, end: datetime) -> pd.DataFrame:
    """GPU energy per rack (kWh, the integral of power). Columns: rack, energy_kwh.

    PromQL: ``sum by (rack) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[30d])) / 3.6e9``
    (the counter is in mJ).
    """
    return cur.execute(_ENERGY, {"start": start, "end": end}).df()


def node_util_last_hour(cur, *, now: datetime, span: timedelta = timedelta(hours=1)
                        ) -> pd.DataFrame:
    """Mean GPU utilisation per node over ``[now - span, now)`` (percent, every sample
    weighs the same). Columns: node, util_pct.

    PromQL: ``avg by (Hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]))``.
    """
    return cur.execute(_NODE_UTIL, {"start": now - span, "end": now}).df()


def hottest_gpus(cur, *, now: datetime, limit: int = 10,
                 stale_after_s: float = 300) -> pd.DataFrame:
    """The ``limit`` hottest GPUs by their latest sample within ``stale_after_s`` before
    ``now`` (Prometheus's 5-minute lookback by default). Columns: rack, node, gpu_index,
    ts, temp_c.

    PromQL: ``topk(10, DCGM_FI_DEV_GPU_TEMP)``.
    """
    params = {"now": now, "since": now - timedelta(seconds=stale_after_s), "limit": limit}
    return cur.execute(_HOTTEST[fleet.latest_source(cur, now)], params).df()


#: tables :func:`storage` measures (names are formatted into the SQL: fixed ones only)
STORAGE_TABLES = ("gpu_samples", "gpu_samples_1m", "gpu_nodes_1m", "gpu_nodes_5m",
                  "gpu_samples_1h")

_STORAGE = """
SELECT (SELECT count(*) FROM {table}) AS "rows",
       (SELECT count(DISTINCT block_id) FROM pragma_storage_info('{table}')
        WHERE block_id >= 0)
       * (SELECT block_size FROM pragma_database_size()
          WHERE database_name = current_database()) AS bytes
"""


def storage(cur) -> pd.DataFrame:
    """Rows and approximate bytes on disk of the telemetry tiers (the DuckDB blocks
    their column segments use; blocks are 256 KiB). Columns: table, rows, bytes."""
    out = [(t, *cur.execute(_STORAGE.format(table=t)).fetchone()) for t in STORAGE_TABLES]
    return pd.DataFrame(out, columns=["table", "rows", "bytes"])

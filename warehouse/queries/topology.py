"""Topology queries: filter choices and the drill-down racks -> nodes -> GPUs -> job.

The drill-down reads each GPU's latest sample within ``stale_after_s`` of ``now``
(``gpu_latest``, :func:`warehouse.queries.fleet.latest_source`)
(a silent GPU keeps NULL figures, never zero) and the job allocated on it at ``now``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse.queries import fleet

_OPTIONS = """
SELECT DISTINCT partition AS value, 'partition' AS kind FROM nodes
WHERE partition IS NOT NULL
UNION ALL
SELECT DISTINCT rack, 'rack' FROM nodes
WHERE rack IS NOT NULL AND ($partition::VARCHAR IS NULL OR partition = $partition)
ORDER BY kind, value
LIMIT $limit
"""

_GPUS_NOW = fleet.per_latest("""
WITH scope AS (
    SELECT node FROM nodes
    WHERE ($rack::VARCHAR IS NULL OR rack = $rack) AND ($node::VARCHAR IS NULL OR node = $node)
),
latest AS (
    SELECT node, gpu_index, ts, util_pct, power_w, temp_c, mem_temp_c, mem_used_mib,
           sm_clock_mhz, throttle_thermal, throttle_power
    FROM {latest_rows} r
    WHERE node IN (SELECT node FROM scope)
),
installed AS (
    SELECT g.node, g.gpu_index, g.gpu_uuid, g.model, g.tdp_w, g.memory_mib
    FROM gpus g
    UNION ALL  -- nodes known only with a GPU count: their GPUs 0..gpus-1
    SELECT n.node, i::SMALLINT, NULL, NULL, NULL, NULL
    FROM nodes n, range(coalesce(n.gpus, 0)) r(i)
    WHERE n.node NOT IN (SELECT node FROM gpus)
),
allocated AS (
    SELECT a.node, a.gpu_index, a.job_id, a.run_index, a.start_ts
    FROM allocations a  -- of the rack's or node's GPUs only (issue 17: every GPU's
                        -- allocations took ~0.25 s of a 24,576-GPU drill-down)
    WHERE a.start_ts <= $now AND (a.end_ts IS NULL OR a.end_ts > $now)
      AND a.node IN (SELECT node FROM scope)
    QUALIFY row_number() OVER (PARTITION BY a.node, a.gpu_index ORDER BY a.start_ts DESC) = 1
)
SELECT n.rack, i.node, i.gpu_index, i.gpu_uuid, i.model, i.tdp_w, i.memory_mib,
       l.ts AS sample_ts, l.util_pct, l.power_w, l.temp_c, l.mem_temp_c, l.mem_used_mib,
       l.sm_clock_mhz, l.throttle_thermal, l.throttle_power,
       a.job_id, a.run_index, a.start_ts AS allocated_since, j.name, j.user_name,
       j.job_type, j.state
FROM installed i JOIN nodes n USING (node)
LEFT JOIN latest l USING (node, gpu_index)
LEFT JOIN allocated a USING (node, gpu_index)
LEFT JOIN jobs j USING (job_id)
WHERE ($rack::VARCHAR IS NULL OR n.rack = $rack) AND ($node::VARCHAR IS NULL OR i.node = $node)
ORDER BY i.node, i.gpu_index
LIMIT $limit
""")


def filter_options(cur, *, partition: str | None = None, limit: int = 5000) -> dict:
    """``{"partitions": [...], "racks": [...]}``: racks of ``partition`` (all if None)."""
    rows = cur.execute(_OPTIONS, {"partition": partition, "limit": limit}).fetchall()
    return {"partitions": [v for v, k in rows if k == "partition"],
            "racks": [v for v, k in rows if k == "rack"]}


def gpus_now(cur, *, now: datetime, rack: str | None = None, node: str | None = None,
             stale_after_s: float = fleet.STALE_AFTER_S, limit: int = 2048) -> pd.DataFrame:
    """Every GPU of ``rack`` (or ``node``) with its latest sample and current job.

    Columns: rack, node, gpu_index, gpu_uuid, model, tdp_w, memory_mib, sample_ts,
    util_pct, power_w, temp_c, mem_temp_c, mem_used_mib, sm_clock_mhz, throttle_thermal,
    throttle_power (NULL when the GPU has not reported within ``stale_after_s``), job_id,
    run_index, allocated_since, name, user_name, job_type, state (NULL when idle).
    """
    params = {"now": now, "since": now - timedelta(seconds=stale_after_s), "rack": rack,
              "node": node, "limit": limit}
    return cur.execute(_GPUS_NOW[fleet.latest_source(cur, now)], params).df()

"""Tensor-core activity per job and per user: a proxy of model FLOPs utilisation (issue 15).

Acme (NSDI'24) saw GPU_UTIL's median at 97-99 % while SM activity was ~50 % or less:
GPU_UTIL says a kernel ran, not how much of the GPU worked. DCGM's profiling fields say
more: ``DCGM_FI_PROF_SM_ACTIVE`` (cycles with a warp on an SM), ``_PIPE_TENSOR_ACTIVE``
(cycles the tensor pipe issued) and ``_DRAM_ACTIVE`` (cycles the memory interface moved
data), stored x 100. Tensor activity approximates MFU for dense matmul-bound training; it
is no FLOP count (precision, sparsity and the pipe's issue rate are not in it) and is NULL
where the exporter lacks profiling.

From the hour tier: each allocation's GPU-hours within each hour of ``[start, end)`` weight
that GPU's hourly means; a mean skips hours without that field (``tensor_gpu_h`` says
how many GPU-hours had it). Percent, GPU-hours.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from warehouse import allocation_hours
from warehouse.db import fill

GROUPS = {"job": "a.job_id", "user": "coalesce(j.user_name, '(unknown)')"}

#: Each allocation is cut into the hours of ``[start, end)`` it touches
#: (warehouse/allocation_hours.py) and meets the hour rows on (node, GPU, hour) (issue 17:
#: the join of every allocation with every hour row of its GPU took 45 s of CPU over a
#: 24,576-GPU week, this 15 s; 6.4 -> 2.1 s over 24 hours). Job names are joined once per
#: row, not spread over each job's rows with a window.
_SQL = fill("""
WITH held AS (
{cut}
),
parts AS (
    SELECT a.job_id,
           (epoch_us(least(a.ts + INTERVAL 1 HOUR, a.hi)) - epoch_us(greatest(a.ts, a.lo)))
               / 3.6e9 AS w,
           h.util_pct_avg AS util, h.sm_active_pct_avg AS sm,
           h.tensor_active_pct_avg AS tensor, h.dram_active_pct_avg AS dram
    FROM held a
    JOIN gpu_samples_1h h ON h.node = a.node AND h.gpu_index = a.gpu_index AND h.ts = a.ts
    WHERE h.ts >= date_trunc('hour', $start::TIMESTAMP) AND h.ts < $end
)
SELECT {key} AS {by}, any_value(j.name) AS name, sum(w) AS gpu_h,
       sum(w * util) / nullif(sum(w) FILTER (WHERE util IS NOT NULL), 0) AS util_pct,
       sum(w * sm) / nullif(sum(w) FILTER (WHERE sm IS NOT NULL), 0) AS sm_active_pct,
       sum(w * tensor) / nullif(sum(w) FILTER (WHERE tensor IS NOT NULL), 0)
           AS tensor_active_pct,
       sum(w * dram) / nullif(sum(w) FILTER (WHERE dram IS NOT NULL), 0) AS dram_active_pct,
       coalesce(sum(w) FILTER (WHERE tensor IS NOT NULL), 0) AS tensor_gpu_h
FROM parts a LEFT JOIN jobs j ON j.job_id = a.job_id
WHERE w > 0
GROUP BY {key}
ORDER BY gpu_h DESC
LIMIT $limit
""", cut=fill(allocation_hours.CUT, columns="job_id, node, gpu_index", where="""
      AND ($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL
           OR node IN (SELECT node FROM nodes
                       WHERE ($partition::VARCHAR IS NULL OR partition = $partition)
                         AND ($rack::VARCHAR IS NULL OR rack = $rack)))"""))


def tensor_activity(cur, *, start: datetime, end: datetime, by: str = "job",
                    partition: str | None = None, rack: str | None = None,
                    limit: int = 200) -> pd.DataFrame:
    """Per job (``by="job"``: job_id, name) or user (user_name) in ``[start, end)``, on
    the GPUs of ``partition`` and ``rack`` (None: all):
    gpu_h, util_pct, sm_active_pct, tensor_active_pct, dram_active_pct (GPU-hour weighted
    means, percent; NULL without data), tensor_gpu_h; most GPU-hours first."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    sql = fill(_SQL, key=GROUPS[by], by="job_id" if by == "job" else "user_name")
    return cur.execute(sql, {"start": start, "end": end, "partition": partition,
                             "rack": rack, "limit": int(limit)}).df()

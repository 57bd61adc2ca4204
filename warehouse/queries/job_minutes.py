"""A job's allocations and node-minutes as CTEs shared by its telemetry
(warehouse/queries/jobs.py) and its straggler heat map (warehouse/queries/stragglers.py).

Parameters: ``$job_id``, ``$end`` (the end of the range read, naive UTC: an allocation
without an end holds to it). Units: the columns of ``allocations`` and ``gpu_nodes_1m``.
"""

from __future__ import annotations

from warehouse.db import fill, names
from warehouse.node_minutes import MASK_BIT

#: The job's allocations (``al``): node, gpu_index, run_index, start_ts, end_ts (open
#: ends to ``$end``).
JOB_ALLOCATIONS = """
al AS (
    SELECT node, gpu_index, run_index, start_ts, coalesce(end_ts, $end::TIMESTAMP) AS end_ts
    FROM allocations WHERE job_id = $job_id AND start_ts IS NOT NULL  -- none held
)"""

#: The job's node-minutes ``d`` (``gpu_nodes_1m`` columns ``{d_cols}``) in the minutes
#: from ``{first}`` to before ``$end`` that its allocations ``al`` hold, each marked
#: ``whole`` where every GPU row of the node in that minute belongs to a GPU the job held
#: once (``gpu_mask`` within the GPUs its allocations of that node overlap, no GPU twice):
#: there the node's sums stand for the job's GPU rows (warehouse/node_minutes.py). A
#: GPU row counts once per allocation of the job overlapping its minute, so a GPU held
#: by two overlapping allocations, a GPU of the node not held, or an index beyond 0-63
#: leaves its node-minute not whole.
JOB_NODE_MINUTES = fill("""
grp AS (  -- the job's allocations of a node over the same minutes together (a whole-node
          -- run: one row), with the minutes [lo, hi) of the range whose rows they overlap
    SELECT *, coalesce(lead(lo) OVER w < hi OR max(hi) OVER (w ROWS BETWEEN UNBOUNDED
                       PRECEDING AND 1 PRECEDING) > lo, false) AS overlapping
    FROM (SELECT node, greatest(date_trunc('minute', start_ts), {first}) AS lo,
                 least(date_trunc('minute', end_ts - INTERVAL 1 MICROSECOND)
                       + INTERVAL 1 MINUTE, $end::TIMESTAMP) AS hi,
                 count(*) AS n, bit_or({bit}) AS mask, bool_and({bit} IS NOT NULL) AS maskable
          FROM al GROUP BY ALL)
    WHERE hi > lo
    WINDOW w AS (PARTITION BY node ORDER BY lo, hi)
),
nm AS (  -- per node and minute where the node's groups overlap: the allocations, GPUs
    SELECT node, ts, sum(n) AS n, bit_or(mask) AS mask, bool_and(maskable) AS maskable
    FROM (SELECT node, n, mask, maskable, unnest(range(lo, hi, INTERVAL 1 MINUTE)) AS ts
          FROM grp WHERE overlapping)
    GROUP BY ALL
),
d AS (  -- the node-minutes of the job's minutes, whole or not
    SELECT {d_cols}, coalesce(g.maskable AND g.n = bit_count(g.mask)
                              AND d.gpu_mask & ~g.mask = 0, false) AS whole
    FROM gpu_nodes_1m d JOIN grp g ON d.node = g.node AND d.ts >= g.lo AND d.ts < g.hi
    WHERE NOT g.overlapping
    UNION ALL
    SELECT {d_cols}, coalesce(g.maskable AND g.n = bit_count(g.mask)
                              AND d.gpu_mask & ~g.mask = 0, false) AS whole
    FROM gpu_nodes_1m d JOIN nm g ON d.node = g.node AND d.ts = g.ts
)""", bit=MASK_BIT)


def job_node_minutes(first: str, columns: tuple[str, ...]) -> str:
    """:data:`JOB_NODE_MINUTES` reading ``gpu_nodes_1m``'s ``columns`` from the minute
    ``first`` (an SQL expression of the query's parameters) on."""
    return fill(JOB_NODE_MINUTES, first=first, d_cols=names("d." + c for c in columns))

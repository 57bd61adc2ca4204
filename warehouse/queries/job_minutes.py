"""A job's allocations and node-minutes as CTEs shared by its telemetry
(warehouse/queries/jobs.py) and its straggler heat map (warehouse/queries/stragglers.py).

The job is the one whose rows :func:`job_allocations` registers on the cursor; parameter
``$end``: the end of the range read (naive UTC: an allocation without an end holds to
it). Units: the columns of ``allocations``, ``gpu_nodes_1m`` and ``gpu_nodes_5m``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from warehouse.db import fill, names, own_cursor
from warehouse.node_minutes import BLOCKS_FROM_KEY, MASK_BIT

#: The name of the view :func:`job_allocations` registers.
JOB_ALLOCATIONS_VIEW = "job_allocations"
#: The job's allocation rows, which :func:`job_allocations` registers as the view.
_JOB_ROWS = """
SELECT job_id, run_index, node, gpu_index, start_ts, end_ts, share FROM allocations
WHERE job_id = $job_id
"""

#: The job's allocations (``al``, from :func:`job_allocations`' view): node, gpu_index,
#: run_index, start_ts, end_ts (open ends to ``$end``).
JOB_ALLOCATIONS = """
al AS (
    SELECT node, gpu_index, run_index, start_ts, coalesce(end_ts, $end::TIMESTAMP) AS end_ts
    FROM job_allocations WHERE start_ts IS NOT NULL  -- none held
)"""


@contextmanager
def job_allocations(cur, job_id: str) -> Iterator:
    """A cursor of its own on which the view ``job_allocations`` holds the job's
    allocation rows (job_id, run_index, node, gpu_index, start_ts, end_ts, share), read
    once: a job's page callback reads its span and then queries over them, and
    ``allocations`` is scanned for a job (its rows spread over the table: ~35 ms for an
    8,192-GPU job's 65,540 rows in a 24,576-GPU week) once instead of for each (issue
    17)."""
    with own_cursor(cur) as own:
        own.register(JOB_ALLOCATIONS_VIEW,
                     own.sql(_JOB_ROWS, params={"job_id": job_id}).to_arrow_table())
        yield own

#: The job's node-minutes ``d`` (``{d}``: :data:`_D_MINUTES` or :data:`_D_BLOCKS`, after
#: the CTEs ``{blocks}`` they need) in the minutes from ``{first}`` to before ``$end``
#: that its allocations ``al`` hold, each marked
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
),{blocks}
d AS (  -- the node-minutes of the job's minutes, whole or not
{d}
)""", bit=MASK_BIT)

#: Whether a row ``d`` of a node's sums stands for the job's GPU rows: every GPU row of
#: it belongs to a GPU the group ``g`` of the job's allocations holds once.
_WHOLE = ("coalesce(g.maskable AND g.n = bit_count(g.mask) AND d.gpu_mask & ~g.mask = 0, "
          "false) AS whole")

#: ``d`` from the minute rows (``{cols}``: the columns read).
_D_MINUTES = fill("""    SELECT {cols}, {whole}
    FROM gpu_nodes_1m d JOIN grp g ON d.node = g.node AND d.ts >= g.lo AND d.ts < g.hi
    WHERE NOT g.overlapping
    UNION ALL
    SELECT {cols}, {whole}
    FROM gpu_nodes_1m d JOIN nm g ON d.node = g.node AND d.ts = g.ts""", whole=_WHOLE)

#: ``d`` from the 5-minute blocks where a group that overlaps no other holds the node for
#: a whole block (from meta :data:`BLOCKS_FROM_KEY`'s block on), from the minute rows
#: elsewhere: the group's first and last minutes outside its blocks (read by their
#: minutes: a few distinct ones, which DuckDB filters the minute table's scan with, so it
#: does not read the job's whole range of every node again) and overlapping groups.
#: Each row has ``minutes`` (bit i: minute i after its ``ts`` holds a row) and ``span_m``
#: (its minutes: 5 or 1). A bucket of the caller must hold whole blocks.
_D_BLOCKS = fill("""    SELECT {cols}, d.minutes, 5 AS span_m, {whole}
    FROM gpu_nodes_5m d JOIN blocks g ON d.node = g.node AND d.ts >= g.blo AND d.ts < g.bhi
    UNION ALL
    SELECT {cols}, 1::UTINYINT, 1, {whole}
    FROM gpu_nodes_1m d JOIN blocks g ON d.node = g.node AND d.ts >= g.lo AND d.ts < g.hi
     AND NOT (d.ts >= g.blo AND d.ts < g.bhi)
    WHERE d.ts IN (SELECT ts FROM edges)
    UNION ALL
    SELECT {cols}, 1::UTINYINT, 1, {whole}
    FROM gpu_nodes_1m d JOIN nm g ON d.node = g.node AND d.ts = g.ts""", whole=_WHOLE)

#: The groups' whole blocks ``[blo, bhi)`` (empty where ``bhi <= blo``) and the minutes
#: outside them (``edges``), for :data:`_D_BLOCKS`.
_BLOCKS = fill("""
blocks AS (
    SELECT *, greatest(time_bucket(INTERVAL 5 MINUTE, lo + INTERVAL 4 MINUTE),
                       coalesce((SELECT CAST(value AS TIMESTAMP) FROM meta
                                 WHERE key = '{key}'), '-infinity'::TIMESTAMP)) AS blo,
           time_bucket(INTERVAL 5 MINUTE, hi) AS bhi
    FROM grp WHERE NOT overlapping
),
edges AS (
    SELECT DISTINCT unnest(CASE WHEN bhi > blo
                                THEN list_concat(range(lo, blo, INTERVAL 1 MINUTE),
                                                 range(bhi, hi, INTERVAL 1 MINUTE))
                                ELSE range(lo, hi, INTERVAL 1 MINUTE) END) AS ts
    FROM blocks
),""", key=BLOCKS_FROM_KEY)


#: The minutes of a row of :data:`_D_BLOCKS`' ``d`` (``span_m`` from its ``ts``), one row
#: each: where a block's sums are not the job's, its minutes' GPU rows are read.
BLOCK_MINUTES = "unnest(range(ts, ts + to_minutes(span_m), INTERVAL 1 MINUTE))"


def job_node_minutes(first: str, columns: tuple[str, ...], *, blocks: bool = False) -> str:
    """:data:`JOB_NODE_MINUTES` reading ``gpu_nodes_1m``'s ``columns`` from the minute
    ``first`` (an SQL expression of the query's parameters) on; ``blocks``: the whole
    5-minute blocks from ``gpu_nodes_5m`` (:data:`_D_BLOCKS`, its two more columns)."""
    cols = names("d." + c for c in columns)
    return fill(JOB_NODE_MINUTES, first=first, blocks=_BLOCKS if blocks else "",
                d=fill(_D_BLOCKS if blocks else _D_MINUTES, cols=cols))

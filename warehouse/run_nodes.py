"""The allocations counted per run, node and span (``run_nodes``, migration 029).

An allocation is one GPU of a run (``allocations``: 4.86 M rows for a 24,576-GPU week).
The pages that ask which nodes a run held, and for how long, grouped them per run and
node on every read: r_f's exposure (warehouse/queries/failures.py), lemon nodes' exposure
and failed runs, Placement's runs, their racks and the usual job size
(warehouse/placement.py), and which runs are multi-node for stragglers
(warehouse/stragglers.py). A run's GPUs on one node share their start and end, so the
same allocations counted per ``(job_id, run_index, node, start_ts, end_ts)`` are ~4x
fewer rows (1.32 M for that week), and each row stands for its allocations exactly: a
query that filters allocations on their times keeps or drops a row's allocations
together, and counts ``gpus`` where it counted rows.

Columns: ``job_id``, ``run_index``, ``node``, ``start_ts`` and ``end_ts`` (naive UTC, NULL
as the allocations' are: ``end_ts`` while running), ``gpus`` (allocation rows with those
five values), and the sums of those rows' ``gpu_index``, ``alloc_key`` (``key_sum``) and
shares of a GPU in millionths (``share_ppm_sum``, migration 031): the kept hours' read
check (warehouse/fleet_hours.py) sums the allocations' exact moments from them, from
~4x fewer rows and no text (issue 17: the check 100-165 -> 32-45 ms over a 24,576-GPU
week).

``run_node_counts`` (migration 031) keeps, per run with allocations, ``nodes``: the
distinct nodes of its rows here. r_f's exposure (each run's days x the nodes it held)
counted them per run on every read, a DISTINCT over the window's rows joined back to its
runs (issue 17: ~0.27 s of CPU for a 24,576-GPU week; ~65 ms from the counts).

Both tables are a function of ``allocations`` alone. :func:`refresh` recomputes the rows
of the jobs of a batch the writer has just upserted, in the same transaction
(warehouse/ingest.py), and rewrites only the jobs whose rows changed: every Slurm poll
delivers the running jobs' allocations again, unchanged. Anything else that writes
``allocations`` calls :func:`rebuild` (bench/analytics.py's generated warehouse).
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.db import fill, names, transaction
from warehouse.kept_hours import ALLOC_KEY, SHARE_PPM

#: ``allocations`` counted per run, node and span, of the jobs ``{where}`` selects, with
#: the sums of their GPU indices, keys and shares in millionths (the kept hours' read
#: check sums its moments from these: warehouse/fleet_hours.py:RUN_NODE_MOMENTS).
SELECT_SQL = fill("""
SELECT job_id, run_index, node, start_ts, end_ts, count(*)::INTEGER AS gpus,
       sum(gpu_index)::BIGINT AS gpu_index_sum, sum({key})::BIGINT AS key_sum,
       sum({share_ppm})::BIGINT AS share_ppm_sum
FROM allocations{where} GROUP BY ALL
""", key=ALLOC_KEY, share_ppm=SHARE_PPM)
COLUMNS = ("job_id", "run_index", "node", "start_ts", "end_ts", "gpus", "gpu_index_sum",
           "key_sum", "share_ppm_sum")

#: Of the jobs of the registered view ``batch``.
_FRESH_SQL = fill(SELECT_SQL, where=" WHERE job_id IN (SELECT job_id FROM batch)")

#: The jobs of ``batch`` whose rows in ``run_nodes`` differ from their fresh count
#: (the temporary table ``_run_nodes_fresh``): a row added, gone or changed.
_CHANGED_SQL = fill("""
WITH stored AS (
    SELECT {columns} FROM run_nodes WHERE job_id IN (SELECT job_id FROM batch)
)
SELECT DISTINCT job_id FROM (
    (SELECT * FROM _run_nodes_fresh EXCEPT ALL SELECT * FROM stored)
    UNION ALL
    (SELECT * FROM stored EXCEPT ALL SELECT * FROM _run_nodes_fresh)
)
""", columns=names(COLUMNS))

_DELETE_SQL = "DELETE FROM {table} WHERE job_id IN (SELECT job_id FROM _run_nodes_changed)"
_INSERT_SQL = """
INSERT INTO run_nodes SELECT * FROM _run_nodes_fresh
WHERE job_id IN (SELECT job_id FROM _run_nodes_changed) ORDER BY start_ts
"""

#: Each run's distinct nodes in ``{rows}`` (``run_nodes`` or its fresh rows), of the jobs
#: ``{where}`` selects.
COUNTS_SQL = """
SELECT job_id, run_index, count(DISTINCT node)::INTEGER AS nodes
FROM {rows}{where} GROUP BY ALL
"""
#: From the batch's fresh rows, not a scan of the whole table.
_INSERT_COUNTS_SQL = "INSERT INTO run_node_counts " + fill(
    COUNTS_SQL, rows="_run_nodes_fresh",
    where=" WHERE job_id IN (SELECT job_id FROM _run_nodes_changed)")


def refresh(con) -> pa.Table:
    """Recompute the rows (and run counts) of the jobs of the registered view ``batch``
    (rows with a ``job_id``) from ``allocations``, on ``con`` inside the caller's
    transaction; return the jobs rewritten (those whose rows changed; a ``job_id``
    column)."""
    # A temporary table, within DuckDB's memory limit: as an Arrow table in Python the
    # fresh rows of a week's 593,000 jobs (1.3 M rows) took ~230 MiB more (issue 17). Made
    # inside the caller's transaction, so a failure's rollback takes it away too.
    con.execute("CREATE TEMPORARY TABLE _run_nodes_fresh AS " + _FRESH_SQL)
    changed = con.sql(_CHANGED_SQL).to_arrow_table()
    if changed.num_rows:
        con.register("_run_nodes_changed", changed)
        try:
            for table in ("run_nodes", "run_node_counts"):
                con.execute(fill(_DELETE_SQL, table=table))
            con.execute(_INSERT_SQL)
            con.execute(_INSERT_COUNTS_SQL)
        finally:
            con.unregister("_run_nodes_changed")
    con.execute("DROP TABLE _run_nodes_fresh")
    return changed


def rebuild(con) -> None:
    """Recompute both tables from ``allocations`` (for a writer that inserts
    allocations other than through the warehouse's ingest), in its own transaction."""
    with transaction(con):
        con.execute("DELETE FROM run_nodes; DELETE FROM run_node_counts")
        con.execute("INSERT INTO run_nodes " + fill(SELECT_SQL, where="")
                    + " ORDER BY start_ts")
        con.execute("INSERT INTO run_node_counts " + fill(COUNTS_SQL, rows="run_nodes",
                                                          where=""))

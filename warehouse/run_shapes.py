"""Each run's place in the network tree, kept (``run_shapes``, migration 030).

Placement's runs (:func:`warehouse.placement.job_placement`, the page's and the report's
figures) and the usual job size (:func:`warehouse.placement.usual_gpus`) group every run
of their window per node, partition and run on each read: ~1.5 s of CPU for a
24,576-GPU week's 563,566 multi-node runs. A run's GPUs, nodes, racks, zones and
partition change only when its allocations or the tree change, so the writer keeps them
here, per run, from ``run_nodes`` and the tree (warehouse/placement.py:TREE).

Columns per ``(job_id, run_index)``, over the run's allocations on nodes of the tree
(a run with none has no row): ``partition`` (the one holding most of its GPUs, chosen as
placement chooses), ``gpus``, ``nodes``, ``racks``, ``zones``; ``start_ts`` (the earliest
allocation start), ``last_start`` (the latest; NULL when any start is NULL),
``first_end`` (the earliest end of an ended allocation; NULL when none ended) and
``end_ts`` (the latest end; NULL while any allocation is open). Times naive UTC.

A window's query reads a run from here when every one of its allocations passes the
window's filter (placement.py says which: ``last_start`` and ``first_end`` tell), so its
figures are the ones grouping its allocations would give; the few others overlapping
the window (allocations of one run with different spans, across the window's edge) are
grouped from ``run_nodes`` as before.

``run_shapes_tree`` holds the tree the rows were computed with (node, rack, zone,
partition): every row is computed on it. The writer, in the transaction of each
allocations or topology batch (warehouse/ingest.py):

- first follows the tree (:func:`follow_tree`): where a node's place differs from the
  one ``run_shapes_tree`` holds (added, gone, moved to another rack, zone or partition;
  also by hand in SQL since), it recomputes the jobs with a run on that node and holds
  the tree as it is;
- then recomputes the jobs whose ``run_nodes`` rows the batch changed (:func:`refresh`).

A reader uses the rows only while ``run_shapes_tree`` is the tree
(warehouse/placement.py:SAME_TREE_SQL, in the query's snapshot); otherwise (a tree
changed by hand since the last batch) it groups the runs from ``run_nodes``, as before.
Anything that writes ``allocations`` other than through the ingest calls :func:`rebuild`
(after :func:`warehouse.run_nodes.rebuild`).
"""

from __future__ import annotations

from warehouse.db import fill, transaction
from warehouse.placement import PART, TREE, TREE_DIFF, TREE_ROWS

#: Each run's shape from ``run_nodes`` on the tree, of the runs ``{where}`` selects (a
#: condition on ``a.job_id``, or nothing); migration 030 filled the table with the same.
SELECT_SQL = "WITH " + TREE + """,
rows AS (
    SELECT a.job_id, a.run_index, a.node, a.start_ts, a.end_ts, a.gpus, t.rack, t.zone,
           t.partition
    FROM run_nodes a JOIN tree t USING (node){where}
),
{part},
runs AS (
    SELECT job_id, run_index, CAST(sum(gpus) AS INTEGER) AS gpus,
           CAST(count(DISTINCT node) AS INTEGER) AS nodes,
           CAST(count(DISTINCT rack) AS INTEGER) AS racks,
           CAST(count(DISTINCT zone) AS INTEGER) AS zones,
           min(start_ts) AS start_ts,
           CASE WHEN bool_and(start_ts IS NOT NULL) THEN max(start_ts) END AS last_start,
           min(end_ts) AS first_end,
           CASE WHEN bool_and(end_ts IS NOT NULL) THEN max(end_ts) END AS end_ts
    FROM rows GROUP BY ALL
)
SELECT r.job_id, r.run_index, p.partition, r.gpus, r.nodes, r.racks, r.zones, r.start_ts,
       r.last_start, r.first_end, r.end_ts
FROM runs r JOIN part p USING (job_id, run_index)
ORDER BY r.start_ts
"""
SELECT_SQL = fill(SELECT_SQL, part=fill(PART, rows="rows"))

_JOBS = " WHERE a.job_id IN (SELECT job_id FROM _run_shapes_jobs)"

#: The nodes whose row in the tree is not the one ``run_shapes_tree`` holds.
_MOVED_SQL = "WITH " + TREE_DIFF + "\nSELECT DISTINCT node FROM tree_diff"

#: The jobs with a run on one of those nodes (registered as ``_run_shapes_moved``).
_MOVED_JOBS_SQL = """
SELECT DISTINCT job_id FROM run_nodes WHERE node IN (SELECT node FROM _run_shapes_moved)
"""


def refresh(con, jobs) -> None:
    """Recompute the rows of ``jobs`` (an Arrow table with a ``job_id`` column: the jobs
    whose ``run_nodes`` rows changed) on ``con``, inside the caller's transaction."""
    if not jobs.num_rows:
        return
    con.register("_run_shapes_jobs", jobs)
    try:
        con.execute("DELETE FROM run_shapes WHERE job_id IN (SELECT job_id FROM _run_shapes_jobs)")
        con.execute("INSERT INTO run_shapes " + fill(SELECT_SQL, where=_JOBS))
    finally:
        con.unregister("_run_shapes_jobs")


def follow_tree(con) -> int:
    """Before the writer's refresh, and after a topology write, inside its transaction:
    recompute the rows of the jobs with a run on a node whose place in the tree is not
    the one ``run_shapes_tree`` holds (added, gone, moved to another rack, zone or
    partition, also by hand in SQL), then hold the tree as it is; return those jobs."""
    moved = con.sql(_MOVED_SQL).to_arrow_table()
    if not moved.num_rows:
        return 0
    con.register("_run_shapes_moved", moved)
    try:
        jobs = con.sql(_MOVED_JOBS_SQL).to_arrow_table()
    finally:
        con.unregister("_run_shapes_moved")
    con.execute("DELETE FROM run_shapes_tree")
    con.execute("INSERT INTO run_shapes_tree " + TREE_ROWS)
    refresh(con, jobs)
    return jobs.num_rows


def rebuild(con) -> None:
    """Recompute the table and its tree from ``run_nodes`` and the tree, in a transaction
    of its own (for a writer of ``allocations`` or topology other than the ingest)."""
    with transaction(con):
        _recompute(con)


def _recompute(con) -> None:
    con.execute("DELETE FROM run_shapes")
    con.execute("INSERT INTO run_shapes " + fill(SELECT_SQL, where=""))
    con.execute("DELETE FROM run_shapes_tree")
    con.execute("INSERT INTO run_shapes_tree " + TREE_ROWS)

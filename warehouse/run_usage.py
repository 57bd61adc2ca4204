"""GPU usage per hour and job run, kept (``run_usage_1h``, migrations 32-33, issue 17).

The per-run energy (warehouse/queries/energy.py: ``run_energy``, ``job_energy``,
``failure_carbon``; the Energy page's energy by user, of failures and the carbon of
goodput, a job's energy, the weekly report) and utilisation per job key
(warehouse/queries/utilisation.py: by user, by job type, the job distribution) sum
``gpu_usage_1h``'s rows, one per hour, node and run, each with its node's GPU count (the
node's non-GPU power is shared by GPU-seconds) or whether the topology lists the node:
1.5 M rows joined to ``nodes`` for a 24,576-GPU week. Most runs hold one node, or nodes
alike, in an hour: this table keeps those rows summed per hour, run, the node's GPU
count and whether ``nodes`` lists the node (``known``; 603,217 rows in that week).

- **Written with ``gpu_usage_1h``**: :func:`write_hours` computes an hour's rows from the
  usage rows just inserted, in the same transaction (warehouse/usage.py:_recompute);
  retention deletes both alike (warehouse/rollups.py). A hand-made change to
  ``gpu_usage_1h`` must be followed by :func:`rebuild`.
- **The node's GPU count and presence** are ``nodes``' as they were when the rows were
  written (a NULL count where unknown: the fleet's typical count is applied when read,
  as on the live path); ``run_usage_nodes`` holds the nodes and counts the rows were
  written with. :func:`serves` compares them with ``nodes`` (3,072 rows), in the
  reader's snapshot; where a node differs (added, removed, its count changed), the
  refresh (:func:`refresh`) writes again the hours in which it held GPU usage, then the
  nodes; until then the readers read ``gpu_usage_1h``.
- **Built once**: meta's :data:`BUILT_KEY` is set when every row has been written from
  ``gpu_usage_1h`` (the first refresh after migration 32 or 33, or :func:`rebuild`).

Units: GPU-seconds and utilised GPU-seconds, joules; hours ``[ts, ts + 1 h)`` naive UTC.
"""

from __future__ import annotations

from datetime import timedelta

from warehouse import meta
from warehouse.clock import HOUR
from warehouse.db import transaction
from warehouse.kept_hours import in_slices
from warehouse.rollups import merge_ranges

#: meta's key, set when the kept rows were written from every hour of ``gpu_usage_1h``.
BUILT_KEY = "run_usage_built"
SLICE = timedelta(days=1)  # hours written per transaction by refresh and rebuild

#: The rows of [$lo, $hi) from ``gpu_usage_1h`` (allocated rows only).
SELECT_SQL = """
SELECT u.ts, u.job_id, u.run_index, n.gpus, sum(u.gpu_s) AS gpu_s,
       sum(u.energy_j) AS energy_j,
       sum(u.gpu_s) FILTER (WHERE u.energy_j IS NOT NULL) AS it_s,
       sum(u.energy_j) FILTER (WHERE u.gpu_s IS NOT NULL) AS it_j,
       sum(u.util_s) AS util_s, n.node IS NOT NULL AS known
FROM gpu_usage_1h u LEFT JOIN nodes n USING (node)
WHERE u.ts >= $lo AND u.ts < $hi AND u.job_id IS NOT NULL
GROUP BY ALL ORDER BY u.ts, u.job_id, u.run_index
"""
_DELETE_SQL = "DELETE FROM run_usage_1h WHERE ts >= $lo AND ts < $hi"
#: The nodes added, removed or whose GPU count differs from the one the rows were
#: written with (a node added or removed changes its rows' ``known``).
_CHANGED_SQL = """
SELECT node FROM nodes n FULL JOIN run_usage_nodes k USING (node)
WHERE n.node IS NULL OR k.node IS NULL OR n.gpus IS DISTINCT FROM k.gpus
"""
#: The hours in which the changed nodes (the view ``_run_usage_changed``) held GPU usage.
_HOURS_SQL = """
SELECT DISTINCT ts FROM gpu_usage_1h
WHERE job_id IS NOT NULL AND node IN (SELECT node FROM _run_usage_changed) ORDER BY ts
"""
_NODES_SQL = "SELECT node, gpus FROM nodes"
_SNAPSHOT_SQL = ("DELETE FROM run_usage_nodes; "
                 "INSERT INTO run_usage_nodes SELECT node, gpus FROM _run_usage_nodes")
_SPAN_SQL = "SELECT min(ts), max(ts) FROM gpu_usage_1h"
_EXISTS_SQL = ("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'run_usage_nodes' "
               "AND schema_name = current_schema() AND database_name = current_database()")


def serves(cur) -> bool:
    """Whether the kept rows may be read: the tables are there (not a lake's reader or a
    copy made before migration 32), built, and written with ``nodes`` as it is now. Read
    it and the rows in one transaction (the rows may be rewritten in between)."""
    if not cur.execute(_EXISTS_SQL).fetchall()[0][0] or meta.get(cur, BUILT_KEY) is None:
        return False
    return not cur.execute(_CHANGED_SQL).fetchall()


def write_hours(con, lo, hi) -> None:
    """The kept rows of ``[lo, hi)`` again from ``gpu_usage_1h``, in the caller's
    transaction (the writer's connection)."""
    con.execute(_DELETE_SQL, {"lo": lo, "hi": hi})
    con.execute("INSERT INTO run_usage_1h BY NAME " + SELECT_SQL, {"lo": lo, "hi": hi})


def _write(con, spans: list[tuple]) -> None:
    """The kept rows of the hours of ``spans`` (closed: first and last hour) again, a day
    at most per transaction (the writer yielding between them)."""
    def one(lo, hi):
        with transaction(con):
            write_hours(con, lo, hi)
    for lo, hi in merge_ranges(spans, HOUR):
        in_slices(lo, hi, SLICE, one)


def _snapshot(con, nodes) -> None:
    """``run_usage_nodes`` := ``nodes`` (a frame read before the rows were written: a
    change of ``nodes`` meanwhile stays a difference for the next refresh)."""
    con.register("_run_usage_nodes", nodes)
    try:
        con.execute(_SNAPSHOT_SQL)
    finally:
        con.unregister("_run_usage_nodes")


def rebuild(con) -> None:
    """Every kept row again from ``gpu_usage_1h`` and ``nodes`` as they are (unserved
    meanwhile), then the nodes' counts and meta's :data:`BUILT_KEY`."""
    nodes = con.execute(_NODES_SQL).df()
    first, last = con.execute(_SPAN_SQL).fetchall()[0]
    with transaction(con):
        con.execute("DELETE FROM meta WHERE key = $1", [BUILT_KEY])
        con.execute("DELETE FROM run_usage_1h")
    if first is not None:
        _write(con, [(first, last)])
    with transaction(con):
        _snapshot(con, nodes)
        meta.put(con, BUILT_KEY, "1")


def refresh(con) -> int:
    """On the writer's connection: :func:`rebuild` when never built; else the hours in
    which a node whose GPU count changed held GPU usage, written again, then the nodes'
    counts. Returns the hours written (-1: rebuilt)."""
    if meta.get(con, BUILT_KEY) is None:
        rebuild(con)
        return -1
    changed = con.execute(_CHANGED_SQL).df()
    if changed.empty:
        return 0
    nodes = con.execute(_NODES_SQL).df()
    con.register("_run_usage_changed", changed)
    try:
        hours = [r[0] for r in con.execute(_HOURS_SQL).fetchall()]
    finally:
        con.unregister("_run_usage_changed")
    _write(con, [(t, t) for t in hours])
    with transaction(con):
        _snapshot(con, nodes)
    return len(hours)

"""GPU usage per hour and job run, kept (``run_usage_1h``, migration 32, issue 17).

The per-run energy (warehouse/queries/energy.py: ``run_energy``, ``job_energy``,
``failure_carbon``; the Energy page's energy by user, of failures and the carbon of
goodput, a job's energy, the weekly report) sums ``gpu_usage_1h``'s rows, one per hour,
node and run, each with its node's GPU count (the node's non-GPU power is shared by
GPU-seconds): 1.5 M rows joined to ``nodes`` for a 24,576-GPU week. Most runs hold one
node, or nodes alike, in an hour: this table keeps those rows summed per hour, run and
the node's GPU count (603,217 rows in that week), and the same query over it takes
~0.12 s instead of ~0.19 s (energy by user, 7 days).

- **Written with ``gpu_usage_1h``**: :func:`write_hours` computes an hour's rows from the
  usage rows just inserted, in the same transaction (warehouse/usage.py:_recompute);
  retention deletes both alike (warehouse/rollups.py). A hand-made change to
  ``gpu_usage_1h`` must be followed by :func:`rebuild`.
- **The node's GPU count** is ``nodes.gpus`` as it was when the rows were written (NULL
  where unknown: the fleet's typical count is applied when read, as on the live path).
  meta's :data:`NODES_KEY` holds a hash-sum of ``nodes``' (node, gpus) the rows were
  written with; :func:`serves` compares it with ``nodes`` now (a node added, or its GPUs
  changed), and :func:`refresh` writes every row again where it differs (rare; ~0.3 s a
  week of history at 24,576 GPUs). Until then the per-run energy reads ``gpu_usage_1h``.
  After a DuckDB upgrade (its hash() may differ) the rows are written again once.

Units: seconds, joules; hours ``[ts, ts + 1 h)`` naive UTC.
"""

from __future__ import annotations

from datetime import timedelta

from warehouse import meta
from warehouse.db import transaction
from warehouse.kept_hours import in_slices

#: meta's key: the hash-sum of nodes' (node, gpus) the kept rows were written with.
NODES_KEY = "run_usage_nodes"
SLICE = timedelta(days=1)  # hours written per transaction by refresh/rebuild

#: The rows of [$lo, $hi) from ``gpu_usage_1h`` (allocated rows only).
SELECT_SQL = """
SELECT u.ts, u.job_id, u.run_index, n.gpus, sum(u.gpu_s) AS gpu_s,
       sum(u.energy_j) AS energy_j,
       sum(u.gpu_s) FILTER (WHERE u.energy_j IS NOT NULL) AS it_s,
       sum(u.energy_j) FILTER (WHERE u.gpu_s IS NOT NULL) AS it_j
FROM gpu_usage_1h u LEFT JOIN nodes n USING (node)
WHERE u.ts >= $lo AND u.ts < $hi AND u.job_id IS NOT NULL
GROUP BY ALL ORDER BY u.ts, u.job_id, u.run_index
"""
_DELETE_SQL = "DELETE FROM run_usage_1h WHERE ts >= $lo AND ts < $hi"
_NODES_SQL = "SELECT coalesce(sum(hash(node, gpus)), 0)::VARCHAR FROM nodes"
_SPAN_SQL = "SELECT min(ts), max(ts) FROM gpu_usage_1h"
_EXISTS_SQL = ("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'run_usage_1h' "
               "AND schema_name = current_schema() AND database_name = current_database()")


def _nodes(cur) -> str:
    return cur.execute(_NODES_SQL).fetchall()[0][0]


def serves(cur) -> bool:
    """Whether the kept rows may be read: the table is there (not a lake's reader or a
    copy made before migration 32) and was written with ``nodes`` as it is now."""
    if not cur.execute(_EXISTS_SQL).fetchall()[0][0]:
        return False
    return meta.get(cur, NODES_KEY) == _nodes(cur)


def write_hours(con, lo, hi) -> None:
    """The kept rows of ``[lo, hi)`` again from ``gpu_usage_1h``, in the caller's
    transaction (the writer's connection)."""
    con.execute(_DELETE_SQL, {"lo": lo, "hi": hi})
    con.execute("INSERT INTO run_usage_1h " + SELECT_SQL, {"lo": lo, "hi": hi})


def rebuild(con) -> None:
    """Every kept row again from ``gpu_usage_1h`` and ``nodes`` as they are, a day per
    transaction (the writer yielding between them; the rows unserved meanwhile), then
    meta's :data:`NODES_KEY`: the hash-sum read before the first day, so a change of
    ``nodes`` meanwhile leaves the rows unserved until the next refresh writes them
    again."""
    nodes = _nodes(con)
    first, last = con.execute(_SPAN_SQL).fetchall()[0]
    with transaction(con):  # unserved from here until every day is written
        con.execute("DELETE FROM meta WHERE key = $1", [NODES_KEY])
        con.execute("DELETE FROM run_usage_1h")
    if first is not None:
        in_slices(first, last + timedelta(hours=1), SLICE,
                  lambda a, b: _write_slice(con, a, b))
    with transaction(con):
        meta.put(con, NODES_KEY, nodes)


def _write_slice(con, lo, hi) -> None:
    with transaction(con):
        write_hours(con, lo, hi)


def refresh(con) -> bool:
    """:func:`rebuild` where the rows were written with other ``nodes`` (or never, or by
    another DuckDB's hash), on the writer's connection. Returns whether it did."""
    if meta.get(con, NODES_KEY) == _nodes(con):
        return False
    rebuild(con)
    return True

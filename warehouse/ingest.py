"""Idempotent ingest statements, run by the single writer (see warehouse/store.py).

Telemetry and events are facts: a row whose natural key is already stored is skipped,
found by an anti-join against the stored rows of the batch's own time range (DuckDB's
zone maps skip the rest of the table, so no in-memory index is needed on billions of
rows). Scheduler state and topology are upserted on their primary key: a later delivery
updates the row, keeping stored values where the new delivery has NULL.
Every samples batch also records its time range in ``rollup_pending`` in the same
transaction, so the rollup job finds it even after a crash, and upserts each GPU's newest
row into ``gpu_latest`` (only when newer than the stored one), which "now" queries read.
An allocations batch recomputes its jobs' rows of ``run_nodes`` and ``run_shapes`` in the
same transaction (warehouse/run_nodes.py, warehouse/run_shapes.py), and a topology batch
that changes the network tree the shapes of the runs on the nodes it moved.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse import run_nodes, run_shapes
from warehouse.db import fill, transaction
from warehouse.schema import APPEND_ONLY, DERIVED, KEYS, SCHEMAS, TABLES, derived_columns


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _key_match(kind: str) -> str:
    parts = []
    for key in KEYS[kind]:
        # events may have a NULL gpu_index (node-wide): NULL keys compare equal here
        parts.append(fill("s.{col} IS NOT DISTINCT FROM b.{col}", col=_quote(key)))
    return " AND ".join(parts)


def append_sql(kind: str) -> str:
    """INSERT of the registered view ``batch`` skipping rows already stored ($1..$2 = ts range)."""
    table = TABLES[kind]
    cols = ", ".join(_quote(c) for c in SCHEMAS[kind].names)
    values = ", ".join("b." + _quote(c) for c in SCHEMAS[kind].names)
    return fill(
        "INSERT INTO {table} ({cols}) SELECT {values} "
        "FROM batch b WHERE NOT EXISTS (SELECT 1 FROM {table} s "
        "WHERE s.ts BETWEEN $1 AND $2 AND {match})",
        table=table, cols=cols, values=values, match=_key_match(kind))


def upsert_sql(kind: str) -> str:
    """INSERT .. ON CONFLICT of the registered view ``batch``, keeping stored non-NULLs.

    A stored row the delivery would not change is not updated at all (the ``WHERE``):
    every Slurm poll delivers the running jobs' rows again, and DuckDB rewrote each one,
    a LIST column (``allocations.gpu_i_ids``) at ~100x the cost of the rest (issue 17:
    re-delivering 105k allocations took 26 s instead of 0.2 s)."""
    table = TABLES[kind]
    names = SCHEMAS[kind].names
    keys = KEYS[kind]
    cols = ", ".join(_quote(c) for c in names)
    new = {c: fill("coalesce(excluded.{col}, {table}.{col})", col=_quote(c), table=table)
           for c in names if c not in keys}
    updates = ", ".join(fill("{col} = {value}", col=_quote(c), value=v) for c, v in new.items())
    changed = " OR ".join(fill("{value} IS DISTINCT FROM {table}.{col}", value=v,
                               table=table, col=_quote(c)) for c, v in new.items())
    conflict = ", ".join(_quote(k) for k in keys)
    derived = DERIVED.get(table, {})  # of the key: set once, never changed by an update
    return fill(
        "INSERT INTO {table} ({cols}{dcols}) SELECT {cols}{dvalues} FROM batch "
        "ON CONFLICT ({conflict}) DO UPDATE SET {updates} WHERE {changed}",
        table=table, cols=cols, dcols="".join(", " + _quote(c) for c in derived),
        dvalues=derived_columns(table), conflict=conflict, updates=updates,
        changed=changed)


PENDING_SQL = "INSERT INTO rollup_pending VALUES ($1, $2)"


#: the key of ``gpu_latest``: one row per GPU
LATEST_KEYS = ("node", "gpu_index")


def latest_sql() -> str:
    """Upsert of the registered view ``newest`` (a samples batch's newest row per GPU,
    :func:`_newest_per_gpu`) into ``gpu_latest``, replacing a stored row only when
    strictly newer (issue 17): a late, retried or backfilled batch never moves a GPU's
    latest sample back, and a redelivered row of the same timestamp keeps the first
    delivery, as the raw tier does."""
    names = SCHEMAS["samples"].names
    cols = ", ".join(_quote(c) for c in names)
    updates = ", ".join(fill("{col} = excluded.{col}", col=_quote(c))
                        for c in names if c not in LATEST_KEYS)
    return fill(
        "INSERT INTO gpu_latest ({cols}) SELECT {cols} FROM newest "
        "ON CONFLICT (node, gpu_index) DO UPDATE SET {updates} "
        "WHERE excluded.ts > gpu_latest.ts",
        cols=cols, updates=updates)


def _newest_per_gpu(table: pa.Table) -> pa.Table:
    """Each GPU's newest row of a samples batch (of rows with the same newest ``ts``, the
    last). A scrape has one row per GPU and comes back as it is; done here rather than by
    a window in SQL, which cost the writer ~50 ms per 24,576-GPU scrape."""
    return _last_per(list(LATEST_KEYS), table.sort_by("ts"))  # a stable sort


def _last_per_key(kind: str, table: pa.Table) -> pa.Table:
    """Drop all but the last row of each key (an upsert may touch a row only once)."""
    keys = list(KEYS[kind])
    return _last_per(keys, table) if repeats_a_key(keys, table) else table


def repeats_a_key(keys: list[str], table: pa.Table) -> bool:
    """Whether two rows of ``table`` have the same ``keys`` values (NULL equal to NULL).

    By sorting integer codes of the key columns. Arrow's ``group_by``, which
    :func:`_last_per` needs to pick the rows, holds a copy of every key and a hash table:
    ~430 MiB for a week's 2.5 M allocations at 24,576 GPUs against ~135 MiB here (issue
    17), and a batch nearly never repeats a key.
    """
    if table.num_rows < 2:
        return False
    codes = []
    for key in keys:
        col = table.column(key).combine_chunks()
        if pa.types.is_integer(col.type):  # unsafe: a uint64 wraps, one to one
            codes.append(pc.fill_null(col.cast(pa.int64(), safe=False), 0).to_numpy())
            if col.null_count:
                codes.append(col.is_null().to_numpy(zero_copy_only=False))
        else:  # strings, timestamps
            codes.append(_codes(col))
    order = np.lexsort(codes[::-1])
    same = np.ones(len(order) - 1, dtype=bool)
    for code in codes:
        ordered = code[order]
        same &= ordered[1:] == ordered[:-1]
    return bool(same.any())


def _codes(col: pa.Array) -> np.ndarray:
    """Each value's number in ``col``'s dictionary (equal values, equal numbers); a NULL
    is its own number, -1."""
    return pc.fill_null(pc.dictionary_encode(col).indices, -1).to_numpy()


def _last_per(keys: list[str], table: pa.Table) -> pa.Table:
    """Drop all but the last row of each ``keys`` value."""
    if table.num_rows < 2:
        return table
    indexed = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    last = indexed.group_by(keys, use_threads=False).aggregate([("__row", "max")])
    if last.num_rows == table.num_rows:
        return table
    rows = last.column("__row_max")
    return table.take(pc.take(rows, pc.sort_indices(rows)))


#: Rows of an upserted batch written per transaction, about. DuckDB holds a
#: transaction's new rows and their key index in memory until it commits: a week's
#: 593,000 jobs in one took ~260 MiB above the process's base, ~110 MiB in slices of
#: 100,000 (issue 17).
UPSERT_ROWS = 100_000


def write_batch(con: duckdb.DuckDBPyConnection, kind: str, table: pa.Table) -> int:
    """Write one normalised batch; return the rows in the batch. Appended facts go in one
    transaction; upserted state (its last row per key) in one per slice of
    :func:`upsert_slices`, the earlier ones committed if a later one fails (the Future
    raises; a later delivery writes the rest)."""
    if table.num_rows == 0:
        return 0
    if kind in APPEND_ONLY:
        _write(con, kind, table)
        return table.num_rows
    table = _last_per_key(kind, table)
    for part in upsert_slices(kind, table):
        _write(con, kind, part)
    return table.num_rows


def upsert_slices(kind: str, table: pa.Table) -> list[pa.Table]:
    """``table`` cut about every UPSERT_ROWS rows, each cut moved on to where the first
    key column changes: a job's rows delivered together (a run's allocations) are written
    in one transaction, so no reader sees a run with some of its GPUs."""
    n = table.num_rows
    if n <= UPSERT_ROWS:
        return [table]
    codes = _codes(table.column(KEYS[kind][0]).combine_chunks())
    changes = np.flatnonzero(codes[1:] != codes[:-1]) + 1  # rows where a new key begins
    cuts = [0]
    while cuts[-1] + UPSERT_ROWS < n:
        i = np.searchsorted(changes, cuts[-1] + UPSERT_ROWS)
        if i == len(changes):
            break
        cuts.append(int(changes[i]))
    cuts.append(n)
    return [table.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _write(con: duckdb.DuckDBPyConnection, kind: str, table: pa.Table) -> None:
    """Write ``table`` (for an upsert: no key twice) in one transaction."""
    con.register("batch", table)
    try:
        with transaction(con):
            if kind in APPEND_ONLY:
                lo, hi = pc.min_max(table.column("ts")).values()
                con.execute(append_sql(kind), [lo.as_py(), hi.as_py()])
                if kind == "samples":
                    con.execute(PENDING_SQL, [lo.as_py(), hi.as_py()])
                    con.register("newest", _newest_per_gpu(table))
                    con.execute(latest_sql())
            else:
                con.execute(upsert_sql(kind))
                if kind == "allocations":
                    changed = run_nodes.refresh(con)
                    run_shapes.follow_tree(con)
                    run_shapes.refresh(con, changed)
                elif kind in ("nodes", "racks"):
                    run_shapes.follow_tree(con)
    finally:
        con.unregister("batch")
        if kind == "samples":
            con.unregister("newest")

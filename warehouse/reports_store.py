"""The ``reports`` table and the report's deliveries (issue #7).

Writes run on the writer thread (pass them to ``Warehouse.write``): :func:`record` stores
the report's files and queues its e-mail and webhook notifications in the alerts outbox
(``notifications``), in one transaction, so a report is announced exactly when it is
recorded and the outbox's retries (alerts/delivery.py) carry it to the receivers.
Reads: :func:`has_report`, :func:`report_files`; the Reports page reads the table through
``warehouse/queries/reports.py``. Times are naive UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import duckdb

from warehouse.alerts_store import enqueue
from warehouse.db import insert_sql, transaction, update_from_excluded

_FIELDS = ("week", "format", "week_start", "week_end", "generated_at", "title", "path",
           "size_bytes", "headline")
_UPSERT = insert_sql("reports", _FIELDS, "ON CONFLICT (week, format) DO UPDATE SET "
                     + update_from_excluded(_FIELDS[2:]))
_EXISTS = ("SELECT count(*) FROM information_schema.tables "
           "WHERE table_name = 'reports' AND table_schema = current_schema()")


def record(con: duckdb.DuckDBPyConnection, files: Iterable[Mapping],
           outbox: Iterable[Mapping] = ()) -> None:
    """Upsert one row per report file and queue ``outbox`` rows, in one transaction."""
    rows = [[f.get(k) for k in _FIELDS] for f in files]
    outbox = list(outbox)
    with transaction(con):
        if rows:
            con.executemany(_UPSERT, rows)
        enqueue(con, outbox)


def has_report(cur: duckdb.DuckDBPyConnection, week: str) -> bool:
    """True when a report of ``week`` is recorded."""
    if not cur.execute(_EXISTS).fetchone()[0]:
        return False
    row = cur.execute("SELECT count(*) FROM reports WHERE week = ?", [week]).fetchone()
    return bool(row[0])


def report_files(cur: duckdb.DuckDBPyConnection, week: str) -> dict[str, str]:
    """format -> path of the recorded files of ``week`` (empty when none)."""
    if not cur.execute(_EXISTS).fetchone()[0]:
        return {}
    rows = cur.execute("SELECT format, path FROM reports WHERE week = ?", [week]).fetchall()
    return dict(rows)


def week_has_data(cur: duckdb.DuckDBPyConnection, start, end) -> bool:
    """True when telemetry of ``[start, end)`` is stored (hourly rollup or raw samples)."""
    row = cur.execute(
        "SELECT EXISTS (SELECT 1 FROM gpu_samples_1h WHERE ts >= $s AND ts < $e) "
        "OR EXISTS (SELECT 1 FROM gpu_samples WHERE ts >= $s AND ts < $e)",
        {"s": start, "e": end}).fetchone()
    return bool(row[0])

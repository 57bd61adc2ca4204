"""Writes of alerting (writer thread only: pass these to ``Warehouse.write``).

``save_evaluation`` stores one evaluation's outcome in one transaction: alert rows,
open notification groups and the new outbox rows. Because a notification and the state
that caused it commit together, a restart never re-sends nor loses one. Reads are in
``warehouse/queries/alerts.py``. Times are naive UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import duckdb

from warehouse.db import insert_sql, transaction, update_from_excluded

_ALERT_FIELDS = (
    "alert_id", "fingerprint", "rule", "severity", "scope", "rack", "node", "gpu_index",
    "group_key", "state", "value", "peak", "threshold", "unit", "active_since", "fired_at",
    "resolved_at", "clear_since", "last_eval", "context",
)
_UPSERT_ALERT = insert_sql(
    "alerts", _ALERT_FIELDS, "ON CONFLICT (alert_id) DO UPDATE SET "
    + update_from_excluded(f for f in _ALERT_FIELDS if f != "alert_id"))
_OUTBOX_FIELDS = ("notification_key", "sink", "kind", "group_key", "created_at", "body",
                  "status", "attempts", "next_attempt_at")
_INSERT_OUTBOX = insert_sql("notifications", _OUTBOX_FIELDS, "ON CONFLICT DO NOTHING")


def save_evaluation(con: duckdb.DuckDBPyConnection, *, alerts: Iterable[Mapping],
                    dropped: Iterable[str], groups: Iterable[tuple[str, datetime]],
                    outbox: Iterable[Mapping]) -> None:
    """Upsert ``alerts`` (dicts of the alert columns; acknowledgements are kept), delete
    ``dropped`` alert ids, replace the open groups, and queue ``outbox`` rows (a row
    whose key and sink exist already is ignored), all in one transaction."""
    alert_rows = [[a.get(f) for f in _ALERT_FIELDS] for a in alerts]
    dropped = [[d] for d in dropped]
    groups = [list(g) for g in groups]
    outbox_rows = [[o.get(f) for f in _OUTBOX_FIELDS] for o in outbox]
    with transaction(con):
        if alert_rows:
            con.executemany(_UPSERT_ALERT, alert_rows)
        if dropped:
            con.executemany("DELETE FROM alerts WHERE alert_id = ?", dropped)
        con.execute("DELETE FROM alert_groups")
        if groups:
            con.executemany("INSERT INTO alert_groups VALUES (?, ?)", groups)
        if outbox_rows:
            con.executemany(_INSERT_OUTBOX, outbox_rows)


def enqueue(con: duckdb.DuckDBPyConnection, outbox: Iterable[Mapping]) -> None:
    """Queue outbox rows (e.g. a test notification)."""
    rows = [[o.get(f) for f in _OUTBOX_FIELDS] for o in outbox]
    if rows:
        con.executemany(_INSERT_OUTBOX, rows)


def mark_delivered(con: duckdb.DuckDBPyConnection, key: str, sink: str, now: datetime,
                   attempts: int) -> None:
    con.execute(
        """UPDATE notifications SET status = 'delivered', delivered_at = ?, attempts = ?,
           last_error = NULL WHERE notification_key = ? AND sink = ?""",
        [now, attempts, key, sink],
    )


def mark_by_twin(con: duckdb.DuckDBPyConnection, key: str, sink: str,
                 now: datetime) -> None:
    """The twin of an HA pair delivered this notification (alerts/ha.py): status
    ``twin``, never sent from here."""
    con.execute(
        """UPDATE notifications SET status = 'twin', delivered_at = ?
           WHERE notification_key = ? AND sink = ? AND status = 'pending'""",
        [now, key, sink],
    )


def mark_failed(con: duckdb.DuckDBPyConnection, key: str, sink: str, *, attempts: int,
                next_attempt_at: datetime, error: str, dead: bool) -> None:
    """Record a failed attempt; ``dead`` gives up on the row."""
    con.execute(
        """UPDATE notifications SET attempts = ?, next_attempt_at = ?, last_error = ?,
           status = CASE WHEN ? THEN 'dead' ELSE status END
           WHERE notification_key = ? AND sink = ?""",
        [attempts, next_attempt_at, error[:500], dead, key, sink],
    )


def add_silence(con: duckdb.DuckDBPyConnection, silence: Mapping) -> None:
    """Insert a silence (keys: silence_id, rule, rack, node, created_at, expires_at,
    created_by, comment)."""
    fields = ("silence_id", "rule", "rack", "node", "created_at", "expires_at",
              "created_by", "comment")
    con.execute(insert_sql("silences", fields), [silence.get(f) for f in fields])


def expire_silence(con: duckdb.DuckDBPyConnection, silence_id: str, now: datetime) -> int:
    """End a silence now; returns 1 if it existed and was still active, else 0."""
    rows = con.execute(
        "UPDATE silences SET expires_at = ? WHERE silence_id = ? AND expires_at > ? "
        "RETURNING silence_id",
        [now, silence_id, now],
    ).fetchall()
    return len(rows)


def ack_alert(con: duckdb.DuckDBPyConnection, alert_id: str, *, by: str, comment: str,
              now: datetime) -> int:
    """Acknowledge an alert; returns 1 if it exists, else 0."""
    rows = con.execute(
        "UPDATE alerts SET acked_at = ?, acked_by = ?, ack_comment = ? WHERE alert_id = ? "
        "RETURNING alert_id",
        [now, by, comment, alert_id],
    ).fetchall()
    return len(rows)

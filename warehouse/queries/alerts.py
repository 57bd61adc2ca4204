"""Read queries of alerting: the evaluation windows, alert state, silences, the outbox.

The evaluator reads ``window_samples``, ``gpu_inventory`` and ``window_events``; the
service's state is ``active_alerts``, ``open_groups`` and ``active_silences``; the
Thermal page and the CLI read ``list_alerts``, ``list_silences``,
``list_notifications`` and ``outbox_summary``.
Writes are in ``warehouse/alerts_store.py``. Times are naive UTC; ``span_s`` seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pandas as pd

from warehouse.db import fill

_ALERT_COLUMNS = (
    "alert_id, fingerprint, rule, severity, scope, rack, node, gpu_index, group_key, state, "
    "value, peak, threshold, unit, active_since, fired_at, resolved_at, clear_since, "
    "last_eval, context, acked_at, acked_by, ack_comment"
)


def window_samples(cur: duckdb.DuckDBPyConnection, *, now: datetime,
                   span_s: float) -> pd.DataFrame:
    """Raw samples with ``ts`` in ``(now - span_s, now]``: ts, node, gpu_index, temp_c,
    mem_temp_c, power_w, throttle_thermal (1.0 throttling, 0.0 not, NaN unknown)."""
    return cur.execute(
        """SELECT ts, node, gpu_index, temp_c, mem_temp_c, power_w,
                  throttle_thermal::FLOAT AS throttle_thermal
           FROM gpu_samples WHERE ts > $since AND ts <= $now""",
        {"since": now - timedelta(seconds=span_s), "now": now},
    ).df()


def first_sample_ts(cur: duckdb.DuckDBPyConnection) -> datetime | None:
    """The time of the oldest raw sample (None when there is none): where a backtest
    can start."""
    row = cur.execute("SELECT min(ts) FROM gpu_samples").fetchone()
    return None if row is None or row[0] is None else row[0]


def gpu_inventory(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every known GPU with its rack and model: node, gpu_index, rack, model. Nodes
    without GPU rows appear once with a NULL gpu_index (their rack is still known)."""
    return cur.execute(
        """SELECT n.node, g.gpu_index, n.rack, g.model
           FROM nodes n LEFT JOIN gpus g USING (node)
           UNION ALL
           SELECT g.node, g.gpu_index, NULL, g.model
           FROM gpus g ANTI JOIN nodes n USING (node)"""
    ).df()


def window_events(cur: duckdb.DuckDBPyConnection, *, now: datetime, span_s: float,
                  kind: str = "xid") -> pd.DataFrame:
    """GPU events of ``kind`` with ``ts`` in ``(now - span_s, now]``, with the rack:
    ts, node, gpu_index, code, rack."""
    return cur.execute(
        """SELECT e.ts, e.node, e.gpu_index, e.code, n.rack
           FROM gpu_events e LEFT JOIN nodes n USING (node)
           WHERE e.kind = $kind AND e.ts > $since AND e.ts <= $now ORDER BY e.ts""",
        {"kind": kind, "since": now - timedelta(seconds=span_s), "now": now},
    ).df()


_ACTIVE = fill("SELECT {columns} FROM alerts WHERE state IN ('pending', 'firing')",
               columns=_ALERT_COLUMNS)
_ONE = fill("SELECT {columns} FROM alerts WHERE alert_id = $id", columns=_ALERT_COLUMNS)


def active_alerts(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Pending and firing alerts (the evaluator's state), every column."""
    return cur.execute(_ACTIVE).df()


def open_groups(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Notification groups whose firing message went out: group_key, opened_at."""
    return cur.execute("SELECT group_key, opened_at FROM alert_groups").df()


def get_alert(cur: duckdb.DuckDBPyConnection, alert_id: str) -> dict | None:
    """One alert by id, as a dict, or None."""
    df = cur.execute(_ONE, {"id": alert_id}).df()
    return None if df.empty else df.iloc[0].to_dict()


def list_alerts(cur: duckdb.DuckDBPyConnection, *, now: datetime, since_s: float = 86400.0,
                states: tuple[str, ...] = ("pending", "firing", "resolved"),
                rack: str | None = None, limit: int = 500) -> pd.DataFrame:
    """Alerts in ``states`` that were active at some time in ``(now - since_s, now]``
    (pending/firing ones always), newest first; ``rack`` narrows to one rack."""
    return cur.execute(
        fill("""SELECT {alert_columns} FROM alerts
            WHERE state IN (SELECT unnest($states::VARCHAR[]))
              AND (state <> 'resolved' OR resolved_at > $since)
              AND active_since <= $now
              AND ($rack IS NULL OR rack = $rack)
            ORDER BY state = 'resolved', coalesce(fired_at, active_since) DESC, alert_id
            LIMIT $limit""", alert_columns=_ALERT_COLUMNS),
        {"states": list(states), "since": now - timedelta(seconds=since_s), "now": now,
         "rack": rack, "limit": limit},
    ).df()


def active_silences(cur: duckdb.DuckDBPyConnection, *, now: datetime) -> pd.DataFrame:
    """Silences not yet expired at ``now``."""
    return list_silences(cur, now=now, include_expired=False)


def list_silences(cur: duckdb.DuckDBPyConnection, *, now: datetime,
                  include_expired: bool = False) -> pd.DataFrame:
    """Silences (newest first): silence_id, rule, rack, node, created_at, expires_at,
    created_by, comment."""
    return cur.execute(
        """SELECT silence_id, rule, rack, node, created_at, expires_at, created_by, comment
           FROM silences WHERE $all OR expires_at > $now
           ORDER BY created_at DESC, silence_id""",
        {"all": include_expired, "now": now},
    ).df()


def pending_notifications(cur: duckdb.DuckDBPyConnection, *,
                          limit: int = 500) -> pd.DataFrame:
    """Outbox rows still to deliver, oldest first (delivery keeps each sink's order)."""
    return cur.execute(
        """SELECT notification_key, sink, kind, group_key, created_at, body, attempts,
                  next_attempt_at
           FROM notifications WHERE status = 'pending'
           ORDER BY created_at, notification_key, sink LIMIT $limit""",
        {"limit": limit},
    ).df()


def list_notifications(cur: duckdb.DuckDBPyConnection, *, now: datetime,
                       since_s: float = 86400.0) -> pd.DataFrame:
    """Outbox rows created in ``(now - since_s, now]`` without their bodies."""
    return cur.execute(
        """SELECT notification_key, sink, kind, group_key, created_at, status, attempts,
                  next_attempt_at, delivered_at, last_error
           FROM notifications WHERE created_at > $since AND created_at <= $now
           ORDER BY created_at, notification_key, sink""",
        {"since": now - timedelta(seconds=since_s), "now": now},
    ).df()


def delivered_since(cur: duckdb.DuckDBPyConnection, *, since: datetime,
                    limit: int = 1000) -> pd.DataFrame:
    """Outbox rows this instance delivered itself, created after ``since``, newest first
    (what an HA twin reads from /healthz, alerts/ha.py): notification_key, sink, kind,
    group_key, created_at."""
    return cur.execute(
        """SELECT notification_key, sink, kind, group_key, created_at
           FROM notifications WHERE status = 'delivered' AND created_at > $since
           ORDER BY created_at DESC, notification_key, sink LIMIT $limit""",
        {"since": since, "limit": limit},
    ).df()


def outbox_summary(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Outbox rows per sink and status: sink, status, rows, oldest_created_at."""
    return cur.execute(
        """SELECT sink, status, count(*) AS rows, min(created_at) AS oldest_created_at
           FROM notifications GROUP BY sink, status ORDER BY sink, status"""
    ).df()


def running_jobs(cur: duckdb.DuckDBPyConnection, *, nodes: list[str],
                 now: datetime) -> pd.DataFrame:
    """Jobs holding GPUs on ``nodes`` at ``now``: job_id, name, user_name, gpus_here."""
    return cur.execute(
        """SELECT a.job_id, any_value(j.name) AS name, any_value(j.user_name) AS user_name,
                  count(*) AS gpus_here
           FROM allocations a LEFT JOIN jobs j USING (job_id)
           WHERE a.node IN (SELECT unnest($nodes::VARCHAR[]))
             AND a.start_ts <= $now AND (a.end_ts IS NULL OR a.end_ts > $now)
           GROUP BY a.job_id ORDER BY gpus_here DESC, a.job_id""",
        {"nodes": list(nodes), "now": now},
    ).df()

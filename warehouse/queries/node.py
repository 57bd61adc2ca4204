"""Queries of the Node page (``/node?node=...``): one node, its job runs, events, alerts.

Its GPUs with their latest samples come from :func:`warehouse.queries.topology.gpus_now`.
Times are naive UTC; ranges are ``[start, end)``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pandas as pd

from warehouse.db import fill
from warehouse.queries.alerts import _ALERT_COLUMNS


def node_info(cur: duckdb.DuckDBPyConnection, node: str) -> dict | None:
    """``{"node", "rack", "partition", "gpus"}`` of ``node``, or None if unknown."""
    row = cur.execute("SELECT node, rack, partition, gpus FROM nodes WHERE node = $node",
                      {"node": node}).fetchone()
    return None if row is None else dict(zip(("node", "rack", "partition", "gpus"), row,
                                             strict=True))


def runs(cur: duckdb.DuckDBPyConnection, node: str, *, start: datetime, end: datetime,
         now: datetime, limit: int = 500) -> pd.DataFrame:
    """Job runs that held GPUs of ``node`` during ``[start, end)``, newest first:
    job_id, run_index, name, user_name, state, start_ts, end_ts, gpus (on this node),
    gpu_indices (text, e.g. ``"0,1,2,3"``), hours (of the run on this node, to ``now``)."""
    return cur.execute(
        """SELECT a.job_id, a.run_index, j.name, j.user_name, r.state,
                  min(a.start_ts) AS start_ts, max(a.end_ts) AS end_ts,
                  count(*) AS gpus,
                  string_agg(CAST(a.gpu_index AS VARCHAR), ',' ORDER BY a.gpu_index)
                      AS gpu_indices,
                  (epoch(least(coalesce(max(a.end_ts), $now), $now))
                   - epoch(min(a.start_ts))) / 3600.0 AS hours
           FROM allocations a
           LEFT JOIN jobs j USING (job_id)
           LEFT JOIN job_runs r USING (job_id, run_index)
           WHERE a.node = $node AND a.start_ts < $end
             AND (a.end_ts IS NULL OR a.end_ts >= $start)
           GROUP BY a.job_id, a.run_index, j.name, j.user_name, r.state
           ORDER BY start_ts DESC, a.job_id, a.run_index LIMIT $limit""",
        {"node": node, "start": start, "end": end, "now": now, "limit": limit},
    ).df()


def events(cur: duckdb.DuckDBPyConnection, node: str, *, start: datetime, end: datetime,
           limit: int = 500) -> pd.DataFrame:
    """GPU events of ``node`` in ``[start, end)``, newest first: ts, gpu_index, kind,
    code, detail."""
    return cur.execute(
        """SELECT ts, gpu_index, kind, code, detail FROM gpu_events
           WHERE node = $node AND ts >= $start AND ts < $end
           ORDER BY ts DESC, gpu_index LIMIT $limit""",
        {"node": node, "start": start, "end": end, "limit": limit},
    ).df()


def alerts(cur: duckdb.DuckDBPyConnection, node: str, *, rack: str | None, now: datetime,
           since_s: float = 86400.0, limit: int = 200) -> pd.DataFrame:
    """Alerts on ``node`` (and rack-wide alerts of its ``rack``) active at some time in
    ``(now - since_s, now]``, pending and firing ones always; every alerts column."""
    return cur.execute(
        fill("""SELECT {columns} FROM alerts
            WHERE (node = $node OR (scope = 'rack' AND rack = $rack))
              AND (state <> 'resolved' OR resolved_at > $since)
              AND active_since <= $now
            ORDER BY state = 'resolved', coalesce(fired_at, active_since) DESC, alert_id
            LIMIT $limit""", columns=_ALERT_COLUMNS),
        {"node": node, "rack": rack, "now": now,
         "since": now - timedelta(seconds=since_s), "limit": limit},
    ).df()

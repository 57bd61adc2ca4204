"""Between the warehouse's rows and the evaluator's values (state, silences, outbox)."""

from __future__ import annotations

import json
import math
from datetime import datetime

import pandas as pd

from alerts.model import Alert, Group, Notification, Silence, State
from warehouse.queries import alerts as q


def _py(value):
    """pandas scalars -> Python (NaN/NaT -> None, Timestamp -> datetime)."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if hasattr(value, "item"):
        return value.item()
    return value


def alert_from_row(row: dict) -> Alert:
    r = {k: _py(v) for k, v in row.items()}
    return Alert(
        alert_id=r["alert_id"], fingerprint=r["fingerprint"], rule=r["rule"],
        severity=r["severity"], scope=r["scope"], rack=r["rack"], node=r["node"],
        gpu_index=None if r["gpu_index"] is None else int(r["gpu_index"]), state=r["state"],
        value=r["value"] if r["value"] is not None else math.nan,
        threshold=r["threshold"], unit=r["unit"] or "", active_since=r["active_since"],
        fired_at=r["fired_at"], resolved_at=r["resolved_at"], clear_since=r["clear_since"],
        last_eval=r["last_eval"], peak=r["peak"] if r["peak"] is not None else 0.0,
        context=json.loads(r["context"]) if r["context"] else {},
    )


def alert_row(a: Alert) -> dict:
    """The columns of ``alerts`` for one alert (see warehouse/alerts_store.py)."""
    return {
        "alert_id": a.alert_id, "fingerprint": a.fingerprint, "rule": a.rule,
        "severity": a.severity, "scope": a.scope, "rack": a.rack, "node": a.node,
        "gpu_index": a.gpu_index, "group_key": a.group_key, "state": a.state,
        "value": None if math.isnan(a.value) else a.value, "peak": a.peak,
        "threshold": a.threshold, "unit": a.unit, "active_since": a.active_since,
        "fired_at": a.fired_at, "resolved_at": a.resolved_at, "clear_since": a.clear_since,
        "last_eval": a.last_eval, "context": json.dumps(a.context, sort_keys=True),
    }


def load_state(cur) -> State:
    """The evaluator's state as stored: pending/firing alerts and open groups."""
    alerts = {}
    for row in q.active_alerts(cur).to_dict("records"):
        a = alert_from_row(row)
        alerts[a.fingerprint] = a
    groups = {
        key: Group(key, _py(opened))
        for key, opened in q.open_groups(cur).itertuples(index=False)
    }
    return State(alerts, groups)


def load_silences(cur, now: datetime) -> tuple[Silence, ...]:
    out = []
    for row in q.active_silences(cur, now=now).to_dict("records"):
        r = {k: _py(v) for k, v in row.items()}
        out.append(Silence(silence_id=r["silence_id"], expires_at=r["expires_at"],
                           rule=r["rule"], rack=r["rack"], node=r["node"],
                           comment=r["comment"] or "", created_by=r["created_by"] or "",
                           created_at=r["created_at"]))
    return tuple(out)


def outbox_rows(note: Notification, bodies: dict[str, str], now: datetime) -> list[dict]:
    """One pending outbox row per sink for ``note`` (``bodies``: sink -> JSON text)."""
    return [
        {"notification_key": note.key, "sink": sink, "kind": note.kind,
         "group_key": note.group, "created_at": now, "body": body, "status": "pending",
         "attempts": 0, "next_attempt_at": now}
        for sink, body in bodies.items()
    ]

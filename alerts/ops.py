"""Operator actions on a Warehouse: list, silence, unsilence, acknowledge.

The HTTP API (alerts/api.py) and the CLI without a running service (gpulens/cli_alerts.py)
both call these, so the two paths behave the same. Results are JSON-friendly dicts.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pandas as pd

from alerts.model import short_hash
from warehouse import alerts_store as store
from warehouse.queries import alerts as q


class OpsError(ValueError):
    """A request the operator can fix (the message says how)."""


def records(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as JSON-friendly dicts (timestamps ISO with Z, NaN None)."""
    out = []
    for row in frame.to_dict("records"):
        clean = {}
        for k, v in row.items():
            if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
                v = None
            elif isinstance(v, pd.Timestamp | datetime):
                v = v.isoformat() + "Z"
            elif hasattr(v, "item"):
                v = v.item()
            clean[k] = v
        out.append(clean)
    return out


def list_alerts(warehouse, now: datetime, *, state: str | None = None,
                rack: str | None = None, since_s: float = 86400.0) -> list[dict]:
    states = (state,) if state else ("pending", "firing", "resolved")
    return records(q.list_alerts(warehouse.reader(), now=now, since_s=since_s, states=states,
                                 rack=rack))


def list_silences(warehouse, now: datetime, *, include_expired: bool = False) -> list[dict]:
    return records(q.list_silences(warehouse.reader(), now=now,
                                   include_expired=include_expired))


def add_silence(warehouse, now: datetime, *, rule: str | None = None,
                rack: str | None = None, node: str | None = None, duration_s: float,
                comment: str, created_by: str = "") -> dict:
    """Silence alerts matching every given matcher for ``duration_s`` seconds."""
    if not (rule or rack or node):
        raise OpsError("a silence needs at least one of rule, rack or node")
    if not duration_s or duration_s <= 0:
        raise OpsError("a silence needs a positive duration (e.g. --for 2h)")
    if not comment:
        raise OpsError("a silence needs a comment saying why (--comment)")
    silence = {
        "silence_id": short_hash("silence", rule, rack, node, now.isoformat()),
        "rule": rule or None, "rack": rack or None, "node": node or None,
        "created_at": now, "expires_at": now + timedelta(seconds=duration_s),
        "created_by": created_by, "comment": comment,
    }
    warehouse.write(lambda con: store.add_silence(con, silence)).result()
    return records(pd.DataFrame([silence]))[0]


def expire_silence(warehouse, now: datetime, silence_id: str) -> bool:
    return bool(warehouse.write(lambda con: store.expire_silence(con, silence_id, now))
                .result())


def ack(warehouse, now: datetime, alert_id: str, *, by: str = "",
        comment: str = "") -> dict:
    """Acknowledge an alert; raises OpsError for an unknown id."""
    done = warehouse.write(lambda con: store.ack_alert(con, alert_id, by=by, comment=comment,
                                                       now=now)).result()
    if not done:
        raise OpsError(f"no alert {alert_id!r}; see `gpulens alerts list`")
    return records(pd.DataFrame([q.get_alert(warehouse.reader(), alert_id)]))[0]


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d`` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = str(text).strip().lower()
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise OpsError(f"duration {text!r}: expected e.g. 90s, 30m, 2h or 1d") from None

"""Alerts as the pages show them: the list, the headline card, acknowledge and silence.

Reads go through :mod:`warehouse.queries.alerts`; the two writes (acknowledge, silence)
go through the warehouse's single writer with :mod:`warehouse.alerts_store`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pandas as pd
from dash import html

from dashboard import ids
from dashboard.components import Column, cell_text, empty
from dashboard.formatting import fmt_int

SILENCE_FOR = timedelta(hours=1)


def _when(ts) -> str:
    return f"{pd.Timestamp(ts):%a %H:%M} UTC"


def _value(rec: dict) -> str:
    value, unit = rec.get("value"), rec.get("unit") or ""
    return cell_text(value, lambda v: f"{v:,.1f} {unit}".strip())


ALERT_COLUMNS = (
    Column("severity", "Severity"),
    Column("state", "State"),
    Column("rule", "Rule"),
    Column("rack", "Rack"),
    Column("node", "Node"),
    Column("gpu_index", "GPU", lambda v: str(int(v)), numeric=True),
    Column("value", "Value", lambda v: f"{v:,.1f}", numeric=True),
    Column("active_since", "Since", _when),
    Column("acked_by", "Acknowledged by"),
)


def alert_card_texts(df: pd.DataFrame) -> tuple[str, str]:
    """(value, note) of the "Active alerts" card from ``list_alerts``' frame."""
    if df is None or len(df) == 0:
        return "0", "No firing or pending alerts"
    firing = int((df["state"] == "firing").sum())
    critical = int(((df["state"] == "firing") & (df["severity"] == "critical")).sum())
    note = f"{fmt_int(firing)} firing ({fmt_int(critical)} critical), " \
           f"{fmt_int(len(df) - firing)} pending"
    return fmt_int(len(df)), note


def actionable_list(df: pd.DataFrame) -> html.Div:
    """Active alerts with Acknowledge and Silence buttons (pattern-matching ids)."""
    if df is None or len(df) == 0:
        return empty("No active alerts: every rack is within its thresholds.")
    rows = []
    for rec in df.to_dict("records"):
        where = " / ".join(str(rec[k]) for k in ("rack", "node") if rec.get(k)) or "fleet"
        acked = rec.get("acked_by")
        rows.append(html.Div([
            html.Span(cell_text(rec.get("severity")),
                      className=f"badge badge-{rec.get('severity')}"),
            html.Div([html.B(cell_text(rec.get("rule"))), html.Span(f" · {where}"),
                      html.Div(f"{cell_text(rec.get('state'))} since "
                               f"{_when(rec['active_since'])} · value {_value(rec)}"
                               + (f" · acknowledged by {acked}" if acked else ""),
                               className="panel-sub")], className="alert-text"),
            html.Button("Acknowledge", id={"type": ids.ALERT_ACK, "alert": rec["alert_id"]},
                        className="btn", disabled=bool(acked)),
            html.Button("Silence 1 h", id={"type": ids.ALERT_SILENCE,
                                           "alert": rec["alert_id"]}, className="btn"),
        ], className="alert-row"))
    return html.Div(rows, className="alert-list")


def acknowledge(warehouse, alert_id: str, *, by: str, now: datetime) -> int:
    """Mark the alert acknowledged by ``by``; returns 1 if it exists."""
    from warehouse import alerts_store

    return warehouse.write(lambda con: alerts_store.ack_alert(
        con, alert_id, by=by, comment="acknowledged on the dashboard", now=now)).result()


def silence(warehouse, alert: dict, *, by: str, now: datetime) -> str:
    """Silence the alert's rule on its rack (or node) for :data:`SILENCE_FOR`."""
    from warehouse import alerts_store

    sid = uuid.uuid4().hex[:16]
    record = {"silence_id": sid, "rule": alert.get("rule"), "rack": alert.get("rack"),
              "node": None if alert.get("rack") else alert.get("node"),
              "created_at": now, "expires_at": now + SILENCE_FOR, "created_by": by,
              "comment": "silenced on the dashboard"}
    warehouse.write(lambda con: alerts_store.add_silence(con, record)).result()
    return sid

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
from dashboard.formatting import fmt_int, missing

SILENCE_FOR = timedelta(hours=1)


SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
STATE_RANK = {"firing": 0, "pending": 1, "resolved": 2}
UNITS = {"C": "°C"}  # rule units as written after a value


def _when(ts) -> str:
    return f"{pd.Timestamp(ts):%a %H:%M} UTC"


def _number(value, unit) -> str:
    """``87.25, "°C"`` -> ``"87.3 °C"``; missing -> em dash (never "nan")."""
    unit = "" if missing(unit) else UNITS.get(str(unit), str(unit))
    return cell_text(value, lambda v: f"{v:,.1f} {unit}".strip())


def _where(rec: dict) -> str:
    """``"r03 / n012 / GPU 3"``: the alert's rack, node and GPU index, as far as known."""
    parts = [str(rec[k]) for k in ("rack", "node") if not missing(rec.get(k))]
    if not missing(rec.get("gpu_index")):
        parts.append(f"GPU {int(rec['gpu_index'])}")
    return " / ".join(parts) or "fleet"


def order_alerts(df: pd.DataFrame) -> pd.DataFrame:
    """``list_alerts``' frame as incidents: one incident per rack (node or fleet where
    the alert has no rack), the incident with the most severe firing alert first, and
    inside it firing before pending, critical before warning, newest first.

    Adds text columns: ``incident`` (the rack), ``where`` (rack / node / GPU),
    ``value_text`` and ``threshold_text`` with their unit, and ``since_text``: the
    firing time for a firing alert (not when it turned pending), the pending time
    for a pending one."""
    if df is None or len(df) == 0:
        return df
    d = df.copy()
    firing = d["state"].eq("firing") & d["fired_at"].notna()
    since = d["fired_at"].where(firing, d["active_since"])
    d["incident"] = d["rack"].fillna(d["node"]).fillna("fleet").astype(str)
    rank = (d["state"].map(STATE_RANK).fillna(3) * 10
            + d["severity"].map(SEVERITY_RANK).fillna(3))
    d = d.assign(_rank=rank, _worst=rank.groupby(d["incident"]).transform("min"),
                 _since=since)
    d = d.sort_values(["_worst", "incident", "_rank", "_since"],
                      ascending=[True, True, True, False], kind="stable")
    recs = d.to_dict("records")
    d["where"] = [_where(r) for r in recs]
    d["value_text"] = [_number(r.get("value"), r.get("unit")) for r in recs]
    d["threshold_text"] = [_number(r.get("threshold"), r.get("unit")) for r in recs]
    d["since_text"] = [f"{r['state']} since {_when(r['_since'])}" for r in recs]
    return d.drop(columns=["_rank", "_worst", "_since"]).reset_index(drop=True)


ALERT_COLUMNS = (
    Column("severity", "Severity"),
    Column("state", "State"),
    Column("rule", "Rule"),
    Column("where", "Rack / node / GPU"),
    Column("value_text", "Value"),
    Column("threshold_text", "Threshold"),
    Column("since_text", "Since"),
    Column("acked_by", "Acknowledged by"),
)


def firing_racks(counts: pd.DataFrame | None) -> dict[str, str]:
    """Rack -> the severity of its worst firing alert, from ``overview.firing_by_rack``."""
    if counts is None or len(counts) == 0:
        return {}
    d = counts[counts["rack"].notna()].assign(
        rank=counts["severity"].map(SEVERITY_RANK).fillna(3))
    d = d.sort_values("rank").drop_duplicates("rack")
    return dict(zip(d["rack"].astype(str), d["severity"].astype(str), strict=True))


def alert_card_texts(df: pd.DataFrame) -> tuple[str, str]:
    """(value, note) of the "Active alerts" card from ``list_alerts``' frame."""
    if df is None or len(df) == 0:
        return "0", "No firing or pending alerts"
    firing = int((df["state"] == "firing").sum())
    critical = int(((df["state"] == "firing") & (df["severity"] == "critical")).sum())
    note = f"{fmt_int(firing)} firing ({fmt_int(critical)} critical), " \
           f"{fmt_int(len(df) - firing)} pending"
    return fmt_int(len(df)), note


def _alert_row(rec: dict, actions: bool = True) -> html.Div:
    acked = rec.get("acked_by")
    acked = None if missing(acked) else acked
    return html.Div([
        html.Span(cell_text(rec.get("severity")),
                  className=f"badge badge-{rec.get('severity')}"),
        html.Div([html.B(cell_text(rec.get("rule"))), html.Span(f" · {rec['where']}"),
                  html.Div(f"{rec['since_text']} · value {rec['value_text']} "
                           f"(threshold {rec['threshold_text']})"
                           + (f" · acknowledged by {acked}" if acked else ""),
                           className="panel-sub")], className="alert-text"),
        *([html.Button("Acknowledge", id={"type": ids.ALERT_ACK, "alert": rec["alert_id"]},
                       className="btn", disabled=bool(acked)),
           html.Button("Silence 1 h", id={"type": ids.ALERT_SILENCE,
                                          "alert": rec["alert_id"]}, className="btn")]
          if actions else []),
    ], className=f"alert-row alert-{rec.get('severity')}")


def actionable_list(df: pd.DataFrame, actions: bool = True) -> html.Div:
    """Active alerts grouped per rack incident, the most severe incident first
    (:func:`order_alerts`), with Acknowledge and Silence buttons (pattern-matching ids)
    when ``actions`` (operators; viewers get the list without them)."""
    if df is None or len(df) == 0:
        return empty("No active alerts: every rack is within its thresholds.")
    d = order_alerts(df)
    groups = []
    for incident, part in d.groupby("incident", sort=False):
        recs = part.to_dict("records")
        firing = sum(r["state"] == "firing" for r in recs)
        critical = sum(r["severity"] == "critical" and r["state"] == "firing" for r in recs)
        head = (f"Rack {incident}" if not missing(recs[0].get("rack")) else str(incident))
        head += f" · {fmt_int(len(recs))} alerts, {fmt_int(firing)} firing"
        head += f" ({fmt_int(critical)} critical)" if critical else ""
        groups.append(html.Div(
            [html.H3(head, className="incident-title"), *[_alert_row(r, actions) for r in recs]],
            className="incident" + (" incident-critical" if critical else ""),
            **{"data-incident": str(incident)}))
    return html.Div(groups, className="alert-list")


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

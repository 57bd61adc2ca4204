"""Notification bodies: the generic JSON document, Slack messages, Alertmanager alerts.

``document`` turns a :class:`Notification` plus context (affected jobs, dashboard link)
into the generic JSON document (docs/alerts.md shows one); ``slack`` and
``alertmanager`` render that document for their receivers. ``encode`` gives the exact
bytes stored in the outbox and signed, so every retry sends identical bytes.

Every body names its cluster (the ``cluster.name`` setting): the document's ``cluster``
field, a line of the Slack message, a ``cluster`` label on Alertmanager alerts. The
idempotency key (model.episode_key) is a function of the cluster and the alert group's
episode on the sources' clock, so two instances of an HA pair watching the same cluster
send the same key (issue 20) and two clusters paging one receiver never share one;
Alertmanager groups by the labels, identical across the pair.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from alerts.model import Alert, Notification
from gpulens.settings import default

VERSION = 1


def iso(ts: datetime | None) -> str | None:
    """Naive UTC datetime -> RFC 3339 with Z."""
    return None if ts is None else ts.replace(microsecond=0).isoformat() + "Z"


def encode(doc: Any) -> str:
    """Canonical JSON text (sorted keys, no spaces); sent as UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _fmt(value: float, unit: str) -> str:
    if unit in ("", "events"):
        return f"{value:g}" + (f" {unit}" if unit else "")
    return f"{value:.1f} {unit}"


def alert_doc(a: Alert) -> dict[str, Any]:
    return {
        "alert_id": a.alert_id, "fingerprint": a.fingerprint, "rule": a.rule,
        "severity": a.severity, "scope": a.scope, "entity": a.entity, "rack": a.rack,
        "node": a.node, "gpu_index": a.gpu_index, "state": a.state,
        "value": round(a.value, 2), "peak": round(a.peak, 2), "threshold": a.threshold,
        "unit": a.unit, "active_since": iso(a.active_since), "fired_at": iso(a.fired_at),
        "resolved_at": iso(a.resolved_at), "context": a.context,
    }


def nodes_of(note: Notification) -> list[str]:
    """Nodes the notification is about (a rack alert's context lists its nodes)."""
    nodes = set()
    for a in note.alerts:
        if a.node:
            nodes.add(a.node)
        nodes.update(a.context.get("nodes", ()))
    return sorted(nodes)


def title(note: Notification) -> str:
    """One line: ``[FIRING] critical rack_cooling in r03: 12.4 C (3 GPUs)``."""
    where = note.rack or note.alerts[0].entity
    worst = max(note.alerts, key=lambda a: a.peak)
    value = _fmt(worst.peak if note.kind == "resolved" else worst.value, worst.unit)
    count = f" ({len(note.alerts)} {note.alerts[0].scope}s)" if len(note.alerts) > 1 else ""
    return f"[{note.kind.upper()}] {note.severity} {note.rule} in {where}: {value}{count}"


def document(note: Notification, *, summary: str, dashboard_url: str,
             jobs: list[dict] | None = None,
             cluster: str = default("cluster.name")) -> dict[str, Any]:
    """The generic JSON document of a notification (the webhook body)."""
    link = dashboard_url
    if note.rack:
        link = dashboard_url.rstrip("/") + "/thermal?" + urlencode({"rack": note.rack})
    return {
        "version": VERSION, "key": note.key, "kind": note.kind, "group": note.group,
        "cluster": cluster, "rule": note.rule, "severity": note.severity, "rack": note.rack,
        "title": title(note), "summary": summary, "opened_at": iso(note.opened_at),
        "created_at": iso(note.created_at), "dashboard_url": link,
        "nodes": nodes_of(note), "jobs": jobs or [],
        "alerts": [alert_doc(a) for a in note.alerts],
    }


def slack(doc: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message: rack, what, how hot, since when, nodes, jobs."""
    first = doc["alerts"][0]
    ctx = first["context"]
    hot = [f"{k.replace('_', ' ')} {v}" for k, v in ctx.items()
           if k in ("temp_c", "temp_max_c", "above_peers_c", "above_baseline_c", "power_w",
                    "job_id", "job_gpus", "slowdown", "gpu_hours_per_hour")  # stragglers
           and v is not None]
    since = doc["opened_at"] if doc["kind"] != "resolved" else (
        f"{doc['opened_at']} until {doc['created_at']}")
    jobs = ", ".join(f"{j['job_id']} ({j.get('user_name') or '?'}, {j['gpus_here']} GPUs)"
                     for j in doc["jobs"][:8]) or "none"
    nodes = ", ".join(doc["nodes"][:16]) + (" ..." if len(doc["nodes"]) > 16 else "")
    lines = [
        f"*{doc['title']}*",
        doc["summary"],
        f"*Cluster:* {doc.get('cluster') or '-'}   *Where:* {doc['rack'] or first['entity']}"
        f"   *Since:* {since}",
        f"*How hot:* {', '.join(hot) or '-'}",
        f"*Affected:* {', '.join(a['entity'] for a in doc['alerts'][:12])}",
        f"*Nodes:* {nodes or '-'}",
        f"*Jobs:* {jobs}",
        f"<{doc['dashboard_url']}|Open the dashboard>",
    ]
    text = "\n".join(lines)
    return {"text": doc["title"],
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


def alertmanager(doc: dict[str, Any], *, resolved_at: str | None = None) -> list[dict]:
    """Alertmanager API v2 alerts (POST /api/v2/alerts), one per gpulens alert.

    Firing alerts carry no ``endsAt`` (gpulens re-sends them); resolved ones carry
    ``endsAt`` = the resolution time, which Alertmanager treats as resolved.
    """
    out = []
    for a in doc["alerts"]:
        labels = {"alertname": a["rule"], "severity": a["severity"], "scope": a["scope"],
                  "source": "gpulens"}
        if doc.get("cluster"):
            labels["cluster"] = doc["cluster"]
        for key in ("rack", "node"):
            if a[key]:
                labels[key] = a[key]
        if a["gpu_index"] is not None:
            labels["gpu"] = str(a["gpu_index"])
        item = {
            "labels": labels,
            "annotations": {"summary": doc["title"], "description": doc["summary"],
                            "value": str(a["value"]), "dashboard": doc["dashboard_url"]},
            "startsAt": a["fired_at"] or a["active_since"],
            "generatorURL": doc["dashboard_url"],
        }
        ends = a["resolved_at"] or resolved_at
        if doc["kind"] == "resolved" and ends:
            item["endsAt"] = ends
        out.append(item)
    return out

"""The alerts HTTP API, a Flask blueprint served by the service's web server.

Command-line work while ``gpulens serve`` runs goes through it (the service owns the
DuckDB file). Register with ``server.register_blueprint(create_blueprint(wh))``.

    GET    /api/alerts?state=firing&rack=r03&since_s=86400   {"alerts": [...]}
    POST   /api/alerts/<alert_id>/ack      {"by": "ana", "comment": "on it"}
    GET    /api/alerts/silences?all=1      {"silences": [...]}
    POST   /api/alerts/silences            {"rule"|"rack"|"node": ..., "duration": "2h",
                                            "comment": "fan swap", "created_by": "ana"}
    DELETE /api/alerts/silences/<silence_id>
    GET    /api/alerts/outbox              {"outbox": [per sink and status counts]}

Errors answer ``{"error": "..."}`` with status 400 or 404.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from flask import Blueprint, jsonify, request

from alerts import ops
from warehouse.clock import utcnow
from warehouse.queries import alerts as q


def create_blueprint(warehouse, *, now: Callable[[], datetime] = utcnow) -> Blueprint:
    bp = Blueprint("alerts_api", __name__, url_prefix="/api/alerts")

    @bp.errorhandler(ops.OpsError)
    def _bad(exc):
        status = 404 if str(exc).startswith("no alert") else 400
        return jsonify({"error": str(exc)}), status

    @bp.get("")
    def list_alerts():
        args = request.args
        return jsonify({"alerts": ops.list_alerts(
            warehouse, now(), state=args.get("state") or None, rack=args.get("rack") or None,
            since_s=float(args.get("since_s", 86400)))})

    @bp.post("/<alert_id>/ack")
    def ack(alert_id: str):
        body = request.get_json(silent=True) or {}
        return jsonify({"alert": ops.ack(warehouse, now(), alert_id, by=body.get("by", ""),
                                         comment=body.get("comment", ""))})

    @bp.get("/silences")
    def silences():
        return jsonify({"silences": ops.list_silences(
            warehouse, now(), include_expired=request.args.get("all") in ("1", "true"))})

    @bp.post("/silences")
    def add_silence():
        body = request.get_json(silent=True) or {}
        duration = body.get("duration_s") or ops.parse_duration(body.get("duration", "0"))
        silence = ops.add_silence(
            warehouse, now(), rule=body.get("rule"), rack=body.get("rack"),
            node=body.get("node"), duration_s=float(duration),
            comment=body.get("comment", ""), created_by=body.get("created_by", ""))
        return jsonify({"silence": silence}), 201

    @bp.delete("/silences/<silence_id>")
    def expire(silence_id: str):
        if not ops.expire_silence(warehouse, now(), silence_id):
            return jsonify({"error": f"no active silence {silence_id!r}"}), 404
        return jsonify({"expired": silence_id})

    @bp.get("/outbox")
    def outbox():
        return jsonify({"outbox": ops.records(q.outbox_summary(warehouse.reader()))})

    return bp

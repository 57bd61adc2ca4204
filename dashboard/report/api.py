"""HTTP API of the weekly report, registered by the service (the CLI uses it first).

    POST /api/reports            {"week": "2026-W47", "send": false}  -> files, summary
    GET  /api/reports/files/<name>   a report file of the reports directory

While ``gpulens serve`` owns the database, ``gpulens report`` cannot open it; it asks the
service instead. ``run(week, send)`` is the service's ReportScheduler.run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flask import Blueprint, abort, jsonify, request, send_from_directory

from warehouse.queries import weekly


def create_blueprint(run: Callable[..., dict], reports_dir: str) -> Blueprint:
    bp = Blueprint("reports_api", __name__, url_prefix="/api/reports")

    @bp.post("")
    def make():
        body = request.get_json(silent=True) or {}
        week = body.get("week") or ""
        try:
            weekly.parse_week(week)
        except ValueError as exc:
            return jsonify({"error": str(exc)}), 400
        try:
            return jsonify(run(week, send=bool(body.get("send"))))
        except Exception as exc:  # the CLI shows it; the service log has the traceback
            return jsonify({"error": f"{type(exc).__name__}: {exc}"}), 500

    @bp.get("/files/<name>")
    def file(name: str):
        if Path(name).name != name or not name.startswith("gpulens-report-"):
            abort(404)
        return send_from_directory(Path(reports_dir).resolve(), name)

    return bp

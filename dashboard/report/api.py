"""HTTP API of the weekly report, registered by the service (the CLI uses it first).

    POST /api/reports            {"week": "2026-W47", "send": false}  -> files, summary
    GET  /api/reports/files/<name>   a report file of the reports directory

While ``gpulens serve`` owns the database, ``gpulens report`` cannot open it; it asks the
service instead. ``run(week, send)`` is the service's ReportScheduler.run. A bad field
answers 400 naming it: ``week`` must be an ISO week from 1970 to the current one,
``send`` a boolean. Report files are served in a CSP sandbox: their inline scripts run,
but in an opaque origin without the dashboard's cookies.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path

from flask import Blueprint, abort, jsonify, request, send_from_directory

from warehouse.clock import utcnow
from warehouse.queries import weekly

FIRST_WEEK = date(1970, 1, 1)
FILE_POLICY = ("sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
               "style-src 'unsafe-inline'; img-src data:; font-src data:")


def check_week(week, today: date) -> str:
    """``week`` when it is an ISO week from 1970 up to the one of ``today``; else
    ValueError naming the field."""
    if not isinstance(week, str) or len(week) > 16:
        raise ValueError("week: expected an ISO week like 2026-W47")
    try:
        monday = weekly.parse_week(week)
    except ValueError as exc:
        raise ValueError(f"week: {exc}") from None
    if not FIRST_WEEK <= monday <= today:
        raise ValueError(f"week: {week!r} is not between 1970 and this week")
    return week


def create_blueprint(run: Callable[..., dict], reports_dir: str, *,
                     now: Callable[[], datetime] = utcnow) -> Blueprint:
    bp = Blueprint("reports_api", __name__, url_prefix="/api/reports")

    @bp.post("")
    def make():
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return jsonify({"error": "body: expected a JSON object"}), 400
        send = body.get("send", False)
        if not isinstance(send, bool):
            return jsonify({"error": "send: expected true or false"}), 400
        try:
            week = check_week(body.get("week"), now().date())
        except ValueError as exc:
            return jsonify({"error": str(exc)}), 400
        try:
            return jsonify(run(week, send=send))
        except Exception as exc:  # the CLI shows it; the service log has the traceback
            return jsonify({"error": f"{type(exc).__name__}: {exc}"}), 500

    @bp.get("/files/<name>")
    def file(name: str):
        if Path(name).name != name or not name.startswith("gpulens-report-"):
            abort(404)
        response = send_from_directory(Path(reports_dir).resolve(), name)
        response.headers["Content-Security-Policy"] = FILE_POLICY
        return response

    return bp

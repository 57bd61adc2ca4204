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
    POST   /api/alerts/backtest            {"since": "2026-10-20T00:00", "settings":
                                            {"gpu_temp.threshold": 90}} -> the report
                                            of alerts/backtest.py (nothing is sent)

Every input is checked before use: a bad one answers 400 with ``{"error": "..."}``
naming the field (``since_s``, ``duration``, ``comment`` ...); an unknown alert or
silence 404. The service's web layer (dashboard/web_security.py, dashboard/auth.py) has
already checked the caller: Origin, CSRF token, JSON body, role.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from flask import Blueprint, jsonify, request

from alerts import ops
from alerts.model import FIRING, PENDING, RESOLVED
from warehouse.clock import utcnow
from warehouse.queries import alerts as q

MAX_TEXT = 1000  # characters of a comment
MAX_NAME = 256  # characters of a name (rule, rack, node, user, id)
MAX_SINCE_S = 400 * 86400.0  # the longest look-back of a list
MAX_SILENCE_S = 90 * 86400.0  # the longest silence
STATES = (PENDING, FIRING, RESOLVED)


class BadInput(ValueError):
    """A request field the caller can fix; the message names it."""


def _text(body: dict, key: str, *, limit: int = MAX_NAME, default: str = "") -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadInput(f"{key}: expected a string, got {type(value).__name__}")
    if len(value) > limit:
        raise BadInput(f"{key}: at most {limit} characters")
    if not value.replace("\n", " ").isprintable():
        raise BadInput(f"{key}: control characters are not accepted")
    return value


def _seconds(value, key: str, *, low: float, high: float) -> float:
    """A finite number of seconds in [low, high] from a number or a text like ``2h``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadInput(f"{key}: expected a number of seconds or a duration like 2h")
    try:
        seconds = (ops.parse_duration(value) if isinstance(value, str) else float(value))
    except ops.OpsError as exc:
        raise BadInput(f"{key}: {exc}") from None
    if not math.isfinite(seconds) or not low <= seconds <= high:
        raise BadInput(f"{key}: {str(value)[:40]!r} must be a finite duration from "
                       f"{low:g} to {high:g} s")
    return seconds


def _time(body: dict, key: str, default: datetime) -> datetime:
    """An ISO time (naive = UTC) from the body, as naive UTC."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or len(value) > 40:
        raise BadInput(f"{key}: expected an ISO time like 2026-11-20T06:00:00")
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{key}: {value!r} is not an ISO time") from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _body() -> dict:
    body = request.get_json(silent=True)
    if body is None and not request.get_data():
        return {}
    if not isinstance(body, dict):
        raise BadInput("body: expected a JSON object")
    return body


def create_blueprint(warehouse, *, now: Callable[[], datetime] = utcnow, config=None,
                     incidents: Callable[[], list] | None = None) -> Blueprint:
    """``config``: the service's configuration (rules of a backtest); ``incidents``: the
    simulated sources' ground truth, for a backtest's time to page."""
    bp = Blueprint("alerts_api", __name__, url_prefix="/api/alerts")

    @bp.errorhandler(BadInput)
    def _bad_input(exc):
        return jsonify({"error": str(exc)}), 400

    @bp.errorhandler(ops.OpsError)
    def _bad(exc):
        status = 404 if str(exc).startswith("no alert") else 400
        return jsonify({"error": str(exc)}), status

    @bp.get("")
    def list_alerts():
        args = request.args
        state = _text(args, "state") or None
        if state is not None and state not in STATES:
            raise BadInput(f"state: {state[:40]!r} is not one of {', '.join(STATES)}")
        since_s = _seconds(args.get("since_s", 86400), "since_s", low=0, high=MAX_SINCE_S)
        return jsonify({"alerts": ops.list_alerts(
            warehouse, now(), state=state, rack=_text(args, "rack") or None, since_s=since_s)})

    @bp.post("/<alert_id>/ack")
    def ack(alert_id: str):
        body = _body()
        alert_id = _text({"alert_id": alert_id}, "alert_id")
        return jsonify({"alert": ops.ack(warehouse, now(), alert_id, by=_text(body, "by"),
                                         comment=_text(body, "comment", limit=MAX_TEXT))})

    @bp.get("/silences")
    def silences():
        return jsonify({"silences": ops.list_silences(
            warehouse, now(), include_expired=request.args.get("all") in ("1", "true"))})

    @bp.post("/silences")
    def add_silence():
        body = _body()
        key = "duration_s" if body.get("duration_s") is not None else "duration"
        duration = _seconds(body.get(key, "0"), key, low=1, high=MAX_SILENCE_S)
        silence = ops.add_silence(
            warehouse, now(), rule=_text(body, "rule") or None,
            rack=_text(body, "rack") or None, node=_text(body, "node") or None,
            duration_s=duration, comment=_text(body, "comment", limit=MAX_TEXT),
            created_by=_text(body, "created_by"))
        return jsonify({"silence": silence}), 201

    @bp.delete("/silences/<silence_id>")
    def expire(silence_id: str):
        silence_id = _text({"silence_id": silence_id}, "silence_id")
        if not ops.expire_silence(warehouse, now(), silence_id):
            return jsonify({"error": f"no active silence {silence_id!r}"}), 404
        return jsonify({"expired": silence_id})

    @bp.post("/backtest")
    def run_backtest():
        from alerts import backtest
        from gpulens.config import load

        body = _body()
        at = now()
        since = _time(body, "since", at - timedelta(days=30))
        until = _time(body, "until", at)
        settings = body.get("settings") or {}
        if not isinstance(settings, dict) or len(settings) > 200:
            raise BadInput("settings: expected an object of at most 200 rule settings")
        every = body.get("every_s")
        every_s = None if every is None else _seconds(every, "every_s", low=1, high=3600)
        try:
            doc = backtest.run(warehouse, config or load(None, env={}),
                               since=since, until=until,
                               overrides={_text({"key": k}, "key"): v
                                          for k, v in settings.items()},
                               every_s=every_s, incidents=incidents() if incidents else ())
        except backtest.RuleError as exc:
            raise BadInput(f"settings: {exc}") from None
        return jsonify(doc)

    @bp.get("/outbox")
    def outbox():
        return jsonify({"outbox": ops.records(q.outbox_summary(warehouse.reader()))})

    return bp

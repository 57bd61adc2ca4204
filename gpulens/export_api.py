"""HTTP API of the Parquet export, registered by the service (issue 18).

    POST /api/export  {"since": "2026-11-18", "until": "2026-11-20", "out": "/srv/lake",
                       "tables": ["gpu_samples_1h"]}
                      -> start, end, cluster, out, rows, days, errors
    POST /api/export  {}  -> the same for the scheduled lake run, done now

While ``gpulens serve`` owns the database no other process can open it, so
``gpulens export parquet`` asks the service (gpulens/cli_export.py). The service reads
through a reader cursor and writes with warehouse/export.py, which swaps each day's
folder in whole, through the lake job (gpulens/lake_job.py): a body without ``since``
runs its scheduled run (recent days, catch-up, retention) now; with ``since`` it exports
that range. ``errors`` names each (table, day) that failed; the others are written.
``skipped`` names, per table, the first day written where the warehouse's retention
left the days before it partial (those stay as the lake has them).
``until`` (default: now) and ``tables`` (default: all) may be left out;
``out`` (default: ``lake.dir``) must be the ``lake.dir`` folder or inside it, so the
API writes nowhere else, but not in a table's folder of the lake (``gpu_samples/...``
would nest partitions in another cluster's) nor a folder starting with ``.`` (staging,
trash). A bad field answers 400 naming it. As every state-changing
API request it needs the operator role, a same-origin ``Origin`` and the CSRF token
(dashboard/auth.py, dashboard/web_security.py). One export runs at a time. A body
without ``since`` while the history backfill of a fresh start runs answers 409
"history backfill running" (the lake run would store half-written days as done).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Blueprint, jsonify, request

from gpulens.lake_job import BackfillRunning, LakeJob
from warehouse.export import PARTITIONED, WHOLE

log = logging.getLogger(__name__)
MAX_TEXT = 4096  # characters of a path or time field


@dataclass(frozen=True)
class ExportRequest:
    since: datetime | None  # naive UTC; None: the lake job's scheduled run
    until: datetime  # naive UTC, after since
    out: Path  # resolved, inside the lake folder
    tables: list[str] | None


def _time(field: str, value: Any) -> datetime:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ValueError(f"{field}: expected an ISO date or time like 2026-11-18")
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field}: {value!r} is not an ISO date or time") from None
    t = t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t
    if not 1970 <= t.year <= 9998:
        raise ValueError(f"{field}: {value!r} is not between 1970 and 9998")
    return t


def parse_request(body: Any, now: datetime, lake: Path) -> ExportRequest:
    """The export ``body`` asks for; ValueError naming the first bad field. ``lake`` is
    the resolved ``lake.dir``; ``now`` (naive UTC) the default of ``until``."""
    if not isinstance(body, dict):
        raise ValueError("body: expected a JSON object")
    unknown = sorted(set(body) - {"since", "until", "out", "tables"}, key=str)
    if unknown:  # a name that is not a plain word in JSON's quotes: "" or ":" stays legible
        name = unknown[0] if str(unknown[0]).isidentifier() else json.dumps(unknown[0])
        raise ValueError(f"{name}: unknown field; expected since, until, out, tables")
    if body.get("since") is None:
        given = sorted(k for k in ("until", "out", "tables") if body.get(k) is not None)
        if given:
            raise ValueError(f"since: needed with {given[0]} (without since the request "
                             "runs the scheduled lake export: all tables into lake.dir)")
        return ExportRequest(None, now, lake, None)
    since = _time("since", body.get("since"))
    until = now if body.get("until") is None else _time("until", body["until"])
    if until <= since:
        raise ValueError(f"until: {until} is not after since {since}")
    out = body.get("out")
    if out is None:
        path = lake
    elif not isinstance(out, str) or not out or len(out) > MAX_TEXT or "\x00" in out:
        raise ValueError("out: expected a folder path")
    else:
        path = (lake / out).resolve()  # relative paths are inside the lake
        if path != lake and lake not in path.parents:
            raise ValueError(f"out: {out!r} is outside the lake folder {lake} (lake.dir)")
        top = path.relative_to(lake).parts[:1]
        if top and (top[0] in PARTITIONED or top[0] in WHOLE or top[0].startswith(".")):
            raise ValueError(f"out: {out!r} is inside the lake's own {top[0]!r} folder "
                             "(a table's or the export's staging and trash): pick a "
                             "folder of lake.dir not named after a table nor starting "
                             "with '.'")
    tables = body.get("tables")
    if tables is not None:
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            raise ValueError("tables: expected a list of table names")
        bad = [t for t in tables if t not in PARTITIONED and t not in WHOLE]
        if bad:
            raise ValueError(f"tables: cannot export {bad[0][:64]!r}; expected some of "
                             f"{', '.join([*PARTITIONED, *WHOLE])}")
    return ExportRequest(since, until, path, tables or None)


def create_blueprint(lake: LakeJob, *, now: Callable[[], datetime]) -> Blueprint:
    """``lake``: the service's lake job (its folder, cluster, lock); ``now`` naive UTC."""
    bp = Blueprint("export_api", __name__, url_prefix="/api/export")

    @bp.post("")
    def run():
        folder = lake.dir.resolve()
        try:
            req = parse_request(request.get_json(silent=True), now(), folder)
        except ValueError as exc:
            return jsonify({"error": str(exc)}), 400
        try:
            if req.since is None:
                result = lake.run()
            else:
                result = lake.export(req.out, req.since, req.until, req.tables)
        except BackfillRunning as exc:  # the scheduled run follows the backfill
            return jsonify({"error": str(exc)}), 409
        except Exception as exc:  # the CLI shows it; the service log has the traceback
            log.exception("export on request failed")
            return jsonify({"error": f"{type(exc).__name__}: {exc}"}), 500
        return jsonify({
            "start": result.start.isoformat(), "end": result.end.isoformat(),
            "cluster": result.cluster, "out": str(req.out), "rows": result.rows,
            "days": {t: [d.isoformat() for d in ds] for t, ds in result.days.items()},
            "errors": result.errors,
            "skipped": {t: d.isoformat() for t, d in result.skipped.items()},
        })

    return bp

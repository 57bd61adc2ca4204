"""The lake job of the running service (issue 18): hive-partitioned Parquet in
``lake.dir``, written on a schedule and on request.

Every ``lake.interval_min`` minutes (and once right after the history backfill) one
run, :meth:`LakeJob.run`:

1. exports, per table and UTC day, today, the ``lake.reexport_days`` days before it,
   and every day since the last complete run (a service that was down catches up; a
   first run exports everything the warehouse holds); days of jobs, runs and
   allocations still open or ended within those days go again too, whatever their age
   (a row lives in its submit or start day's partition and changes until it ends);
   a table with warehouse retention (``retention.*``) starts at the first midnight after
   its cutoff: the day the warehouse's retention cut mid-day is never written over the
   lake's complete copy;
2. drops this cluster's day partitions older than ``lake.retention_days`` (0: none),
   never today nor a day the run still exports.

Each (table, day) is swapped in whole (warehouse/export.py). One that fails costs itself:
the others are written, the failure is logged and shown in ``/healthz`` (``lake``), and
the next run tries that day again (the run's ``done_until``, kept in the warehouse's
``meta``, stops at the first failed day). ``POST /api/export`` (gpulens/export_api.py)
goes through the same object: without ``since`` it runs :meth:`run` now; with it an
export of that range (:meth:`export`). One export runs at a time.

While the history backfill of a fresh start writes older days (``busy()``), :meth:`run`
refuses with :class:`BackfillRunning` (the API answers 409, the CLI says so): it would
export half-written days and mark them done. The scheduled run waits instead (it runs
once right after the backfill).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path

from warehouse import meta
from warehouse.export import (
    OPEN_UNTIL_END,
    WHOLE,  # exported whole on every run: no day to hold back
    ExportResult,
    drop_days_before,
    export_parquet,
    open_days,
)
from warehouse.rollups import RAW_CUTOFF_KEY, Retention, retention_cutoffs

log = logging.getLogger(__name__)

DAY = timedelta(days=1)
MAX_LISTED_ERRORS = 20  # failed (table, day)s named in /healthz; the rest are counted
#: The longest the warehouse keeps raw samples for days the lake has not exported yet
#: (:meth:`LakeJob.raw_hold`): a lake that keeps failing must not grow the raw tier
#: without bound. 14 days: ``retention.raw_days``'s former default.
RAW_HOLD_MAX = timedelta(days=14)


class BackfillRunning(RuntimeError):
    """The history backfill is writing older days: a lake run now would export them
    half-written and store them as done."""


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time())


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat(timespec="seconds") + "Z"


def first_failed_day(errors: dict[str, str], fallback: date) -> date:
    """The earliest day among the export's ``errors`` (keys ``table/YYYY-MM-DD``; a key
    naming a whole table counts as ``date.min``: nothing is known done), else
    ``fallback``."""
    days = [fallback]
    for key in errors:
        _, _, day = key.partition("/")
        days.append(date.fromisoformat(day) if day else date.min)
    return min(days)


class LakeJob:
    """The service's lake writer: scheduled runs, API-triggered exports, their status.

    ``warehouse``: the service's ``Warehouse`` (reads through ``reader()``, the run's
    ``meta`` through ``write``); ``now()`` naive UTC; ``busy()`` True while the history
    backfill writes older days (a run then waits: it would mark them done half-written);
    ``stopping`` set: a run ends after the day it is writing (InterruptedError), its
    progress not stored, so the next run starts where this one did.
    """

    def __init__(self, warehouse, config, *, now: Callable[[], datetime],
                 busy: Callable[[], bool] = lambda: False,
                 stopping: threading.Event | None = None):
        self.warehouse = warehouse
        self.dir = Path(config["lake.dir"])
        self.cluster = config["cluster.name"]
        self.interval_min = config["lake.interval_min"]
        self.reexport_days = config["lake.reexport_days"]
        self.retention_days = config["lake.retention_days"]
        #: the warehouse's retention: a table's oldest day there is partial, never exported
        self.warehouse_keep = Retention(**config.section("retention"))
        self.tables = [t.strip() for t in config["lake.tables"].split(",") if t.strip()] or None
        self._last_start: float | None = None  # time.monotonic() of the last run's start
        self.now = now
        self.busy = busy
        self.stopping = stopping  # set: a run stops after the day it is writing
        self._lock = threading.Lock()
        self._status_lock = threading.Lock()
        self._state = "idle"
        self._progress: dict = {}
        self._last: dict | None = None

    # -- schedule ---------------------------------------------------------------------
    def install(self, scheduler, first: datetime) -> None:
        """Add the scheduled run to ``scheduler`` (none when ``lake.interval_min`` is 0);
        ``first``: an aware time of the first run."""
        if self.interval_min > 0:
            scheduler.add_job(self.run_scheduled, "interval", minutes=self.interval_min,
                              id="lake", next_run_time=first)

    def run_scheduled(self) -> None:
        """One scheduled run, unless the backfill is writing or a run started less than
        half an interval ago (the run right after the history); never raises."""
        if self.interval_min <= 0:
            return
        if (self._last_start is not None
                and time.monotonic() - self._last_start < self.interval_min * 30.0):
            log.debug("lake export skipped: the last one started less than half an "
                      "interval ago")
            return
        if self.busy():
            with self._status_lock:
                self._state = "waiting for the history backfill"
            log.info("lake export waits for the history backfill")
            return
        try:
            self.run()
        except InterruptedError:
            log.info("lake export interrupted: the service stops; the next run writes the rest")
        except Exception:
            log.exception("lake export failed")

    @property
    def _done_key(self) -> str:
        return f"lake.done_until.{self.cluster}@{self.dir.resolve()}"

    def raw_hold(self, now: datetime) -> datetime | None:
        """From when (naive UTC) the warehouse's retention must keep raw samples for
        this lake: midnight of the first day not yet exported whole (the run's
        ``done_until``; before the first run, :data:`RAW_HOLD_MAX` back), never more than
        :data:`RAW_HOLD_MAX` before ``now``. None when the lake does not export
        ``gpu_samples`` (``lake.tables``). A lake down or failing longer than
        ``retention.raw_days`` would otherwise find its missing days' raw samples gone."""
        if self.tables is not None and "gpu_samples" not in self.tables:
            return None
        stored = meta.get(self.warehouse.reader(), self._done_key)
        try:
            hold = _midnight(date.fromisoformat(stored)) if stored else None
        except ValueError:
            hold = None
        floor = now - RAW_HOLD_MAX
        return floor if hold is None else max(hold, floor)

    def _kept_from(self, now: datetime) -> dict[str, datetime]:
        """Per table, from when the warehouse holds its rows whole: the retention's
        cutoffs, and for raw samples the cutoff retention last applied (recorded in
        ``meta``; :meth:`raw_hold` may have held them longer than ``raw_days``)."""
        kept = retention_cutoffs(now, self.warehouse_keep)
        applied = meta.get(self.warehouse.reader(), RAW_CUTOFF_KEY)
        if applied:
            kept["gpu_samples"] = datetime.fromisoformat(applied)
        return kept

    # -- runs -------------------------------------------------------------------------
    def plan(self, today: date, done_until: date | None) -> tuple[date | None, date | None]:
        """``(first, keep_from)``: the first day this run exports (None: from each
        table's first row), and the first day retention keeps (None: all)."""
        keep_from = today - timedelta(days=self.retention_days) if self.retention_days else None
        recent = today - timedelta(days=self.reexport_days)
        first = None if done_until is None else min(done_until, recent)
        if keep_from is not None:
            first = keep_from if first is None else max(first, keep_from)
        return first, keep_from

    def run(self) -> ExportResult:
        """The scheduled run now (see the module docstring); returns what was written.
        BackfillRunning while the history backfill writes (``busy()``), nothing written."""
        with self._lock:
            if self.busy():
                with self._status_lock:
                    self._state = "waiting for the history backfill"
                raise BackfillRunning("history backfill running: the lake export runs "
                                      "once it is done")
            self._last_start = time.monotonic()
            now = self.now()
            today = now.date()
            stored = meta.get(self.warehouse.reader(), self._done_key)
            try:
                done_until = date.fromisoformat(stored) if stored else None
            except ValueError:  # not a day: export everything again rather than guess
                log.warning("ignoring %s = %.40r: not a day", self._done_key, stored)
                done_until = None
            first, keep_from = self.plan(today, done_until)
            since = None if first is None else _midnight(first)

            def extra(table: str) -> list[date]:  # open rows' days before the range
                if since is None or table not in OPEN_UNTIL_END:
                    return []
                days = open_days(self.warehouse.reader(), table, since)
                return [d for d in days if keep_from is None or d >= keep_from]

            result = self._export("scheduled", now, self.dir, since, _midnight(today) + DAY,
                                  self.tables, extra)
            done = first_failed_day({k: v for k, v in result.errors.items()
                                     if k.partition("/")[0] not in WHOLE}, today)
            dropped: dict[str, list[date]] = {}
            if keep_from is not None:
                try:
                    dropped = drop_days_before(self.dir, self.cluster, keep_from)
                except OSError as exc:
                    result.errors["retention"] = f"{type(exc).__name__}: {exc}"
                    log.warning("lake retention failed: %s", exc)
            if done > date.min:
                self.warehouse.write(
                    lambda con: meta.put(con, self._done_key, done.isoformat())).result()
            n_dropped = sum(len(d) for d in dropped.values())
            if n_dropped:
                log.info("lake retention: %d day partitions before %s dropped", n_dropped,
                         keep_from)
            with self._status_lock:
                self._last.update(dropped_days=n_dropped, done_until=done.isoformat()
                                  if done > date.min else stored,
                                  keep_from=keep_from and keep_from.isoformat())
                if "retention" in result.errors:
                    self._last["errors"]["retention"] = result.errors["retention"]
                    self._last["errors_total"] += 1
            return result

    def export(self, out: Path, since: datetime, until: datetime,
               tables: list[str] | None) -> ExportResult:
        """Export ``[since, until)`` of ``tables`` (None: all) into ``out`` now (the
        API's explicit range); waits for a run under way."""
        with self._lock:
            return self._export("requested", self.now(), out, since, until, tables, None)

    def _export(self, kind, now, out, since, until, tables, extra) -> ExportResult:
        started = time.monotonic()
        with self._status_lock:
            self._state = "running"
            self._progress = {"kind": kind, "started": _iso(now), "days_written": 0,
                              "rows": 0, "table": None}
        log.info("lake export (%s) into %s: from %s to %s", kind, out,
                 since.date() if since else "the first row", (until - DAY).date())

        def on_day(table: str, day: date, rows: int) -> None:
            if self.stopping is not None and self.stopping.is_set():
                raise InterruptedError("the service stops")
            with self._status_lock:
                self._progress["table"] = table
                self._progress["rows"] += rows
                self._progress["days_written"] += bool(rows)
            log.debug("lake: %s %s: %d rows", table, day, rows)

        try:
            result = export_parquet(self.warehouse.reader(), out, since=since, until=until,
                                    tables=tables, cluster=self.cluster, extra_days=extra,
                                    on_day=on_day,
                                    kept_from=self._kept_from(now))
        except Exception as exc:
            with self._status_lock:
                self._state = "idle"
                self._last = {"kind": kind, "started": _iso(now), "finished": _iso(self.now()),
                              "duration_s": round(time.monotonic() - started, 3),
                              "days_written": 0, "rows": 0,
                              "errors": {"export": f"{type(exc).__name__}: {exc}"},
                              "errors_total": 1}
            raise
        days = sum(len(d) for d in result.days.values())
        rows = sum(result.rows.values())
        duration = time.monotonic() - started
        (log.warning if result.errors else log.info)(
            "lake export (%s) done in %.1f s: %d day partitions, %d rows, %d failed%s", kind,
            duration, days, rows, len(result.errors),
            "".join(f"; {k}: {v}" for k, v in list(result.errors.items())[:3]))
        with self._status_lock:
            self._state = "idle"
            self._progress = {}
            self._last = {
                "kind": kind, "started": _iso(now), "finished": _iso(self.now()),
                "duration_s": round(duration, 3), "out": str(out),
                "from": result.start.date().isoformat(),
                "to": (result.end - DAY).date().isoformat(),
                "days_written": days, "rows": rows,
                "errors": dict(sorted(result.errors.items())[:MAX_LISTED_ERRORS]),
                "errors_total": len(result.errors),
                "skipped": {t: f"days before {d.isoformat()} (partial in the warehouse)"
                            for t, d in result.skipped.items()},
            }
        return result

    # -- health -----------------------------------------------------------------------
    def status(self) -> dict:
        """The ``lake`` entry of ``/healthz``: schedule, state, the run under way and the
        last one (its days written, rows, failed (table, day)s)."""
        with self._status_lock:
            return {
                "dir": str(self.dir), "cluster": self.cluster,
                "interval_min": self.interval_min, "reexport_days": self.reexport_days,
                "retention_days": self.retention_days, "state": self._state,
                "running": dict(self._progress) or None,
                "last_run": None if self._last is None else dict(self._last),
                "failing": bool(self._last and self._last.get("errors_total")),
            }


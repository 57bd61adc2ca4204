"""The long-running service: wires the warehouse, the sources, the jobs and the web app.

One process owns the DuckDB file. APScheduler runs each source on its own schedule,
rollups and retention (never two runs of one job at once); a thread writes history on
first start; waitress serves the Dash app and ``/healthz``. A failing source backs off
alone. SIGINT/SIGTERM stop the jobs, flush the writer, checkpoint and close.
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import waitress
from apscheduler.schedulers.background import BackgroundScheduler
from flask import jsonify
from waitress import wasyncore

from alerts.api import create_blueprint
from alerts.ha import Pair
from alerts.runtime import AlertRuntime
from dashboard.report import api as reports_api
from dashboard.report.schedule import ReportScheduler
from gpulens import __version__, exporter
from gpulens.config import BY_NAME, Config
from gpulens.health import STALE_TICKS, Health
from gpulens.history_progress import HistoryProgress
from gpulens.lake_job import LakeJob
from gpulens.memory import release_free_memory
from gpulens.sources import build_sources
from warehouse import Retention, Warehouse, analytics, meta
from warehouse.clock import utcnow

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0  # a failing source is retried at least this often
HISTORY_BATCH_ROWS = 250_000  # rows per history write: live batches wait one such write
WEB_STOP_TIMEOUT_S = 5.0  # seconds a shutdown waits for requests in flight, then for the loop


class StartupError(RuntimeError):
    """The service cannot start; the message says what to do."""


def floor_ts(ts: datetime, step_s: float) -> datetime:
    """``ts`` rounded down to a multiple of ``step_s`` seconds since the Unix epoch."""
    epoch = datetime(1970, 1, 1)
    return ts - (ts - epoch) % timedelta(seconds=step_s)


def next_tick(tick: datetime, now: datetime, interval_s: float) -> tuple[datetime, int]:
    """The tick to collect after ``tick`` when the cycle ended at ``now``, and how many
    ticks are skipped. The next tick is collected even when late, as long as the one
    after it is not due yet; a cycle that ran a whole interval past a tick skips it."""
    step = timedelta(seconds=interval_s)
    nxt = tick + step
    if now < nxt + step:
        return nxt, 0
    skipped = (now - nxt) // step
    return nxt + skipped * step, skipped


class Service:
    """gpulens serve: collection, rollups, retention, history and the web app."""

    def __init__(self, config: Config, *, now: Callable[[], datetime] = utcnow):
        self.config = config
        self.now = now
        self.health = Health()
        self.stopping = threading.Event()
        self.warehouse: Warehouse | None = None
        self.sources: list = []
        self.alerts = None  # alerts.runtime.AlertRuntime
        self.pair = None  # alerts.ha.Pair: this instance's twin in an HA pair (issue 20)
        self.reports = None  # dashboard.report.schedule.ReportScheduler
        self.lake: LakeJob | None = None  # the Parquet lake's job (issue 18)
        self.scheduler: BackgroundScheduler | None = None
        self.server = None
        self._web_thread: threading.Thread | None = None  # runs the server's loop
        self._threads: list[threading.Thread] = []
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, datetime] = {}
        self._missing: dict[str, list[tuple[datetime, datetime]]] = {}  # history to write

    # -- start ------------------------------------------------------------------------
    def start(self) -> str:
        """Open the warehouse, bind the port, start the jobs. Returns the dashboard URL."""
        self.warehouse = Warehouse(self.config["service.db"],
                                   memory_limit_mb=self.config["warehouse.memory_limit_mb"])
        try:
            self.sources = build_sources(self.config, self.warehouse, now=self.now())
            self.pair = Pair(self.config, name=socket.gethostname(), now=self.now,
                             reader=self.warehouse.reader)
            gate = self.pair.gate if self.pair.enabled else None
            self.alerts = AlertRuntime(self.warehouse, self.config, now=self.now,
                                       pair=self.pair if self.pair.enabled else None)
            self.reports = ReportScheduler(self.warehouse, self.config, now=self.now,
                                           gate=gate)
            self.lake = LakeJob(self.warehouse, self.config, now=self.now,
                                busy=lambda: self.health.backfill.get("state") == "running",
                                stopping=self.stopping)
            for source in self.sources:
                if hasattr(source, "topology"):
                    self.warehouse.ingest_all(source.topology())
            self._start_server()
        except BaseException:
            self.warehouse.close()
            raise
        history = [self._start_history(source) for source in self.sources]
        if not any(history):  # with history, the catch-up runs once it is written
            self._background(self.reports.catch_up, "report catch-up")
        for source in self.sources:
            self._start_collection(source)
        self._start_jobs()
        host, port = self.server.effective_host, self.server.effective_port
        url = f"http://{host}:{port}/"
        if not self.config["ha.name"]:
            self.pair.name = f"{socket.gethostname()}:{port}"
        if self.config["alerts.dashboard_url"] == BY_NAME["alerts.dashboard_url"].default:
            self.alerts.dashboard_url = url  # links in notifications point at this server
        return url

    def _rules_saved(self, values: dict) -> None:
        """The Thermal page's tuner saved rule settings to the configuration file: apply
        them to the running configuration (the backtest API reads it too) and the rules
        (issue 22)."""
        self.config.update(values)
        if self.alerts is not None:
            self.alerts.reload_rules(self.config)
        log.info("alert rules reloaded: %s", ", ".join(f"{k}={v}" for k, v in values.items()))

    def _incidents(self) -> list:
        """The simulated sources' ground-truth incidents (for a backtest's time to page)."""
        return [i for s in self.sources if hasattr(s, "cluster") for i in s.cluster.incidents()]

    def _start_server(self) -> None:
        from dashboard.app import create_app, freeze_startup_objects
        from dashboard.auth import AuthConfig

        app = create_app(
            self.warehouse, refresh_s=self.config["dashboard.refresh_s"], now=self.now,
            auth_config=AuthConfig.from_settings(self.config),
            reports_dir=self.config["reports.dir"],
            options=analytics.Options.from_settings(self.config),
            cluster=self.config["cluster.name"],
            config=self.config, rules_saved=self._rules_saved,
        )
        app.server.add_url_rule("/healthz", "healthz", self._healthz)
        exporter.install(app.server, self.warehouse.reader, now=self.now,
                         options=analytics.Options.from_settings(self.config),
                         public=self.config["service.metrics_public"])
        app.server.register_blueprint(create_blueprint(
            self.warehouse, now=self.now, config=self.config, incidents=self._incidents))
        app.server.register_blueprint(reports_api.create_blueprint(
            lambda week, send: self.reports.run(week, send=send), self.config["reports.dir"],
            now=self.now))
        from gpulens import export_api  # `gpulens export parquet` while serving (issue 18)

        app.server.register_blueprint(export_api.create_blueprint(self.lake, now=self.now))
        frozen = freeze_startup_objects()  # no full collection walks them again
        log.info("%s objects of the started app frozen out of the garbage collector's walks",
                 f"{frozen:,}")
        host, port = self.config["service.host"], self.config["service.port"]
        try:
            self.server = waitress.create_server(
                app.server, host=host, port=port, threads=self.config["service.threads"]
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"port {port} on {host} is already in use. Choose another with "
                    "--port (or service.port in the configuration)."
                ) from None
            raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        self._web_thread = threading.Thread(target=self.server.run, name="gpulens-web",
                                            daemon=True)
        self._web_thread.start()

    def _start_jobs(self) -> None:
        cfg = self.config
        self.scheduler = BackgroundScheduler(
            timezone="UTC", job_defaults={"max_instances": 1, "coalesce": True}
        )
        first = datetime.now(UTC)  # aware: the scheduler runs in UTC whatever the host zone
        self.scheduler.add_job(
            self.rollup_once, "interval", seconds=cfg["rollup.interval_s"], id="rollup",
            next_run_time=first + timedelta(seconds=5),
        )
        self.scheduler.add_job(self.retention_once, "interval", hours=1, id="retention")
        self.scheduler.add_job(
            self._guarded, "interval", args=(self.analytics_once, "analytics refresh"),
            seconds=cfg["analytics.interval_s"], id="analytics",
            next_run_time=first + timedelta(seconds=20),
        )
        if self.alerts.enabled:
            self.scheduler.add_job(
                self._guarded, "interval", args=(self.alerts.evaluate_once, "alert evaluation"),
                seconds=self.alerts.evaluate_interval_s, id="alerts:evaluate",
                next_run_time=first + timedelta(seconds=10),
            )
            self.scheduler.add_job(
                self._guarded, "interval", args=(self.alerts.deliver_once, "alert delivery"),
                seconds=self.alerts.deliver_interval_s, id="alerts:deliver",
            )
        if self.pair.enabled:  # the twin's liveness: twin_gone and who pages (issue 20)
            self.scheduler.add_job(
                self._guarded, "interval", args=(self.pair.poll_once, "twin poll"),
                seconds=self.pair.poll_interval_s, id="ha:poll", next_run_time=first)
        self.reports.install(self.scheduler)
        self.reports.install_delivery(self.scheduler, self._guarded)
        self.lake.install(self.scheduler, first + timedelta(seconds=30))
        self.scheduler.start()

    def _start_collection(self, source) -> None:
        thread = threading.Thread(target=self._collect_loop, args=(source,), daemon=True,
                                  name=f"gpulens-collect-{source.name}")
        thread.start()
        self._threads.append(thread)

    def _start_history(self, source) -> bool:
        """Start writing the history the warehouse lacks; True if there is some.

        What is missing is kept in the warehouse (meta ``history.missing.<source>``)
        and shrinks as history is written, so a restart after a kill resumes the
        interrupted backfill besides filling the gap since the last sample.
        """
        days = self.config["simulator.history_days"]
        if days <= 0 or not hasattr(source, "history"):
            return False
        end = source.live_start
        window = end - timedelta(days=days)
        cur = self.warehouse.reader()
        stored = meta.get(cur, _missing_key(source))
        missing = [] if stored is None else _load_ranges(stored)
        latest = meta.latest_sample_ts(cur)
        start = window
        if latest is not None and latest >= window:  # a restart: fill the gap since
            start = latest + timedelta(seconds=source.interval_s)
        missing = _merge_ranges([(max(a, window), min(b, end)) for a, b in missing]
                                + [(start, end)])
        self._missing[source.name] = missing
        self._save_missing(source)
        if not missing:
            return False
        thread = threading.Thread(target=self._history, args=(source,),
                                  name="gpulens-history", daemon=True)
        thread.start()
        self._threads.append(thread)
        return True

    def _save_missing(self, source) -> None:
        """Persist the history still missing (and show it in /healthz)."""
        missing = list(self._missing[source.name])
        value = _dump_ranges(missing)
        self.warehouse.write(lambda con: meta.put(con, _missing_key(source), value)).result()
        self.health.set_backfill(
            complete=not missing, missing=[[_iso(a), _iso(b)] for a, b in missing],
            missing_s=sum((b - a).total_seconds() for a, b in missing),
        )

    def _background(self, job: Callable[[], object], what: str) -> None:
        thread = threading.Thread(target=self._guarded, args=(job, what), daemon=True,
                                  name=f"gpulens-{what.replace(' ', '-')}")
        thread.start()
        self._threads.append(thread)

    # -- jobs -------------------------------------------------------------------------
    def _collect_loop(self, source) -> None:
        """Collect ``source`` at every tick (multiples of its interval) until stopping.

        A drift-free loop of its own per source: a slow cycle delays the next tick
        instead of dropping it; a tick is skipped only when a cycle ran a whole interval
        past it, and counted in /healthz (``skipped_ticks``).
        """
        interval = source.interval_s
        tick = floor_ts(self.now(), interval)
        while not self.stopping.is_set():
            try:
                self.collect_once(source, tick)
            except Exception:  # never lose the loop
                log.exception("collecting %s failed", source.name)
            now = self.now()
            tick, skipped = next_tick(tick, now, interval)
            if skipped:
                self.health.skipped(source.name, now, skipped)
                log.warning("source %s: %d tick(s) of %.0f s skipped (the cycle took too "
                            "long)", source.name, skipped, interval)
            wait = (tick - self.now()).total_seconds()
            if wait > interval:  # the wall clock went back: go on from its current tick
                tick, wait = floor_ts(self.now(), interval), 0.0
            if wait > 0 and self.stopping.wait(wait):
                return

    def collect_once(self, source, ts: datetime | None = None) -> None:
        """One cycle of one source at tick ``ts`` (default: the current tick): read it,
        hand every batch to the writer as urgent work (ahead of maintenance).

        A failure is recorded in /healthz and backs this source off (doubling up to
        MAX_BACKOFF_S); other sources go on.
        """
        now = self.now()
        retry_at = self._retry_at.get(source.name)
        if retry_at is not None and now < retry_at:
            return
        ts = floor_ts(now, source.interval_s) if ts is None else ts
        started = time.perf_counter()
        try:
            batches = source.collect(ts)
            futures = [self.warehouse.ingest(kind, table, urgent=True)
                       for kind, table in batches]
            rows = sum(f.result() for f in futures)
        except Exception as exc:
            failures = self._failures.get(source.name, 0) + 1
            self._failures[source.name] = failures
            wait = min(MAX_BACKOFF_S, source.interval_s * 2 ** (failures - 1))
            self._retry_at[source.name] = now + timedelta(seconds=wait)
            log.warning("source %s failed (%s); next try in %.0f s", source.name, exc, wait)
            self.health.error(source.name, now, f"{type(exc).__name__}: {exc}")
            return
        self._failures.pop(source.name, None)
        self._retry_at.pop(source.name, None)
        self.health.success(source.name, ts, time.perf_counter() - started, rows)
        batches = futures = None  # written: the cycle's tables are freed before the next
        release_free_memory()  # parse, so a refresh does not start on what it freed

    @staticmethod
    def _guarded(job: Callable[[], object], what: str) -> None:
        """Run a background job; log its failure instead of losing the scheduler thread."""
        try:
            job()
        except Exception:
            log.exception("%s failed", what)

    def rollup_once(self) -> None:
        self._guarded(lambda: self.warehouse.rollup().result(), "rollup")

    def analytics_once(self) -> dict:
        """Refresh the derived tables (failures, hourly energy) on the writer thread."""
        now = self.now()
        result = self.warehouse.write(lambda con: analytics.refresh(con, now, self.config)).result()
        log.info("analytics refreshed in %.1f s: %d failed runs classified, %d hours of "
                 "energy, %d of usage and %d of fleet hours recomputed%s", result["failures_s"]
                 + result["energy_s"] + result["usage_s"] + result["fleet_s"],
                 result["failures_classified"], result["energy_hours"], result["usage_hours"],
                 result["fleet_hours"],
                 f" ({result['usage_pending']} hours of usage, {result['fleet_pending']} of "
                 "fleet hours left for the next refresh)"
                 if result["usage_pending"] or result["fleet_pending"] else "")
        return result

    def retention_once(self) -> None:
        keep = Retention(**self.config.section("retention"))
        now = self.now()
        try:
            hold = self.lake.raw_hold(now) if self.lake is not None else None
            self.warehouse.apply_retention(now, keep, hold).result()
        except Exception:
            log.exception("retention failed")

    def _history(self, source) -> None:
        """Write the missing history, range by range, oldest first; after each chunk
        the range left is persisted (``_save_missing``), so a kill loses no progress."""
        missing = self._missing[source.name]
        self.health.set_backfill(state="running", start=_iso(missing[0][0]),
                                 end=_iso(missing[-1][1]), done_until=None)
        progress = HistoryProgress(missing)  # the console's lines: start, each day, done
        ranges = len(missing)

        def ingest(kind, table):
            for offset in range(0, max(table.num_rows, 1), HISTORY_BATCH_ROWS):
                if self.stopping.is_set():
                    raise InterruptedError("service stopping")
                self.warehouse.ingest(kind, table.slice(offset, HISTORY_BATCH_ROWS)).result()

        def written_until(ts: datetime) -> None:  # every row before ts is acknowledged
            self.health.set_backfill(done_until=_iso(ts))
            progress.written_until(ranges - len(missing), ts)
            if ts < missing[0][1]:  # the range's end: once history() returned
                missing[0] = (max(missing[0][0], ts), missing[0][1])
                self._save_missing(source)

        try:
            while missing:
                start, end = missing[0]
                source.history(ingest, start, end, progress=False, on_chunk=written_until)
                missing.pop(0)
                self._save_missing(source)
            self.warehouse.rollup().result()
            self.analytics_once()  # classify the history's failures now, not in 5 minutes
            self.reports.catch_up()  # a weekly report missed while the service was down
            self.health.set_backfill(state="done")
            progress.done()
            if self.lake is not None:  # the history's days into the lake now, not later
                self.lake.run_scheduled()
        except InterruptedError:
            self.health.set_backfill(state="interrupted")
        except Exception as exc:
            log.exception("writing history failed")
            self.health.set_backfill(state="failed", error=f"{type(exc).__name__}: {exc}")

    # -- web --------------------------------------------------------------------------
    def _healthz(self):
        # each source is stale after three of its own intervals (a 15-min grid fetch must
        # not make a 15-s scrape look fresh for 45 min)
        stale = {s.name: STALE_TICKS * s.interval_s for s in self.sources}
        report = self.health.report(self.now(), stale_after_s=stale)
        for source in self.sources:
            entry = report["sources"].setdefault(source.name, {})
            try:
                entry.update(_source_details(source))
            except Exception as exc:  # one source's broken details never hide the others
                entry["details_error"] = f"{type(exc).__name__}: {exc}"
        report["version"] = __version__
        if self.pair is not None and self.pair.enabled:  # the twin reads this (alerts/ha.py)
            report["ha"] = self.pair.report(self.warehouse.reader(), self.now())
        report["database"] = {
            "path": self.warehouse.path,
            "size_bytes": self.warehouse.size_bytes(),
            "pending_writes": self.warehouse.pending_writes(),
            "live_batch_wait": self.warehouse.urgent_waits(),
        }
        if self.lake is not None:
            report["lake"] = self.lake.status()
        status = 503 if report["status"] == "degraded" else 200
        return jsonify(report), status

    # -- stop -------------------------------------------------------------------------
    def run_until_signalled(self) -> None:
        """Block until SIGINT or SIGTERM, then shut down cleanly."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        while not self.stopping.wait(0.5):
            pass
        self.shutdown()

    def shutdown(self) -> None:
        """Stop jobs and web server, finish queued writes, checkpoint, close."""
        self.stopping.set()
        log.info("shutting down: finishing queued writes and checkpointing")
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
        for thread in self._threads:
            thread.join(timeout=30)
        if self.server is not None:
            stop_web_server(self.server, self._web_thread)
        for source in self.sources:
            if hasattr(source, "close"):
                try:
                    source.close()
                except Exception:
                    log.exception("closing source %s failed", source.name)
        if self.warehouse is not None:
            self.warehouse.close()


def stop_web_server(server, thread: threading.Thread | None,
                    timeout_s: float = WEB_STOP_TIMEOUT_S) -> None:
    """Stop the waitress ``server`` whose loop runs in ``thread``: its handler threads
    finish the requests in flight, its loop returns, then its sockets (the listener, the
    trigger, the open connections) are closed. Waits up to ``timeout_s`` seconds for
    the handlers, then as long for the loop.

    A socket closed while the loop runs can be in the list the loop is about to hand to
    ``select()``, which then fails with EBADF and ends the loop with a traceback; and
    closing the listener alone left the loop serving the connections still open."""
    # The handlers first: a trigger closed under one fails its pull (EBADF, a traceback).
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout_s)
    sockets = server._map  # the loop runs while this map holds a socket
    if thread is not None and thread.is_alive():
        taken = {}

        def empty_the_map():  # runs in the loop's thread, between two of its passes
            taken.update(sockets)
            sockets.clear()

        # Not closed in the thunk: it can run before pull_trigger has written to the
        # trigger's pipe, which must then still be open.
        server.trigger.pull_trigger(empty_the_map)
        thread.join(timeout=timeout_s)
        if thread.is_alive():
            log.warning("the web server's loop did not stop in %s s; it ends with the "
                        "process", timeout_s)
            return
        sockets.update(taken)
    wasyncore.close_all(sockets)


def _source_details(source, max_listed: int = 20) -> dict:
    """What a source tells beyond success and error, the same keys for every source:
    ``dropped``, what it refused per reason (values, records, targets; empty when it
    counts none) and their total; for sources with targets, ``targets`` (total, up,
    down: the first ``max_listed`` with their reason, down_total).

    A source exposes, optionally: ``dropped`` (collector.sanitize.DropCounter),
    ``status`` (target -> collector.scrape.TargetStatus), or ``targets_down`` (target ->
    reason) with ``targets_total`` (how many targets; without it total and up are None)
    for sources that know their down targets only; ``providers()`` (name -> its state)
    for the grid source; ``answered_by`` (target -> how it answered, e.g. dcmi or sdr),
    shown as counts per method and the first ``max_listed`` targets."""
    counter = getattr(source, "dropped", None)
    dropped = counter.as_dict() if counter is not None else {}
    details: dict = {"dropped": dropped, "dropped_total": sum(dropped.values())}
    providers = getattr(source, "providers", None)  # the grid source's (issue 21)
    if callable(providers):
        details["providers"] = providers()
    answered = getattr(source, "answered_by", None)  # the BMC source's: dcmi, sdr, redfish
    if isinstance(answered, dict) and answered:
        details["answered_by"] = dict(sorted(Counter(answered.values()).items()))
        details["answered_by_target"] = dict(sorted(answered.items())[:max_listed])
    status = getattr(source, "status", None)
    status = status if isinstance(status, dict) else {}
    down = {str(key): st.last_error for key, st in status.items() if not st.up}
    extra = getattr(source, "targets_down", None)
    if isinstance(extra, dict):
        down.update({str(key): reason for key, reason in extra.items()})
    total = len(status) if status else getattr(source, "targets_total", None)
    if status or down or total:
        total = max(total, len(down)) if isinstance(total, int) else None
        details["targets"] = {
            "total": total, "up": None if total is None else total - len(down),
            "down": dict(sorted(down.items())[:max_listed]), "down_total": len(down),
        }
    return details


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat() + "Z"


def _missing_key(source) -> str:
    return f"history.missing.{source.name}"


def _dump_ranges(ranges: list[tuple[datetime, datetime]]) -> str:
    return json.dumps([[a.isoformat(), b.isoformat()] for a, b in ranges])


def _load_ranges(text: str) -> list[tuple[datetime, datetime]]:
    """Ranges stored by ``_dump_ranges``; a value that is not such a list counts as none
    (the gap since the last sample is then still filled)."""
    try:
        return [(datetime.fromisoformat(a), datetime.fromisoformat(b))
                for a, b in json.loads(text)]
    except (ValueError, TypeError):
        log.warning("ignoring a stored history range list that is not one: %.80r", text)
        return []


def _merge_ranges(ranges: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Non-empty ranges ``[a, b)`` sorted, overlapping or touching ones merged."""
    merged: list[tuple[datetime, datetime]] = []
    for a, b in sorted(r for r in ranges if r[0] < r[1]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged

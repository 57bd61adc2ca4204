"""The long-running service: wires the warehouse, the sources, the jobs and the web app.

One process owns the DuckDB file. APScheduler runs each source on its own schedule,
rollups and retention (never two runs of one job at once); a thread writes history on
first start; waitress serves the Dash app and ``/healthz``. A failing source backs off
alone. SIGINT/SIGTERM stop the jobs, flush the writer, checkpoint and close.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import waitress
from apscheduler.schedulers.background import BackgroundScheduler
from flask import jsonify

from alerts.api import create_blueprint
from alerts.runtime import AlertRuntime
from dashboard.report import api as reports_api
from dashboard.report.schedule import ReportScheduler
from gpulens import __version__, exporter
from gpulens.config import BY_NAME, Config
from gpulens.health import Health
from gpulens.sources import build_sources
from warehouse import Retention, Warehouse, analytics, meta
from warehouse.clock import utcnow

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0  # a failing source is retried at least this often


class StartupError(RuntimeError):
    """The service cannot start; the message says what to do."""


def floor_ts(ts: datetime, step_s: float) -> datetime:
    """``ts`` rounded down to a multiple of ``step_s`` seconds since the Unix epoch."""
    epoch = datetime(1970, 1, 1)
    return ts - (ts - epoch) % timedelta(seconds=step_s)


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
        self.reports = None  # dashboard.report.schedule.ReportScheduler
        self.scheduler: BackgroundScheduler | None = None
        self.server = None
        self._threads: list[threading.Thread] = []
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, datetime] = {}

    # -- start ------------------------------------------------------------------------
    def start(self) -> str:
        """Open the warehouse, bind the port, start the jobs. Returns the dashboard URL."""
        self.warehouse = Warehouse(self.config["service.db"],
                                   memory_limit_mb=self.config["warehouse.memory_limit_mb"])
        try:
            self.sources = build_sources(self.config, self.warehouse, now=self.now())
            self.alerts = AlertRuntime(self.warehouse, self.config, now=self.now)
            self.reports = ReportScheduler(self.warehouse, self.config, now=self.now)
            for source in self.sources:
                if hasattr(source, "topology"):
                    self.warehouse.ingest_all(source.topology())
            self._start_server()
        except BaseException:
            self.warehouse.close()
            raise
        for source in self.sources:
            self._start_history(source)
        if not self._threads:  # with history, the catch-up runs once it is written
            self._background(self.reports.catch_up, "report catch-up")
        self._start_jobs()
        host, port = self.server.effective_host, self.server.effective_port
        url = f"http://{host}:{port}/"
        if self.config["alerts.dashboard_url"] == BY_NAME["alerts.dashboard_url"].default:
            self.alerts.dashboard_url = url  # links in notifications point at this server
        return url

    def _start_server(self) -> None:
        from dashboard.app import create_app
        from dashboard.auth import AuthConfig

        app = create_app(
            self.warehouse, refresh_s=self.config["dashboard.refresh_s"], now=self.now,
            auth_config=AuthConfig.from_settings(self.config),
            reports_dir=self.config["reports.dir"],
            options=analytics.Options.from_settings(self.config),
        )
        app.server.add_url_rule("/healthz", "healthz", self._healthz)
        exporter.install(app.server, self.warehouse.reader, now=self.now,
                         options=analytics.Options.from_settings(self.config),
                         public=self.config["service.metrics_public"])
        app.server.register_blueprint(create_blueprint(self.warehouse, now=self.now))
        app.server.register_blueprint(reports_api.create_blueprint(
            lambda week, send: self.reports.run(week, send=send), self.config["reports.dir"]))
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
        thread = threading.Thread(target=self.server.run, name="gpulens-web", daemon=True)
        thread.start()

    def _start_jobs(self) -> None:
        cfg = self.config
        self.scheduler = BackgroundScheduler(
            timezone="UTC", job_defaults={"max_instances": 1, "coalesce": True}
        )
        first = datetime.now(UTC)  # aware: the scheduler runs in UTC whatever the host zone
        for source in self.sources:
            self.scheduler.add_job(
                self.collect_once, "interval", args=(source,), seconds=source.interval_s,
                id=f"collect:{source.name}", next_run_time=first,
            )
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
        self.reports.install(self.scheduler)
        self.reports.install_delivery(self.scheduler, self._guarded)
        self.scheduler.start()

    def _start_history(self, source) -> None:
        days = self.config["simulator.history_days"]
        if days <= 0 or not hasattr(source, "history"):
            return
        end = source.live_start
        start = end - timedelta(days=days)
        latest = meta.latest_sample_ts(self.warehouse.reader())
        if latest is not None and latest >= start:  # a restart: fill only the gap
            start = latest + timedelta(seconds=source.interval_s)
        if start >= end:
            return
        thread = threading.Thread(
            target=self._history, args=(source, start, end), name="gpulens-history",
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)

    def _background(self, job: Callable[[], object], what: str) -> None:
        thread = threading.Thread(target=self._guarded, args=(job, what), daemon=True,
                                  name=f"gpulens-{what.replace(' ', '-')}")
        thread.start()
        self._threads.append(thread)

    # -- jobs -------------------------------------------------------------------------
    def collect_once(self, source) -> None:
        """One cycle of one source: read it, hand every batch to the writer.

        A failure is recorded in /healthz and backs this source off (doubling up to
        MAX_BACKOFF_S); other sources go on.
        """
        now = self.now()
        retry_at = self._retry_at.get(source.name)
        if retry_at is not None and now < retry_at:
            return
        ts = floor_ts(now, source.interval_s)
        started = time.perf_counter()
        try:
            batches = source.collect(ts)
            futures = [self.warehouse.ingest(kind, table) for kind, table in batches]
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
        log.info("analytics refreshed: %s", result)
        return result

    def retention_once(self) -> None:
        keep = Retention(**self.config.section("retention"))
        try:
            self.warehouse.apply_retention(self.now(), keep).result()
        except Exception:
            log.exception("retention failed")

    def _history(self, source, start: datetime, end: datetime) -> None:
        """Write the history the warehouse lacks, [start, end), oldest first."""
        self.health.set_backfill(state="running", start=start.isoformat() + "Z",
                                 end=end.isoformat() + "Z", done_until=None)

        def ingest(kind, table):
            if self.stopping.is_set():
                raise InterruptedError("service stopping")
            self.warehouse.ingest(kind, table).result()
            if kind == "samples" and table.num_rows:
                done = table.column("ts")[-1].as_py()
                self.health.set_backfill(done_until=done.isoformat() + "Z")

        try:
            source.history(ingest, start, end, progress=False)
            self.warehouse.rollup().result()
            self.analytics_once()  # classify the history's failures now, not in 5 minutes
            self.reports.catch_up()  # a weekly report missed while the service was down
            self.health.set_backfill(state="done")
        except InterruptedError:
            self.health.set_backfill(state="interrupted")
        except Exception as exc:
            log.exception("writing history failed")
            self.health.set_backfill(state="failed", error=f"{type(exc).__name__}: {exc}")

    # -- web --------------------------------------------------------------------------
    def _healthz(self):
        stale = 3 * max((s.interval_s for s in self.sources), default=15.0)
        report = self.health.report(self.now(), stale_after_s=stale)
        for source in self.sources:
            entry = report["sources"].setdefault(source.name, {})
            entry.update(_source_details(source))
        report["version"] = __version__
        report["database"] = {
            "path": self.warehouse.path,
            "size_bytes": self.warehouse.size_bytes(),
            "pending_writes": self.warehouse.pending_writes(),
        }
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
            self.server.close()
        for source in self.sources:
            if hasattr(source, "close"):
                try:
                    source.close()
                except Exception:
                    log.exception("closing source %s failed", source.name)
        if self.warehouse is not None:
            self.warehouse.close()


def _source_details(source, max_listed: int = 20) -> dict:
    """What a source tells beyond success and error: rows it dropped as implausible (per
    reason) and, for scraping sources, its targets (up count, the first few down)."""
    details: dict = {}
    if hasattr(source, "dropped"):
        details["dropped"] = source.dropped.as_dict()
    status = getattr(source, "status", None)
    if isinstance(status, dict) and status:
        down = {key: st.last_error for key, st in status.items() if not st.up}
        details["targets"] = {
            "total": len(status), "up": len(status) - len(down),
            "down": dict(list(sorted(down.items()))[:max_listed]),
        }
    return details

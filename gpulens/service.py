"""The long-running service: wires the warehouse, a source, the jobs and the web app.

One process owns the DuckDB file. APScheduler runs collection, rollups and retention
(never two runs of one job at once); a thread writes history on first start; waitress
serves the Dash app and ``/healthz``. SIGINT/SIGTERM stop the jobs, flush the writer,
checkpoint and close the database.
"""

from __future__ import annotations

import errno
import logging
import signal
import threading
import time
from datetime import datetime, timedelta

import waitress
from apscheduler.schedulers.background import BackgroundScheduler
from flask import jsonify

from gpulens import __version__
from gpulens.config import Config
from gpulens.health import Health, utcnow
from gpulens.sources import build_source
from warehouse import Retention, Warehouse, meta

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The service cannot start; the message says what to do."""


def floor_ts(ts: datetime, step_s: float) -> datetime:
    """``ts`` rounded down to a multiple of ``step_s`` seconds since the Unix epoch."""
    epoch = datetime(1970, 1, 1)
    return ts - (ts - epoch) % timedelta(seconds=step_s)


class Service:
    """gpulens serve: collection, rollups, retention, history and the web app."""

    def __init__(self, config: Config, *, now=utcnow):
        self.config = config
        self.now = now
        self.health = Health()
        self.stopping = threading.Event()
        self.warehouse: Warehouse | None = None
        self.source = None
        self.scheduler: BackgroundScheduler | None = None
        self.server = None
        self._threads: list[threading.Thread] = []

    # -- start ------------------------------------------------------------------------
    def start(self) -> str:
        """Open the warehouse, bind the port, start the jobs. Returns the dashboard URL."""
        cfg = self.config
        self.warehouse = Warehouse(cfg["service.db"])
        try:
            self.source = build_source(cfg, self.warehouse, now=self.now())
            self.warehouse.ingest_all(self.source.topology())
            self._start_server()
        except Exception:
            self.warehouse.close()
            raise
        self._start_history()
        self._start_jobs()
        host, port = self.server.effective_host, self.server.effective_port
        return f"http://{host}:{port}/"

    def _start_server(self) -> None:
        from dashboard.app import create_app

        app = create_app(
            self.warehouse, refresh_s=self.config["dashboard.refresh_s"], now=self.now
        )
        app.server.add_url_rule("/healthz", "healthz", self._healthz)
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
        first = datetime.now()
        self.scheduler.add_job(
            self.collect_once, "interval", seconds=cfg["collect.interval_s"],
            id="collect", next_run_time=first,
        )
        self.scheduler.add_job(
            self.rollup_once, "interval", seconds=cfg["rollup.interval_s"], id="rollup",
            next_run_time=first + timedelta(seconds=5),
        )
        self.scheduler.add_job(self.retention_once, "interval", hours=1, id="retention")
        self.scheduler.start()

    def _start_history(self) -> None:
        days = self.config["simulator.history_days"]
        if days <= 0 or not hasattr(self.source, "history"):
            return
        end = self.source.live_start
        start = end - timedelta(days=days)
        latest = meta.latest_sample_ts(self.warehouse.reader())
        if latest is not None and latest >= start:  # a restart: fill only the gap
            start = latest + timedelta(seconds=self.config["collect.interval_s"])
        if start >= end:
            return
        thread = threading.Thread(
            target=self._history, args=(start, end), name="gpulens-history", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    # -- jobs -------------------------------------------------------------------------
    def collect_once(self) -> None:
        """One collection cycle: read the source, hand every batch to the writer."""
        ts = floor_ts(self.now(), self.config["collect.interval_s"])
        started = time.perf_counter()
        try:
            batches = self.source.collect(ts)
            futures = [self.warehouse.ingest(kind, table) for kind, table in batches]
            rows = sum(f.result() for f in futures)
        except Exception as exc:
            log.exception("collection from %s failed", self.source.name)
            self.health.error(self.source.name, self.now(), f"{type(exc).__name__}: {exc}")
            return
        self.health.success(self.source.name, ts, time.perf_counter() - started, rows)

    def rollup_once(self) -> None:
        try:
            self.warehouse.rollup().result()
        except Exception:
            log.exception("rollup failed")

    def retention_once(self) -> None:
        keep = Retention(**{k: v for k, v in self.config.section("retention").items()})
        try:
            self.warehouse.apply_retention(self.now(), keep).result()
        except Exception:
            log.exception("retention failed")

    def _history(self, start: datetime, end: datetime) -> None:
        """Write the simulated history the warehouse lacks, [start, end), oldest first."""
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
            self.source.history(ingest, start, end, progress=False)
            self.warehouse.rollup().result()
            self.health.set_backfill(state="done")
        except InterruptedError:
            self.health.set_backfill(state="interrupted")
        except Exception as exc:
            log.exception("writing history failed")
            self.health.set_backfill(state="failed", error=f"{type(exc).__name__}: {exc}")

    # -- web --------------------------------------------------------------------------
    def _healthz(self):
        report = self.health.report(self.now(), stale_after_s=3 * self.config["collect.interval_s"])
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
        if self.warehouse is not None:
            self.warehouse.close()

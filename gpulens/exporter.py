"""``/metrics``: gpulens's derived figures in the Prometheus text format (issue 19).

A prometheus_client custom collector over :func:`warehouse.metrics.figures`, so a
Prometheus scrapes what only gpulens computes and Grafana charts it. The snapshot is
cached until the analytics refresh writes again (:func:`warehouse.metrics.refresh_mark`);
the alerts firing are read on every scrape (one small query). Metric names carry their
units; the windows are in the help text (see docs/analytics.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from warehouse import metrics
from warehouse.analytics import Options


class FiguresCollector:
    """Yields the gauges of the current snapshot; ``reader`` returns a fresh cursor."""

    def __init__(self, reader: Callable, *, now: Callable[[], datetime],
                 options: Options | None = None):
        self.reader, self.now, self.options = reader, now, options or Options()
        self._lock = threading.Lock()
        self._cached: tuple[tuple, metrics.Figures] | None = None

    def snapshot(self) -> metrics.Figures:
        mark = metrics.refresh_mark(self.reader())
        with self._lock:
            if self._cached is None or self._cached[0] != mark:
                self._cached = (mark, metrics.figures(self.reader, now=self.now(),
                                                      opts=self.options))
            snap = self._cached[1]
        snap.alerts_firing = metrics.alerts_firing(self.reader())
        return snap

    def collect(self):
        f = self.snapshot()
        days = f"{f.window_days:g} days"
        lost = GaugeMetricFamily(
            "gpulens_gpu_hours_lost", f"GPU-hours lost to failed runs that ended in the last "
            f"{days}, by failure category (the failures table's cost model)",
            labels=["category"])
        runs = GaugeMetricFamily(
            "gpulens_failed_runs", f"Failed runs that ended in the last {days}, by category",
            labels=["category"])
        for cat, value in sorted(f.lost_gpu_hours.items()):
            lost.add_metric([cat], value)
            runs.add_metric([cat], f.failed_runs[cat])
        yield lost
        yield runs
        rate = GaugeMetricFamily(
            "gpulens_failure_rate_per_1000_node_days", "Infrastructure failures per 1,000 "
            f"node-days over the last {f.rate.get('days', 0):.1f} days (at least 30 days or "
            "10 failures), with its exact 95 % Poisson bounds", labels=["bound"])
        for bound, key in (("estimate", "r_f"), ("low", "low"), ("high", "high")):
            value = f.rate.get(key)
            if value is not None and value == value:  # NaN: no exposure, no figure
                rate.add_metric([bound], value)
        yield rate
        yield GaugeMetricFamily("gpulens_failure_rate_failures",
                                "Infrastructure failures behind the failure rate",
                                value=f.rate.get("failures", 0))
        yield GaugeMetricFamily("gpulens_failure_rate_node_days",
                                "Node-days of work behind the failure rate",
                                value=f.rate.get("node_days", 0.0))
        jobs = GaugeMetricFamily(
            "gpulens_job_ettr_ratio", f"ETTR (productive / wall time) of each running job "
            f"with at least {f.large_job_gpus} GPUs", labels=["job_id", "user", "gpus"])
        for j in f.large_jobs:
            jobs.add_metric([j["job_id"], j["user_name"], str(j["gpus"])], j["ettr"])
        yield jobs
        if f.large_ettr is not None:
            yield GaugeMetricFamily("gpulens_large_jobs_ettr_ratio", "GPU-weighted ETTR of "
                                    f"the running jobs with at least {f.large_job_gpus} GPUs",
                                    value=f.large_ettr)
        energy = GaugeMetricFamily(
            "gpulens_energy_kwh", f"Energy of the last {days}: gpu (counters), it (with "
            "the nodes' non-GPU power), facility (IT x PUE)", labels=["scope"])
        for scope in ("gpu", "it", "facility"):
            energy.add_metric([scope], f.energy.get(f"{scope}_kwh", 0.0))
        yield energy
        yield GaugeMetricFamily("gpulens_carbon_kg", f"Operational emissions of the last "
                                f"{days}, kg CO2e", value=f.energy.get("carbon_kg", 0.0))
        firing = GaugeMetricFamily("gpulens_alerts_firing", "Alerts firing now",
                                   labels=["rule", "severity"])
        for a in f.alerts_firing:
            firing.add_metric([str(a["rule"]), str(a["severity"])], int(a["alerts"]))
        yield firing


def registry(reader: Callable, *, now: Callable[[], datetime],
             options: Options | None = None) -> CollectorRegistry:
    """A registry holding only the figures collector (no process metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FiguresCollector(reader, now=now, options=options))
    return reg


def install(server, reader: Callable, *, now: Callable[[], datetime],
            options: Options | None = None, public: bool = True) -> None:
    """Serve ``/metrics`` on the Flask ``server``. ``public``: readable without a login,
    as ``/healthz`` (dashboard.auth lists both as open paths); otherwise a login is
    needed when the dashboard has logins."""
    from flask import Response, jsonify

    reg = registry(reader, now=now, options=options)

    def view():
        if not public:
            from dashboard.auth import current_user

            state = server.extensions.get("gpulens_auth")
            if state is not None and state.config.enabled and current_user() is None:
                return jsonify({"error": "login required"}), 401
        return Response(generate_latest(reg), mimetype=CONTENT_TYPE_LATEST)

    server.add_url_rule("/metrics", "metrics", view)

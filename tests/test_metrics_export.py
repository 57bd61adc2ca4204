"""/metrics: gpulens's derived figures, scraped by a real Prometheus (issue 19).

The hand-built Overview cluster (tests/support/dash_seed.py: seed_overview) with its
failures classified; one alert firing. The exporter's figures are the pages' own
(warehouse/metrics.py), and Prometheus reads back what the exporter served.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from flask import Flask
from werkzeug.serving import make_server

from gpulens import exporter
from tests.support.dash_seed import NOW, seed_overview
from tests.support.integration import need
from tests.support.prometheus import Prometheus
from warehouse import Warehouse, metrics
from warehouse.queries import failures as qf


@pytest.fixture
def wh():
    with Warehouse(":memory:") as w:
        seed_overview(w)
        w.write(lambda con: con.execute(
            "INSERT INTO alerts (alert_id, fingerprint, rule, severity, scope, rack, "
            "group_key, state, peak, unit, active_since, fired_at) VALUES ('a1', 'f1', "
            "'rack_cooling', 'critical', 'rack', 'r01', 'g', 'firing', 7.0, 'C', ?, ?)",
            [NOW, NOW])).result()
        yield w


def test_figures_are_the_pages_figures(wh):
    f = metrics.figures(wh.reader, now=NOW)
    start = NOW - timedelta(days=metrics.WINDOW_DAYS)
    by_cat = qf.failures_by(wh.reader(), start=start, end=NOW, by="category")
    assert sum(f.lost_gpu_hours.values()) == pytest.approx(by_cat["gpu_hours_lost"].sum())
    assert sum(f.failed_runs.values()) == by_cat["failures"].sum() == 5  # K ends at NOW
    r_start, r_end = qf.rate_window(wh.reader(), end=NOW)
    assert r_end - r_start >= timedelta(days=qf.RATE_MIN_DAYS)
    rate = qf.failure_rate(wh.reader(), start=r_start, end=r_end)
    assert f.rate["failures"] == rate["failures"] == 1  # E/0's NODE_FAIL
    assert f.rate["r_f"] == pytest.approx(rate["r_f_per_1000_node_days"])
    assert f.alerts_firing == [{"rule": "rack_cooling", "severity": "critical", "alerts": 1}]


def _query(prom: Prometheus, promql: str) -> list[dict]:
    url = f"{prom.url}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.mark.integration
def test_a_real_prometheus_scrapes_the_figures(wh, tmp_path):
    binary = need("prometheus", "prometheus")
    app = Flask(__name__)
    exporter.install(app, wh.reader, now=lambda: NOW)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    prom = Prometheus(binary, tmp_path, [f"127.0.0.1:{server.port}"], interval_s=1.0)
    try:
        deadline = time.monotonic() + 30
        while not _query(prom, "gpulens_gpu_hours_lost"):
            assert time.monotonic() < deadline, "Prometheus never scraped /metrics\n" + \
                prom.logs()
            time.sleep(0.3)
        f = metrics.figures(wh.reader, now=NOW)
        lost = {s["metric"]["category"]: float(s["value"][1])
                for s in _query(prom, "gpulens_gpu_hours_lost")}
        assert lost == pytest.approx(f.lost_gpu_hours)
        rate = {s["metric"]["bound"]: float(s["value"][1])
                for s in _query(prom, "gpulens_failure_rate_per_1000_node_days")}
        assert rate == pytest.approx({"estimate": f.rate["r_f"], "low": f.rate["low"],
                                      "high": f.rate["high"]})
        firing = _query(prom, "gpulens_alerts_firing")
        assert [(s["metric"]["rule"], s["value"][1]) for s in firing] == [
            ("rack_cooling", "1")]
        assert _query(prom, 'up{job="dcgm"}')[0]["value"][1] == "1"
    finally:
        prom.stop()
        server.shutdown()


@pytest.mark.parametrize("public", [True, False])
def test_metrics_access_with_logins(public):
    """Open like /healthz by default; with service.metrics_public false, a login."""
    from dashboard import auth
    from dashboard.app import create_app

    with Warehouse(":memory:") as w:
        seed_overview(w)
        config = auth.AuthConfig(users={"alice": auth.hash_password("s3cret")},
                                 secret_key="test-key")
        app = create_app(w, now=lambda: NOW, auth_config=config)
        exporter.install(app.server, w.reader, now=lambda: NOW, public=public)
        response = app.server.test_client().get("/metrics")
        assert response.status_code == (200 if public else 401)
        if public:
            assert b'gpulens_gpu_hours_lost{category="infrastructure"}' in response.data
            assert response.content_type.startswith("text/plain")

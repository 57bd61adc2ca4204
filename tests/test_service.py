"""The service in a subprocess: /healthz, live collection, clean shutdown."""

import time

import pytest
import requests

from tests.support.integration import ServiceProcess
from warehouse import Warehouse

pytestmark = pytest.mark.integration


def wait_for(fn, timeout=60.0, every=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met in {timeout} s (last: {last})")


def test_demo_serves_health_collects_and_stops_cleanly(tmp_path):
    db = tmp_path / "demo.duckdb"
    svc = ServiceProcess(db, "--history-days", "0.25", "--racks", "2")
    try:
        assert svc.url.startswith("http://127.0.0.1:")

        def healthy():
            h = requests.get(svc.url + "/healthz", timeout=5).json()
            src = h["sources"].get("simulator", {})
            return h if src.get("last_success") and h["backfill"].get("state") == "done" else None

        health = wait_for(healthy, timeout=90)
        assert health["status"] == "ok"
        assert health["sources"]["simulator"]["last_error"] is None
        assert health["sources"]["simulator"]["rows"] > 0
        assert health["database"]["size_bytes"] > 0
        page = requests.get(svc.url + "/", timeout=10)
        assert page.status_code == 200 and "gpulens" in page.text
    finally:
        code = svc.stop()
    log = "".join(svc.output)
    assert code == 0, log
    assert "gpulens stopped; the database is checkpointed." in log
    assert "objects of the started app frozen out of the garbage collector" in log
    assert "Traceback" not in log and "checkpoint at close" not in log
    with Warehouse(db) as wh:
        cur = wh.reader()
        gpus = cur.execute("SELECT count(*) FROM gpus").fetchone()[0]
        assert gpus == 2 * 8 * 8
        hours = cur.execute(
            "SELECT (max(ts) - min(ts)) FROM gpu_samples").fetchone()[0].total_seconds() / 3600
        assert hours >= 5.9  # 6 h of history plus the live cycles
        assert cur.execute("SELECT count(*) FROM jobs").fetchone()[0] > 0
        assert cur.execute("SELECT count(*) FROM gpu_samples_1h").fetchone()[0] > 0


def test_port_in_use_is_a_one_line_error(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "gpulens.cli", "demo", "--port", str(port), "--db",
             str(tmp_path / "d.duckdb"), "--history-days", "0"],
            capture_output=True, text=True, timeout=120,
        )
    assert out.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use. Choose another with --port" in out.stderr
    assert "Traceback" not in out.stderr

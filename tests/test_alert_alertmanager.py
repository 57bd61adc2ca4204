"""A real Prometheus Alertmanager receives gpulens alerts and routes them to a webhook.

Needs ``/usr/bin/prometheus-alertmanager`` (Debian package prometheus-alertmanager); it
is started here on 127.0.0.1 ephemeral ports with a temporary config and storage.
"""

from __future__ import annotations

import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from alerts.receiver import start_receiver
from tests.support.alerts import Incident
from tests.support.integration import need

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path):
    binary = need("prometheus-alertmanager", "prometheus-alertmanager")
    rx = start_receiver()  # Alertmanager's webhooks are not signed
    config = tmp_path / "am.yml"
    config.write_text(f"""
route:
  receiver: hook
  group_by: [alertname, rack]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {rx.url}am
        send_resolved: true
""")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
         "--log.level=warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None:
                pytest.fail("alertmanager exited: " + proc.stdout.read())
            time.sleep(0.1)
    yield url, rx
    proc.terminate()
    proc.wait(timeout=10)
    rx.stop()


def _wait_for(rx, status: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for body in rx.bodies():
            if body.get("status") == status:
                return body
        time.sleep(0.2)
    raise AssertionError(f"alertmanager sent no {status} notification: {rx.bodies()}")


def test_alertmanager_routes_gpulens_alerts_to_its_receivers(tmp_path, alertmanager):
    url, rx = alertmanager
    # Alertmanager compares startsAt/endsAt with its own clock: play the incident in the
    # recent past so the resolution is already over when it arrives.
    start = datetime.now(UTC).replace(tzinfo=None, microsecond=0) - timedelta(hours=2)
    inc = Incident(tmp_path / "w.duckdb", start=start, alertmanager_url=url)
    try:
        inc.run_until(24)
        firing = _wait_for(rx, "firing")
        [alert] = firing["alerts"]
        assert alert["labels"]["alertname"] == "rack_cooling"
        assert alert["labels"]["rack"] == "r2" and alert["labels"]["severity"] == "critical"
        assert "thermal?rack=r2" in alert["annotations"]["dashboard"]
        inc.run_until(45)
        resolved = _wait_for(rx, "resolved")
        assert resolved["alerts"][0]["labels"]["rack"] == "r2"
        assert [b["status"] for b in rx.bodies()] == ["firing", "resolved"]
        assert set(inc.outbox()["status"]) == {"delivered"}
    finally:
        inc.wh.close()

"""A real Prometheus Alertmanager receives gpulens alerts and routes them to a webhook.

Needs ``/usr/bin/prometheus-alertmanager`` (Debian package prometheus-alertmanager); it
is started here on 127.0.0.1 ephemeral ports with a temporary config and storage.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.alerts import Incident

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
    inc = Incident(tmp_path / "w.duckdb", start=start, alertmanager_url=url,
                   cluster_name="rsc-1")
    try:
        inc.run_until(24)
        firing = _wait_for(rx, "firing")
        [alert] = firing["alerts"]
        assert alert["labels"]["alertname"] == "rack_cooling"
        assert alert["labels"]["rack"] == "r2" and alert["labels"]["severity"] == "critical"
        assert alert["labels"]["cluster"] == "rsc-1"  # issue 18
        assert "thermal?rack=r2" in alert["annotations"]["dashboard"]
        inc.run_until(45)
        resolved = _wait_for(rx, "resolved")
        assert resolved["alerts"][0]["labels"]["rack"] == "r2"
        assert [b["status"] for b in rx.bodies()] == ["firing", "resolved"]
        assert set(inc.outbox()["status"]) == {"delivered"}
    finally:
        inc.wh.close()

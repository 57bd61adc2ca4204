"""The demo's story: the simulator's rack cooling failure, through the real collectors,
fires exactly one rack alert per sink within minutes and resolves it when the rack cools.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from alerts.receiver import start_receiver
from alerts.runtime import AlertRuntime
from collector.simulated import SimulatedSource
from collector.simulator import SimConfig
from tests.support.alerts import alert_config
from warehouse import Warehouse

pytestmark = pytest.mark.slow


def test_simulated_rack_cooling_failure_fires_once_and_resolves_once():
    live = datetime(2026, 11, 20, 12, 0, 0)
    sim = replace(SimConfig(), cooling_hold_min=(10.0, 10.0))  # a short plateau: a fast test
    source = SimulatedSource(sim, anchor=live - timedelta(days=1), live_start=live)
    [incident] = [i for i in source.cluster.incidents()
                  if i.kind == "rack_cooling" and live <= i.start < live + timedelta(hours=1)]
    rx = start_receiver(secret="demo")
    slack = start_receiver()
    wh = Warehouse(":memory:")
    try:
        wh.ingest_all(source.topology())
        source.history(lambda kind, t: wh.ingest(kind, t).result(),
                       live - timedelta(minutes=16), live, progress=False)
        clock = [live]
        rt = AlertRuntime(wh, alert_config(webhook_url=rx.url, webhook_secret="demo",
                                           slack_url=slack.url), now=lambda: clock[0])
        while clock[0] < incident.end + timedelta(minutes=8):
            for kind, table in source.collect(clock[0]):
                wh.ingest(kind, table).result()
            rt.evaluate_once()
            rt.deliver_once()
            clock[0] += timedelta(seconds=15)
        rack = [b for b in rx.bodies() if b["rack"] == incident.rack]
        assert [(b["kind"], b["rule"]) for b in rack] == [("firing", "rack_cooling"),
                                                          ("resolved", "rack_cooling")]
        fired = datetime.fromisoformat(rack[0]["created_at"][:-1])
        assert incident.start < fired <= incident.start + timedelta(minutes=6)
        cooled = datetime.fromisoformat(rack[1]["created_at"][:-1])
        assert incident.end - timedelta(minutes=5) < cooled <= incident.end + timedelta(minutes=8)
        in_slack = [b["text"] for b in slack.bodies() if f"in {incident.rack}" in b["text"]]
        assert len(in_slack) == 2 and rx.rejected == 0 and rx.duplicates == 0
    finally:
        rx.stop()
        slack.stop()
        wh.close()

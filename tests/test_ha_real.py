"""An HA pair with real components (issue 20): two `gpulens serve` processes watch the
same simulated cluster (one set of dcgm-exporter endpoints, tests/support/ha.py) and
page through a real Alertmanager and a signed webhook under the documented mode (the
primary sends direct sinks, the standby takes over when the primary is gone).

The demo's rack cooling failure pages once per channel while both run. Either both run
on and the resolve arrives once per channel, or the primary is killed (SIGKILL) while
the rack is still hot: the standby fires twin_gone and sends the resolve, once per
channel. Needs Debian's prometheus-alertmanager.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from alerts.receiver import start_receiver
from tests.support.ha import GpulensServe, SimExporters, pair_config, wait_for
from tests.support.integration import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _am_pages(rx) -> list[tuple[str, str, str]]:
    """Alertmanager's notifications: (alertname, rack or node, status)."""
    out = []
    for body in rx.bodies():
        labels = body.get("groupLabels", {})
        where = labels.get("rack") or body["alerts"][0]["labels"].get("node", "")
        out.append((labels.get("alertname"), where, body["status"]))
    return out


def _hook_pages(rx) -> list[tuple[str, str, str]]:
    """The webhook's documents: (rule, rack or node, kind)."""
    return [(b["rule"], b["rack"] or b["alerts"][0]["node"], b["kind"]) for b in rx.bodies()]


@pytest.mark.parametrize("kill", ["primary", None], ids=["primary-killed", "both-run"])
def test_a_pair_pages_once_and_resolves_once(tmp_path, alertmanager, kill):
    am_url, am_rx = alertmanager
    hook = start_receiver(secret="ha-secret")
    world = SimExporters()
    incident = world.incident()
    rack = incident.rack
    ports = (free_port(), free_port())
    inventory = world.inventory(tmp_path / "inventory.csv")
    configs = [pair_config(tmp_path / f"{name}.toml", name=name, port=ports[i],
                           peer_port=ports[1 - i], role=("primary", "standby")[i],
                           db=tmp_path / f"{name}.duckdb", targets=world.targets,
                           inventory=inventory, alertmanager_url=am_url,
                           webhook_url=hook.url, secret="ha-secret")
               for i, name in enumerate(("a", "b"))]
    procs = [GpulensServe(cfg, tmp_path / f"{cfg.stem}.log") for cfg in configs]
    a, b = procs
    a_id = f"127.0.0.1:{ports[0]}"  # the twin_gone alert names the missing instance
    try:
        for p in procs:
            p.wait_serving()
        wait_for(lambda: all(p.healthz()["ha"]["twin"]["status"] == "seen" for p in procs),
                 "the twins to see each other")
        before = (len(_hook_pages(hook)), len(_am_pages(am_rx)))  # a twin_gone of the
        world.go()  # pair's start (one came up before the other) is not the incident's
        rack_page = ("rack_cooling", rack, "firing")
        wait_for(lambda: rack_page in _hook_pages(hook), "the webhook page of the rack")
        wait_for(lambda: rack_page in _am_pages(am_rx), "Alertmanager's page of the rack")
        # the standby saw the primary deliver it: its own copy is marked, never sent
        wait_for(lambda: {"sink": "webhook", "status": "twin"} in [
            {k: r[k] for k in ("sink", "status")} for r in b.outbox()],
            "the standby to mark its copy of the page as delivered by the twin")
        assert world.sim_now() < incident.end  # the rack is still hot
        gone = ("twin_gone", a_id, "firing")
        resolved = ("rack_cooling", rack, "resolved")
        if kill == "primary":
            a.stop(signal.SIGKILL)
            wait_for(lambda: gone in _hook_pages(hook) and gone in _am_pages(am_rx),
                     "twin_gone from the standby", timeout=60)
        wait_for(lambda: resolved in _hook_pages(hook) and resolved in _am_pages(am_rx),
                 "the resolve", timeout=180)
        alive = [p for p in procs if p.proc.poll() is None]
        wait_for(lambda: not [r for p in alive for r in p.outbox() if r["status"] == "pending"],
                 "the outboxes to drain")
        health = b.healthz()["ha"]
        assert health["role"] == "standby"
        assert health["twin"]["status"] == ("gone" if kill else "seen")
        hook_pages = Counter(_hook_pages(hook)[before[0]:])
        am_pages = Counter(_am_pages(am_rx)[before[1]:])
        print(f"\n{kill or 'none'} killed; notifications after the incident began: webhook",
              dict(hook_pages), "duplicates", hook.duplicates, "; alertmanager",
              dict(am_pages))
        expected = {rack_page: 1, resolved: 1} | ({gone: 1} if kill else {})
        assert hook_pages == expected and am_pages == expected
        assert hook.duplicates == 0 and hook.rejected == 0
    finally:
        for p in procs:
            p.stop(signal.SIGTERM if p.proc.poll() is None else signal.SIGKILL)
        world.close()
        hook.stop()

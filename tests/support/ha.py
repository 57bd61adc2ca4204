"""An HA pair for tests (issue 20): one simulated cluster, two real ``gpulens serve``.

``SimExporters`` serves the simulated cluster (collector/simulator, the demo's world
with its rack cooling failure) as one dcgm-exporter endpoint per node on 127.0.0.1,
and writes the topology inventory; simulated time stands at the live start until
``go()``, then runs ``speed`` times faster than the wall clock, so a 17-minute incident
takes about a minute. Both instances scrape the same endpoints, as a real pair watches
the same exporters. ``GpulensServe`` runs ``gpulens serve --config`` in a subprocess,
its output in a file (a pipe nobody reads would block it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import requests

from collector.simulator import Cluster, SimConfig
from tests.support.integration import ROOT
from tests.support.prometheus import Exporters

LIVE = datetime(2026, 11, 20, 12, 0, 0)  # the simulated live start


class SimExporters:
    """The simulated cluster's dcgm-exporter pages (see module docstring)."""

    def __init__(self, *, racks: int = 6, speed: float = 15.0, hold_min: float = 6.0,
                 seed: int = 0):
        self.sim = replace(SimConfig(), racks=racks, nodes_per_rack=1, gpus_per_node=8,
                           seed=seed, first_incident_after_min=1.0,
                           cooling_hold_min=(hold_min, hold_min))
        self.cluster = Cluster(self.sim, anchor=LIVE - timedelta(days=1), live_start=LIVE)
        self.speed = speed
        nodes = self.cluster.topology()["nodes"].to_pandas()
        self.nodes = list(nodes["node"])
        self.rack_of = dict(zip(nodes["node"], nodes["rack"], strict=True))
        self._started: float | None = None
        self._cache: tuple[datetime, dict[str, str]] | None = None
        self._lock = threading.Lock()
        self.exporters = Exporters(len(self.nodes), lambda i: self.texts()[self.nodes[i]])

    @property
    def targets(self) -> str:
        return ",".join(self.exporters.addresses)

    def incident(self):
        """The first rack cooling failure after the live start (the demo's incident)."""
        return next(i for i in self.cluster.incidents()
                    if i.kind == "rack_cooling" and i.start >= LIVE)

    def go(self) -> None:
        """Start simulated time now."""
        self._started = time.monotonic()

    def sim_now(self) -> datetime:
        if self._started is None:
            return LIVE
        return LIVE + timedelta(seconds=(time.monotonic() - self._started) * self.speed)

    def texts(self) -> dict[str, str]:
        """Every node's page at the current simulated tick (computed once per tick)."""
        step = timedelta(seconds=self.sim.interval_s)
        tick = LIVE + (self.sim_now() - LIVE) // step * step
        with self._lock:
            if self._cache is None or self._cache[0] != tick:
                self._cache = (tick, self.cluster.dcgm_texts(tick))
            return self._cache[1]

    def inventory(self, path: Path) -> Path:
        """The topology inventory (CSV: rack, nodes) of the simulated cluster."""
        lines = ["rack,nodes"] + [f"{rack},{node}" for node, rack in self.rack_of.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def close(self) -> None:
        self.exporters.close()


class GpulensServe:
    """``gpulens serve --config CONFIG`` in a subprocess; ``url`` once it serves
    (:meth:`wait_serving`)."""

    def __init__(self, config: Path, log: Path, *, timeout: float = 120.0):
        self.log = log
        self._out = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpulens.cli", "serve", "--config", str(config)],
            cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.url: str | None = None
        self.timeout = timeout

    def wait_serving(self) -> GpulensServe:
        """Wait for the line naming the URL it serves (kill it and fail if none comes)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"serving (http://\S+)", self.log.read_text())
            if m:
                self.url = m.group(1).rstrip("/")
                return self
            time.sleep(0.2)
        self.stop(signal.SIGKILL)
        raise AssertionError(f"gpulens serve did not start:\n{self.log.read_text()[-3000:]}")

    def get(self, path: str) -> dict:
        """The JSON answer of ``GET path`` (an answer that is not JSON fails, showing it)."""
        response = requests.get(self.url + path, timeout=10)
        try:
            return response.json()
        except ValueError:
            raise AssertionError(f"{path} answered {response.status_code}: "
                                 f"{response.text[:500]}") from None

    def healthz(self) -> dict:
        return self.get("/healthz")

    def outbox(self) -> list[dict]:
        """The outbox per sink and status (GET /api/alerts/outbox; no login configured)."""
        return self.get("/api/alerts/outbox")["outbox"]

    def stop(self, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        return self.proc.returncode


def pair_config(path: Path, *, name: str, port: int, peer_port: int, role: str, db: Path,
                targets: str, inventory: Path, alertmanager_url: str, webhook_url: str,
                secret: str) -> Path:
    """One instance's configuration: the shared exporters, fast collection and alert
    intervals, rack_cooling with short holds (the simulated clock runs fast), only the
    rack rule and twin_gone, both sinks, and the twin on ``peer_port``."""
    path.write_text(f"""
[cluster]
name = "ha-test"
[service]
host = "127.0.0.1"
port = {port}
db = "{db}"
log_level = "INFO"
[collect]
source = "dcgm,topology"
interval_s = 1.0
[dcgm]
targets = "{targets}"
[topology]
inventory = "{inventory}"
[reports]
enabled = false
[alerts]
evaluate_interval_s = 1.0
deliver_interval_s = 0.5
retry_initial_s = 0.5
alertmanager_url = "{alertmanager_url}"
alertmanager_resend_s = 5.0
webhook_url = "{webhook_url}"
webhook_secret = "{secret}"
disabled = "gpu_temp,hbm_temp,thermal_throttle,gpu_hot_vs_peers,temp_rise,critical_xid,straggler"
"rack_cooling.hold_s" = 3.0
"rack_cooling.resolve_hold_s" = 12.0
"rack_cooling.smooth_s" = 4.0
"rack_cooling.baseline_s" = 10.0
[ha]
name = "{name}"
role = "{role}"
peer_url = "http://127.0.0.1:{peer_port}/"
poll_interval_s = 0.5
poll_timeout_s = 1.0
twin_gone_after_s = 6.0
""")
    return path


def wait_for(check, what: str, timeout: float = 120.0, every_s: float = 0.25):
    """Poll ``check()`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")

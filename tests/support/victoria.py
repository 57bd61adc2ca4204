"""A real VictoriaMetrics server for tests, and the exposition text Prometheus-API stores
take in (``/api/v1/import/prometheus``) and give out (``/federate``).

``VictoriaMetrics`` runs Debian's ``victoria-metrics`` single-node binary on 127.0.0.1
with temporary storage; tests import samples with timestamps and read them back through
the Prometheus source. ``-search.latencyOffset=0s``: by default VictoriaMetrics hides
the newest 30 s from queries (points still being ingested), which a test of "now" would
otherwise wait out. Never run as a system service.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import requests

from tests.support.integration import free_port


def with_targets(texts: Mapping[str, str], ts_ms: int, *, job: str = "dcgm") -> str:
    """One exposition text of many exporters' ``texts`` (node -> dcgm-exporter text), as a
    store holds them after scraping: each line gains the target's ``instance``
    (``node:9400``) and ``job`` labels and the timestamp ``ts_ms`` (Unix ms); comments
    are dropped. What ``/federate`` answers, and what ``/api/v1/import/prometheus`` takes.
    """
    out = []
    for node, text in texts.items():
        extra = f',instance="{node}:9400",job="{job}"}} '
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            head, value = line.rsplit("} ", 1)
            out.append(f"{head}{extra}{value} {ts_ms}\n")
    return "".join(out)


class VictoriaMetrics:
    """Debian's ``victoria-metrics`` on 127.0.0.1 (a free port), data under ``root``."""

    def __init__(self, binary: str, root: Path):
        self.root = Path(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.root / "victoria.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, f"-storageDataPath={self.root}/vmdata",
             f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1y",
             "-search.latencyOffset=0s", "-loggerLevel=ERROR"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("victoria-metrics exited:\n" + self.logs())
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError("victoria-metrics did not become ready:\n" + self.logs())

    def import_text(self, text: str) -> None:
        """Store exposition-format lines (with timestamps) and make them searchable."""
        resp = requests.post(self.url + "/api/v1/import/prometheus", data=text.encode(),
                             timeout=30)
        resp.raise_for_status()
        requests.get(self.url + "/internal/force_flush", timeout=30).raise_for_status()

    def series(self, selector: str) -> int:
        """How many series match ``selector`` now."""
        resp = requests.get(self.url + "/api/v1/series", params={"match[]": selector},
                            timeout=10)
        resp.raise_for_status()
        return len(resp.json()["data"])

    def logs(self) -> str:
        return (self.root / "victoria.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

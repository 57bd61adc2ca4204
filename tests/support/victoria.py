"""A real VictoriaMetrics server for tests, and the exposition text Prometheus-API stores
take in (``/api/v1/import/prometheus``) and give out (``/federate``).

``VictoriaMetrics`` runs Debian's ``victoria-metrics`` single-node binary on 127.0.0.1
with temporary storage; tests import samples with timestamps and read them back through
the Prometheus source. ``-search.latencyOffset=0s``: by default VictoriaMetrics hides
the newest 30 s from queries (points still being ingested), which a test of "now" would
otherwise wait out. Never run as a system service.
"""

from __future__ import annotations

from collections.abc import Mapping

import requests

from tests.support.integration import Daemon


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


class VictoriaMetrics(Daemon):
    """Debian's ``victoria-metrics`` on 127.0.0.1 (a free port), data under ``root``."""

    name = "victoria"
    ready_path = "/health"

    def argv(self) -> list[str]:
        return [f"-storageDataPath={self.root}/vmdata",
                f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1y",
                "-search.latencyOffset=0s", "-loggerLevel=ERROR"]

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

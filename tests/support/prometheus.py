"""Test servers: fake exporters (HTTP on localhost) and a real Prometheus server.

``Exporters(n)`` serves ``n`` endpoints from one process, each answering ``/metrics``
with ``text_of(index)`` (so a test can change the readings over time). ``Prometheus``
runs Debian's ``/usr/bin/prometheus`` on 127.0.0.1 with a temporary config and
storage, scraping given targets at a short interval; never as a system service.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa

from collector.wire import render_dcgm
from tests.support.integration import Daemon
from warehouse.schema import SCHEMAS


class Exporters:
    """``n`` HTTP endpoints on 127.0.0.1, each serving ``text_of(i)`` at any path."""

    def __init__(self, n: int, text_of: Callable[[int], str], *, delay_s: float = 0.0):
        self.text_of = text_of
        self.delay_s = delay_s
        self.servers: list[ThreadingHTTPServer] = []
        self.hits = [0] * n
        for i in range(n):
            self.servers.append(self._server(i))
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True)
                        for s in self.servers]
        for t in self.threads:
            t.start()

    def _server(self, index: int) -> ThreadingHTTPServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                outer.hits[index] += 1
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                body = outer.text_of(index).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (its timeout passed on a loaded machine)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        return server

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.server_address[1]}" for s in self.servers]

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


def dcgm_text(index: int) -> str:
    """dcgm-exporter text of two GPUs of node ``gpuNNN``; power (W) follows the wall clock
    so values change from one scrape to the next."""
    t = time.time()
    rows = [{"ts": datetime(2026, 1, 1), "node": f"gpu{index:03d}", "gpu_index": g,
             "gpu_uuid": f"GPU-{index}-{g}", "interval_s": 1.0, "util_pct": 90.0,
             "power_w": 300.0 + (t % 100), "energy_j": 1000.0 * t, "temp_c": 60.0 + g,
             "throttle_thermal": False, "throttle_power": False, "xid_last": 0}
            for g in range(2)]
    samples = pa.Table.from_pylist(rows, schema=SCHEMAS["samples"])
    return render_dcgm(samples)[f"gpu{index:03d}"]


class Prometheus(Daemon):
    """A real Prometheus on 127.0.0.1 scraping ``targets`` every ``interval_s``."""

    name = "prometheus"
    ready_path = "/-/ready"

    def __init__(self, binary: str, root: Path, targets: list[str], interval_s: float = 1.0):
        self.config = Path(root) / "prometheus.yml"
        listed = ", ".join(f"'{t}'" for t in targets)
        self.config.write_text(
            f"global:\n  scrape_interval: {interval_s:g}s\n  scrape_timeout: {interval_s:g}s\n"
            f"scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
            f"      - targets: [{listed}]\n")
        super().__init__(binary, root)

    def argv(self) -> list[str]:
        return [f"--config.file={self.config}", f"--storage.tsdb.path={self.root}/data",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h", "--log.level=warn"]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)

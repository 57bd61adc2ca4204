"""``gpulens agent``: this host's NVML readings at ``/metrics``, as dcgm-exporter prints them.

Where dcgm-exporter cannot run, the agent serves the same metric names and labels
(:func:`collector.wire.render_dcgm`), so an existing Prometheus scrapes it unchanged and
gpulens collects it exactly as it collects dcgm-exporter (source ``dcgm``).

It reads NVML once per ``interval_s`` on its own thread, on a drift-free schedule
(``next += interval; sleep(next - now)``), and answers every request from the last
reading, so scrapes never touch the GPU. XIDs from NVML's event API appear as the
exporter's ``DCGM_FI_DEV_XID_ERRORS`` gauge (the last XID seen).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from collector.nvml import NvmlSource, samples_table
from collector.wire import render_dcgm

__all__ = ["Agent"]

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Agent:
    """An HTTP server on ``host:port`` (0 = any free port) serving ``/metrics``."""

    def __init__(self, source: NvmlSource, host: str = "0.0.0.0", port: int = 9400):
        self.source = source
        self.interval_s = source.interval_s  # seconds between NVML reads
        self.text = ""
        self.last_read: datetime | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served here")
                    return
                body = agent.metrics().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt, *args):
                log.debug("agent: " + fmt, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/metrics"

    def read_once(self) -> None:
        """Read every GPU now and replace the served text."""
        now = datetime.now(UTC).replace(tzinfo=None)
        snaps, _events = self.source.snapshot(now)
        samples = samples_table(snaps, self.source.node, now, self.interval_s)
        models = {s.uuid: s.name for s in snaps if s.uuid and s.name}
        texts = render_dcgm(samples, models=models,
                            driver_version=self.source.reader.driver_version or "")
        with self._lock:
            self.text = texts.get(self.source.node, "")
            self.last_read = now

    def metrics(self) -> str:
        with self._lock:
            return self.text

    def _loop(self) -> None:
        next_tick = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
            try:
                self.read_once()
            except Exception:  # keep serving the last reading
                self.errors += 1
                log.exception("agent: reading NVML failed")
            next_tick += self.interval_s

    def start(self) -> str:
        """Read once, then serve and keep reading in background threads; the URL."""
        self.read_once()
        for target, name in ((self._loop, "agent-read"), (self.server.serve_forever,
                                                           "agent-http")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self.url

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self.source.close()

"""A small webhook receiver: for the demo, the tests and as a model for real receivers.

It accepts JSON POSTs on any path, verifies ``X-Gpulens-Signature`` when it has a secret
(401 when wrong), honours ``Idempotency-Key`` (a key seen before is answered 200 and not
stored again) and keeps what it received in memory.

    rx = start_receiver(secret="s3cret")      # 127.0.0.1, a free port, in a thread
    rx.url                                    # http://127.0.0.1:PORT/
    rx.received                               # [Received(key, path, body, headers), ...]
    rx.stop()
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alerts.sinks import KEY_HEADER, SIGNATURE_HEADER, verify


@dataclass(frozen=True)
class Received:
    key: str | None  # the Idempotency-Key header
    path: str
    body: Any  # the parsed JSON
    headers: dict[str, str]


class Receiver:
    """A running receiver; see :func:`start_receiver`."""

    def __init__(self, server: ThreadingHTTPServer, secret: str | None, on_receive=None):
        self.server, self.secret, self.on_receive = server, secret, on_receive
        self.received: list[Received] = []
        self.duplicates = 0  # requests whose key had been received before
        self.rejected = 0  # requests with a missing or wrong signature
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=server.serve_forever, name="alert-receiver",
                                        daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def handle(self, path: str, headers: dict[str, str], raw: bytes) -> int:
        """Check and keep one request; returns the HTTP status to answer."""
        if self.secret is not None and not verify(self.secret, raw,
                                                  headers.get(SIGNATURE_HEADER.lower())):
            with self._lock:
                self.rejected += 1
            return 401
        try:
            body = json.loads(raw)
        except ValueError:
            return 400
        key = headers.get(KEY_HEADER.lower())
        with self._lock:
            if key is not None and key in self._keys:
                self.duplicates += 1
                return 200
            if key is not None:
                self._keys.add(key)
            got = Received(key, path, body, headers)
            self.received.append(got)
        if self.on_receive is not None:
            self.on_receive(got)
        return 200

    def bodies(self, kind: str | None = None) -> list[Any]:
        """Received bodies, optionally only generic documents of one ``kind``."""
        with self._lock:
            out = [r.body for r in self.received]
        if kind is not None:
            out = [b for b in out if isinstance(b, dict) and b.get("kind") == kind]
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def start_receiver(secret: str | None = None, *, host: str = "127.0.0.1", port: int = 0,
                   on_receive=None) -> Receiver:
    """Start a receiver in a daemon thread; ``port=0`` picks a free port.
    ``on_receive(Received)`` is called for each new notification (e.g. to log it)."""
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = holder["rx"].handle(self.path, headers, raw)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):  # quiet: the tests and the demo have their own logs
            pass

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer((host, port), Handler)
    rx = holder["rx"] = Receiver(server, secret, on_receive)
    rx._thread.start()
    return rx

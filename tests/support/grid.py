"""A local HTTP server answering as the grid-intensity services do (issue 21).

``GridApi()`` listens on 127.0.0.1 (port 0) in a thread; ``answer(path, body, status=200,
auth=None)`` sets what a path answers (``body``: a fixture name of tests/fixtures/grid/,
a dict, or raw bytes). ``auth`` is the exact ``Authorization`` or ``auth-token`` header
the path requires, else it answers 401, as the real services do. Every request is kept
in ``requests`` (method, path, query, headers) for the tests to inspect.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "grid"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


class GridApi:
    def __init__(self):
        self.routes: dict[str, tuple[int, bytes, tuple[str, str] | None]] = {}
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                url = urlsplit(self.path)
                outer.requests.append({"path": url.path, "query": parse_qs(url.query),
                                       "headers": dict(self.headers)})
                status, body, auth = outer._route(url.path)
                if auth is not None and self.headers.get(auth[0]) != auth[1]:
                    status, body = 401, b'{"error": "unauthorized"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _route(self, path: str):
        for prefix, route in sorted(self.routes.items(), key=lambda kv: -len(kv[0])):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return route
        return 404, b'{"error": "not found"}', None

    def answer(self, path: str, body, *, status: int = 200,
               auth: tuple[str, str] | None = None) -> None:
        if isinstance(body, str) and body.endswith(".json"):
            raw = (FIXTURES / body).read_bytes()
        elif isinstance(body, bytes):
            raw = body
        else:
            raw = json.dumps(body).encode()
        self.routes[path] = (status, raw, auth)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


#: the hour the documented examples answer for (UTC)
NOW = datetime(2022, 7, 15, 1, 0)
EM_TOKEN = "em-secret-token-123"
WT_PASSWORD = "wt-secret-password-456"
WT_BASIC = "Basic dXNlcjp3dC1zZWNyZXQtcGFzc3dvcmQtNDU2"  # user:wt-secret-password-456


def documented_api() -> GridApi:
    """A :class:`GridApi` answering every provider's endpoint with its documented example,
    behind the credentials above (WattTime's user is ``user``); ``close()`` it."""
    server = GridApi()
    server.answer("/v3/carbon-intensity/history", "electricitymaps_history.json",
                  auth=("auth-token", EM_TOKEN))
    server.answer("/login", "watttime_login.json", auth=("Authorization", WT_BASIC))
    server.answer("/v3/historical", "watttime_historical.json",
                  auth=("Authorization", "Bearer <TOKEN>"))
    server.answer("/intensity", "ukgrid_intensity.json")
    return server

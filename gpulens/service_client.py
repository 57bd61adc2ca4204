"""The command line's HTTP client for a running service's API (alerts, reports).

The service refuses a state-changing request without a same-origin ``Origin`` and the
session's CSRF token (dashboard/web_security.py). So, before a POST or DELETE, the
client asks ``GET /api/session`` for a token (keeping the session cookie it sets) and
sends it as ``X-CSRFToken``, with ``Origin`` set to the service's own address, and every
body as a JSON object. A service without ``/api/session`` (a bare API in tests, an
older service) gets the request without a token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from urllib.parse import urlsplit

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ServiceClient:
    """Requests to the service at ``url`` (e.g. ``http://127.0.0.1:8050``)."""

    def __init__(self, url: str):
        self.base = url.rstrip("/")
        parts = urlsplit(self.base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(CookieJar()))
        self._token: str | None = None

    def csrf_token(self, timeout: float) -> str:
        """The session's CSRF token, fetched once; '' when the service has none."""
        if self._token is None:
            try:
                with self._opener.open(self.base + "/api/session", timeout=timeout) as resp:
                    self._token = str(json.loads(resp.read()).get("csrf_token") or "")
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
                self._token = ""
        return self._token

    def open(self, method: str, path: str, body: dict | None = None, *,
             timeout: float = 10):
        """The response of ``method path`` (raises urllib's HTTPError, URLError)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if method in STATE_CHANGING:
            headers["Origin"] = self.origin
            token = self.csrf_token(timeout)
            if token:
                headers["X-CSRFToken"] = token
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        return self._opener.open(req, timeout=timeout)

    def json(self, method: str, path: str, body: dict | None = None, *,
             timeout: float = 10) -> dict:
        with self.open(method, path, body, timeout=timeout) as resp:
            return json.loads(resp.read())


def error_message(exc: urllib.error.HTTPError) -> str:
    """The ``error`` of a JSON error answer, else ``HTTP <code>``."""
    try:
        return str(json.loads(exc.read()).get("error", f"HTTP {exc.code}"))
    except (ValueError, AttributeError):
        return f"HTTP {exc.code}"

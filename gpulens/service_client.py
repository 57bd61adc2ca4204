"""The command line's HTTP client for a running service's API (alerts, reports).

The service refuses a state-changing request without a same-origin ``Origin`` and the
session's CSRF token (dashboard/web_security.py). So, before a POST or DELETE, the
client asks ``GET /api/session`` for a token (keeping the session cookie it sets) and
sends it as ``X-CSRFToken``, with ``Origin`` set to the service's own address, and every
body as a JSON object. A service without ``/api/session`` (a bare API in tests, an
older service) gets the request without a token.

The client is a ``requests.Session`` (the project's one HTTP library): it keeps the
session cookie and one kept-alive connection. An error answer raises
``requests.HTTPError``; no answer raises ``requests.ConnectionError`` or ``Timeout``
(both ``requests.RequestException``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import requests

from dashboard.auth import STATE_CHANGING  # the methods the service checks, defined once


class ServiceClient:
    """Requests to the service at ``url`` (e.g. ``http://127.0.0.1:8050``)."""

    def __init__(self, url: str):
        self.base = url.rstrip("/")
        parts = urlsplit(self.base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.session = requests.Session()
        self.session.trust_env = False  # the service is addressed directly, never a proxy
        self._token: str | None = None

    def csrf_token(self, timeout: float) -> str:
        """The session's CSRF token, fetched once; '' when the service has none."""
        if self._token is None:
            resp = self.session.get(self.base + "/api/session", timeout=timeout)
            if resp.status_code == 404:
                self._token = ""
            else:
                resp.raise_for_status()
                self._token = str(resp.json().get("csrf_token") or "")
        return self._token

    def open(self, method: str, path: str, body: dict | None = None, *,
             timeout: float = 10) -> requests.Response:
        """The response of ``method path``; raises requests.HTTPError for an error answer,
        requests.RequestException when none comes."""
        headers = {"Accept": "application/json"}
        if method in STATE_CHANGING:
            headers["Origin"] = self.origin
            token = self.csrf_token(timeout)
            if token:
                headers["X-CSRFToken"] = token
        resp = self.session.request(method, self.base + path, json=body, headers=headers,
                                    timeout=timeout)
        resp.raise_for_status()
        return resp

    def json(self, method: str, path: str, body: dict | None = None, *,
             timeout: float = 10) -> dict:
        return self.open(method, path, body, timeout=timeout).json()


def status_of(exc: requests.HTTPError) -> int:
    """The HTTP status of an error answer."""
    return exc.response.status_code


def error_message(exc: requests.HTTPError) -> str:
    """The ``error`` of a JSON error answer, else ``HTTP <code>``."""
    code = status_of(exc)
    try:
        return str(exc.response.json().get("error", f"HTTP {code}"))
    except (ValueError, AttributeError):
        return f"HTTP {code}"

"""Requests as the dashboard's own pages send them: same Origin, the session's CSRF token.

The service refuses state-changing requests without both (dashboard/web_security.py);
tests that post through a Flask test client use :func:`same_origin_post`.
"""

from __future__ import annotations

CSRF_COOKIE = "_csrf_token"


def csrf_headers(client, origin: str = "http://localhost") -> dict[str, str]:
    """Headers a page of ``origin`` would send: Origin and X-CSRFToken from the cookie
    that a GET of ``/api/session`` (like each page load) sets for the current session."""
    client.get("/api/session")
    return {"Origin": origin, "X-CSRFToken": client.get_cookie(CSRF_COOKIE).value}


def same_origin_post(client, path: str, **kwargs):
    """``client.post(path, ...)`` with the headers of :func:`csrf_headers`."""
    headers = {**csrf_headers(client), **kwargs.pop("headers", {})}
    return client.post(path, headers=headers, **kwargs)


def form_token(html: str) -> str:
    """The ``csrf_token`` of the login or logout form in ``html``."""
    import re

    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF token in the form"
    return match[1]


def login(session, base: str, user: str, password: str, **kwargs):
    """Log ``session`` (a requests.Session) in at ``base`` through the form, as a browser
    does: GET the form, POST it back with its token and the page's Origin."""
    token = form_token(session.get(base + "/login", timeout=10, **kwargs).text)
    return session.post(base + "/login", data={"username": user, "password": password,
                                               "csrf_token": token, "next": "/"},
                        headers={"Origin": base}, allow_redirects=False, timeout=30, **kwargs)


def api_headers(session, base: str) -> dict[str, str]:
    """Origin and X-CSRFToken for a state-changing API call of ``session`` at ``base``."""
    token = session.get(base + "/api/session", timeout=10).json()["csrf_token"]
    return {"Origin": base, "X-CSRFToken": token}

"""Checks every request passes before any view, and headers every response carries.

Installed on the Dash app's Flask server by :func:`install` (issue #13), in this order:

1. ``Host`` must be an IP address, ``localhost``, the host of ``dashboard.public_url`` or
   one of ``dashboard.allowed_hosts``: a DNS-rebinding page (``Host: attacker.example``)
   gets 400.
2. A state-changing request (POST, PUT, PATCH, DELETE) must carry an ``Origin`` (or, when
   a browser leaves it out, a ``Referer``) equal to the origin of ``dashboard.public_url``
   or to the origin of the ``Host`` it was sent to: 403 otherwise. Another site, or
   another port of this host, is another origin.
3. Under ``/api/`` such a request must send a JSON object (``Content-Type:
   application/json``; 415 or 400 otherwise). A ``DELETE`` may have no body.
4. It must carry the session's CSRF token (Flask-WTF): the ``csrf_token`` form field or
   the ``X-CSRFToken`` header. The token also sits in the ``_csrf_token`` cookie, from
   which Dash's renderer copies it into that header on every callback; ``GET
   /api/session`` hands it to the command line. 403 otherwise.

Every response gets a Content-Security-Policy under which the Dash app runs (scripts
from this origin plus the hashes of Dash's own inline scripts), ``frame-ancestors
'none'``, X-Frame-Options, X-Content-Type-Options, Referrer-Policy and
Cross-Origin-Opener-Policy. Cookies are HttpOnly (the session) and SameSite=Strict, and
Secure when :attr:`AuthConfig.secure_cookies`.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from urllib.parse import urlsplit

from dashboard.auth import STATE_CHANGING, AuthConfig, identity, signing_key

log = logging.getLogger(__name__)

CSRF_COOKIE = "_csrf_token"  # the name Dash's renderer reads (dash.Dash csrf_token_name)
SESSION_COOKIE = "gpulens_session"
MAX_BODY_BYTES = 1 << 20
DASH_UPDATE = "/_dash-update-component"

BASE_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


def content_security_policy(script_hashes: list[str]) -> str:
    """The dashboard's CSP: own scripts and Dash's inline ones (by hash); plotly needs
    inline styles and data: images."""
    scripts = " ".join(["'self'", *script_hashes])
    return "; ".join((
        "default-src 'self'",
        f"script-src {scripts}",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ))


def origin_of(url: str) -> str | None:
    """``https://Example.com:443/x`` -> ``https://example.com`` (default ports dropped)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::\d{1,5})?")


def host_name(host_header: str) -> str | None:
    """The name part of a ``Host`` header (``[::1]:8050`` -> ``::1``), lowercased; None
    for anything but a name or address with an optional port."""
    m = _HOST.fullmatch(host_header or "")
    if m is None:
        return None
    return (m["v6"] or m["name"]).lower()


def host_allowed(config: AuthConfig, host_header: str) -> bool:
    name = host_name(host_header)
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True  # a literal address cannot be rebound to another one
    except ValueError:
        pass
    public = urlsplit(config.public_url).hostname if config.public_url else None
    return name == "localhost" or name == public or name in config.allowed_hosts


def origin_allowed(config: AuthConfig, origin: str | None, scheme: str, host: str) -> bool:
    """``origin`` is the public URL's or that of the Host the request was sent to."""
    if not origin:
        return False
    allowed = {origin_of(f"{scheme}://{host}")}
    if config.public_url:
        allowed.add(origin_of(config.public_url))
    return origin_of(origin) in allowed - {None}


def install(app, config: AuthConfig) -> None:
    """Add the checks and headers to the Dash ``app``'s Flask server (before auth's)."""
    from flask import jsonify, request
    from flask_wtf.csrf import CSRFError, CSRFProtect, generate_csrf

    server = app.server
    server.secret_key = signing_key(config)
    secure = config.secure_cookies
    server.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=secure,
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        WTF_CSRF_CHECK_DEFAULT=False,  # checked below, after Host and Origin
        WTF_CSRF_TIME_LIMIT=None,  # valid as long as the session
        WTF_CSRF_SSL_STRICT=False,  # the Origin check below covers HTTPS too
    )
    csrf = CSRFProtect(server)
    public = urlsplit(config.public_url).hostname if config.public_url else None
    names = sorted({"localhost", *config.allowed_hosts} | ({public} if public else set()))
    log.info("answering Host: IP addresses and %s (dashboard.public_url, "
             "dashboard.allowed_hosts); other names get 400", ", ".join(names))
    policy: list[str] = []  # computed at the first response: every inline script known

    def refuse(status: int, message: str):
        return jsonify({"error": message}), status

    @server.before_request
    def _check_request():
        if not host_allowed(config, request.host):
            return refuse(400, f"unknown Host {request.host[:80]!r}: add it to "
                               "dashboard.allowed_hosts or dashboard.public_url")
        if request.method not in STATE_CHANGING:
            return None
        origin = request.headers.get("Origin") or _referer_origin()
        if not origin_allowed(config, origin, request.scheme, request.host):
            return refuse(403, f"cross-origin request refused (Origin {str(origin)[:80]!r});"
                               " send it from the dashboard's own address")
        if request.path.startswith("/api/"):
            problem = _json_body_problem()
            if problem:
                return refuse(415 if "Content-Type" in problem else 400, problem)
        csrf.protect()
        return None

    @server.errorhandler(CSRFError)
    def _csrf_failed(exc):
        return refuse(403, f"CSRF check failed: {exc.description} (reload the page)")

    @server.errorhandler(413)
    def _too_large(_exc):
        return refuse(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")

    @server.route("/api/session")
    def _session():
        """The CSRF token (also set as a cookie) and who the caller is."""
        who = identity()
        return jsonify({"csrf_token": generate_csrf(), "user": who.user, "role": who.role})

    @server.after_request
    def _headers(response):
        if not policy:
            policy.append(content_security_policy(list(app.csp_hashes())))
        response.headers.setdefault("Content-Security-Policy", policy[0])
        for name, value in BASE_HEADERS.items():
            response.headers.setdefault(name, value)
        if secure:
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        if request.method == "GET" and (response.mimetype == "text/html"
                                        or request.path == "/api/session"):
            response.set_cookie(CSRF_COOKIE, generate_csrf(), samesite="Strict",
                                secure=secure, httponly=False, path="/")
        return response


def install_callback_check(app) -> None:
    """Answer a malformed Dash callback request 400 (Dash itself would fail with 500).
    Installed after the login check, so that nobody learns anything before logging in."""
    from flask import jsonify, request

    @app.server.before_request
    def _check_callback():
        if request.method == "POST" and request.path == DASH_UPDATE:
            problem = _dash_body_problem(app)
            if problem:
                return jsonify({"error": problem}), 400
        return None


def _referer_origin() -> str | None:
    from flask import request

    referer = request.headers.get("Referer")
    return origin_of(referer) if referer else None


def _json_body_problem() -> str:
    """Why the body of a state-changing API request is refused, or ''."""
    from flask import request

    if request.method == "DELETE" and not request.get_data():
        return ""
    if request.mimetype != "application/json":
        return (f"Content-Type {request.mimetype or 'none'!r} refused: send a JSON object "
                "with Content-Type: application/json")
    if not isinstance(request.get_json(silent=True), dict):
        return "the body must be a JSON object"
    return ""


def _dash_body_problem(app) -> str:
    """Why a Dash callback request is malformed (Dash itself would answer 500), or ''."""
    from flask import request

    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        return "Dash callback: the body must be a JSON object"
    if not isinstance(body.get("output"), str) or body["output"] not in app.callback_map:
        return "Dash callback: output is not a callback of this app"
    for key in ("inputs", "state", "changedPropIds"):
        if not isinstance(body.get(key, []), list):
            return f"Dash callback: {key} must be a list"
    if not isinstance(body.get("outputs"), dict | list):
        return "Dash callback: outputs must be an object or a list"
    return ""

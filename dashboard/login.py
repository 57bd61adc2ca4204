"""Logging in and out with a password: the form, the server-side sessions, throttling.

Installed by :func:`dashboard.auth.install` when ``dashboard.users`` is set (the routes
answer 403 without users: the dashboard then expects a proxy).

- ``/login``: a form (with the CSRF token); a right password starts a session whose
  random id, signed in the cookie, is looked up in :class:`SessionStore` (kept beside
  the database, so a restart keeps logins).
- ``/logout``: GET shows a form, POST (with the token) deletes the session, so a copied
  cookie stops working; a new password hash in the configuration also ends it.
- Failed logins are throttled per account and per client address with Flask-Limiter
  (``dashboard.login_limits``): past a limit the form answers 429 with Retry-After, even
  to the right password. Failures are logged with name and address, never the password.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import logging
import os
import secrets
import threading
import time
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from werkzeug.security import check_password_hash

from dashboard.auth import (
    MAX_NAME,
    PROXY_ONLY,
    SESSION_ID,
    SESSION_USER,
    AuthConfig,
    client_address,
    hash_password,
)

log = logging.getLogger(__name__)


@cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_hex(8))


def check_login(config: AuthConfig, name: str, password: str) -> bool:
    """True when ``name`` is a configured user and ``password`` matches its hash.

    werkzeug compares the derived keys with ``hmac.compare_digest``; an unknown user is
    checked against a dummy hash, so both answers cost one key derivation.
    """
    hashed = config.users.get(name)
    if hashed is None:
        check_password_hash(_dummy_hash(), password or "x")
        return False
    return check_password_hash(hashed, password or "")


class SessionStore:
    """Logged-in sessions held by the service: id -> (user, password fingerprint, expiry).

    The cookie carries only a random id (signed); logging out deletes it here, so a
    copied cookie stops working. With a ``path`` the sessions are kept in that file
    (mode 0600, ids stored as SHA-256 digests only) and outlive a restart. Expiry times
    are Unix seconds.
    """

    def __init__(self, lifetime_s: float, *, path: str | None = None, clock=time.time):
        self.lifetime_s = lifetime_s
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, tuple[str, str, float]] = self._load()

    @staticmethod
    def _digest(sid: str) -> str:
        return hashlib.sha256(sid.encode()).hexdigest()

    def _load(self) -> dict[str, tuple[str, str, float]]:
        if not self.path:
            return {}
        try:
            rows = json.loads(Path(self.path).read_text())
            now = self.clock()
            return {k: (str(u), str(f), float(e)) for k, (u, f, e) in rows.items()
                    if float(e) > now}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("ignoring the sessions file %s (%s): everyone logs in again",
                        self.path, exc)
            return {}

    def _save(self) -> None:
        """Write the sessions (called with the lock held); a failure only costs
        persistence."""
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(self._live, f)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot keep sessions in %s: %s", self.path, exc.strerror)

    def open(self, user: str, fingerprint: str) -> str:
        sid = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._live = {k: v for k, v in self._live.items() if v[2] > now}
            self._live[self._digest(sid)] = (user, fingerprint, now + self.lifetime_s)
            self._save()
        return sid

    def user(self, sid: str | None, fingerprint_of) -> str | None:
        """The session's user while it lives and the user's password hash is unchanged."""
        with self._lock:
            entry = self._live.get(self._digest(sid or ""))
        if entry is None or entry[2] <= self.clock():
            return None
        user, fingerprint, _ = entry
        if not hmac.compare_digest(fingerprint, fingerprint_of(user)):
            return None
        return user

    def revoke(self, sid: str | None) -> None:
        with self._lock:
            if self._live.pop(self._digest(sid or ""), None) is not None:
                self._save()

    def __len__(self) -> int:
        return len(self._live)


def _safe_next(target: str | None) -> str:
    """Only same-site paths: never redirect a login to another host."""
    parts = urlsplit(target or "/")
    if parts.scheme or parts.netloc or not (parts.path or "/").startswith("/"):
        return "/"
    path = parts.path or "/"
    if path.startswith("//") or "\\" in path:
        return "/"
    return path + (f"?{parts.query}" if parts.query else "")


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} · gpulens</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{{margin:0;font-family:Inter,system-ui,sans-serif;background:#f5f7fa;color:#1f2933}}
form{{max-width:320px;margin:12vh auto;background:#fff;border:1px solid #e4e7eb;
border-radius:12px;padding:28px;display:flex;flex-direction:column;gap:12px}}
h1{{font-size:20px;margin:0 0 8px}} label{{font-size:13px;color:#7b8794}}
input{{padding:9px 10px;border:1px solid #cbd2d9;border-radius:8px;font-size:14px}}
button{{padding:10px;border:0;border-radius:8px;background:#0f766e;color:#fff;
font-weight:600;font-size:14px;cursor:pointer}} .error{{color:#b42318;font-size:13px}}
</style></head><body>
<form method="post" action="{action}" id="login-form">
<h1>gpulens</h1>{error}
<input type="hidden" name="csrf_token" value="{csrf}">
{fields}
<button type="submit" id="login-submit">{title}</button>
</form></body></html>"""

LOGIN_FIELDS = """<input type="hidden" name="next" value="{next}">
<label for="username">User</label>
<input id="username" name="username" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>"""


def install(server, state) -> None:
    """Add /login and /logout to the Flask ``server``; ``state`` is auth's (config,
    sessions, password fingerprints)."""
    from flask import redirect, request, session
    from flask_limiter import Limiter
    from flask_wtf.csrf import generate_csrf

    config: AuthConfig = state.config

    def login_page(error: str = "", next_path: str = "/", status: int = 200):
        body = LOGIN_PAGE.format(
            title="Log in", action="/login", csrf=html.escape(generate_csrf(), quote=True),
            error=f'<p class="error" id="login-error">{html.escape(error)}</p>' if error else "",
            fields=LOGIN_FIELDS.format(next=html.escape(_safe_next(next_path), quote=True)),
        )
        return body, status, {"Content-Type": "text/html; charset=utf-8",
                              "Cache-Control": "no-store"}

    limiter = Limiter(lambda: client_address(config), app=server, storage_uri="memory://",
                      headers_enabled=True)

    def failed(response) -> bool:
        return response.status_code == 401

    def account_key() -> str:
        return "account:" + request.form.get("username", "")[:MAX_NAME]

    @server.route("/login", methods=["GET", "POST"])
    @limiter.limit(config.login_limits, key_func=account_key, methods=["POST"],
                   deduct_when=failed)
    @limiter.limit(config.login_limits, key_func=lambda: "address:" + client_address(config),
                   methods=["POST"], deduct_when=failed)
    def login():
        if not config.users:
            return PROXY_ONLY, 403
        if request.method == "GET":
            return login_page(next_path=request.args.get("next", "/"))
        name = request.form.get("username", "")[:MAX_NAME]
        target = request.form.get("next", "/")
        if not check_login(config, name, request.form.get("password", "")):
            log.warning("failed login for user %r from %s", name[:64], client_address(config))
            return login_page("Unknown user or wrong password.", target, 401)
        state.sessions.revoke(session.get(SESSION_ID))
        session.clear()
        session.permanent = True
        session[SESSION_USER] = name
        session[SESSION_ID] = state.sessions.open(name, state.fingerprint(name))
        log.info("login of %r from %s", name[:64], client_address(config))
        return redirect(_safe_next(target))

    @server.errorhandler(429)
    def _throttled(exc):
        log.warning("login throttled for %s (user %r): %s", client_address(config),
                    request.form.get("username", "")[:64], exc.description)
        body, _, headers = login_page(
            "Too many failed log-ins: wait a while, then try again.",
            request.form.get("next", "/"), 429)
        response = server.make_response((body, 429, headers))
        if exc.response is not None and "Retry-After" in exc.response.headers:
            response.headers["Retry-After"] = exc.response.headers["Retry-After"]
        return response

    @server.route("/logout", methods=["GET", "POST"])
    def logout():
        if request.method == "GET":  # a form, so that logging out needs the CSRF token
            body = LOGIN_PAGE.format(title="Log out", action="/logout", error="", fields="",
                                     csrf=html.escape(generate_csrf(), quote=True))
            return body, 200, {"Content-Type": "text/html; charset=utf-8",
                               "Cache-Control": "no-store"}
        state.sessions.revoke(session.get(SESSION_ID))
        session.clear()
        return redirect("/login" if config.users else "/")


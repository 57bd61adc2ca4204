"""Who may see the dashboard: an optional login, or a trusted reverse-proxy header.

Three modes, from :class:`AuthConfig` (settings ``dashboard.users``,
``dashboard.trusted_user_header``, ``dashboard.secret_key``, ``dashboard.session_hours``):

- neither users nor a header: open (the service binds 127.0.0.1 unless told otherwise);
- ``trusted_user_header``: a request carrying that header is the named user (the proxy
  authenticated it); without the header the login form decides, if users are configured,
  else the request is refused;
- ``users``: ``name:hash`` pairs; a login form at ``/login`` sets a signed session cookie.

Hashes are werkzeug's (``scrypt:...`` or ``pbkdf2:...``); :func:`hash_password` makes
one (the CLI exposes it as ``gpulens hash-password``). ``/healthz`` and the login page
stay open. Nothing here imports Dash: the settings module uses :func:`parse_users` as its
check.
"""

from __future__ import annotations

import html
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from werkzeug.security import check_password_hash, generate_password_hash

OPEN_PATHS = ("/healthz", "/login", "/logout")
HASH_METHODS = ("scrypt", "pbkdf2")
SESSION_USER = "gpulens_user"


def hash_password(password: str, *, method: str = "scrypt") -> str:
    """A salted hash of ``password`` for ``dashboard.users`` (``scrypt:32768:8:1$...``)."""
    if not password:
        raise ValueError("an empty password cannot be hashed; choose one")
    if method not in HASH_METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(HASH_METHODS)}")
    return generate_password_hash(password, method=method)


def parse_users(text: str) -> dict[str, str]:
    """``"alice:<hash>,bob:<hash>"`` -> ``{"alice": hash, ...}``; ValueError names the bad part."""
    users: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        name, sep, hashed = part.partition(":")
        name = name.strip()
        if not sep or not name or not hashed:
            raise ValueError(f"{part[:20]!r} is not name:hash")
        if not hashed.startswith(tuple(m + ":" for m in HASH_METHODS)):
            raise ValueError(f"user {name!r}: the hash must come from `gpulens hash-password`")
        if name in users:
            raise ValueError(f"user {name!r} is listed twice")
        users[name] = hashed
    return users


@dataclass(frozen=True)
class AuthConfig:
    users: dict[str, str] = field(default_factory=dict)  # name -> werkzeug hash
    trusted_user_header: str = ""
    secret_key: str = ""
    session_hours: float = 12.0

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.trusted_user_header)

    @classmethod
    def from_settings(cls, values) -> AuthConfig:
        """From a mapping with the ``dashboard.*`` settings (``gpulens.config.Config``)."""
        return cls(
            users=parse_users(values["dashboard.users"]),
            trusted_user_header=values["dashboard.trusted_user_header"].strip(),
            secret_key=values["dashboard.secret_key"],
            session_hours=values["dashboard.session_hours"],
        )


def check_login(config: AuthConfig, name: str, password: str) -> bool:
    """True when ``name`` is a configured user and ``password`` matches its hash."""
    hashed = config.users.get(name)
    if hashed is None:
        check_password_hash(hash_password("timing"), password or "x")  # same cost either way
        return False
    return check_password_hash(hashed, password or "")


def _safe_next(target: str | None) -> str:
    """Only same-site paths: never redirect a login to another host."""
    parts = urlsplit(target or "/")
    if parts.scheme or parts.netloc or not (parts.path or "/").startswith("/"):
        return "/"
    path = parts.path or "/"
    if path.startswith("//"):
        return "/"
    return path + (f"?{parts.query}" if parts.query else "")


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · gpulens</title>
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
<form method="post" action="/login" id="login-form">
<h1>gpulens</h1>{error}
<input type="hidden" name="next" value="{next}">
<label for="username">User</label>
<input id="username" name="username" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit" id="login-submit">Log in</button>
</form></body></html>"""


def install(server, config: AuthConfig) -> None:
    """Guard every route of the Flask ``server`` except OPEN_PATHS; add /login, /logout.

    Dash's own requests (``/_dash-*``) get 401 without a login; pages redirect to
    ``/login?next=<page>``.
    """
    from flask import redirect, request, session

    if not config.enabled:
        return
    server.secret_key = config.secret_key or secrets.token_hex(32)
    server.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=config.session_hours),
    )

    def login_page(error: str = "", next_path: str = "/", status: int = 200):
        body = LOGIN_PAGE.format(
            error=f'<p class="error" id="login-error">{html.escape(error)}</p>' if error else "",
            next=html.escape(_safe_next(next_path), quote=True),
        )
        return body, status, {"Content-Type": "text/html; charset=utf-8",
                               "Cache-Control": "no-store"}

    @server.before_request
    def _require_login():
        if request.path in OPEN_PATHS:
            return None
        if current_user() is not None:
            return None
        if request.path.startswith("/_dash-") or request.method != "GET":
            return {"error": "login required"}, 401
        if config.trusted_user_header and not config.users:
            return "Forbidden: this dashboard expects an authenticating proxy.\n", 403
        return redirect("/login?next=" + _quote(request.full_path.rstrip("?")))

    @server.route("/login", methods=["GET", "POST"])
    def login():
        if not config.users:
            return "Forbidden: this dashboard expects an authenticating proxy.\n", 403
        if request.method == "GET":
            return login_page(next_path=request.args.get("next", "/"))
        name = request.form.get("username", "")
        target = request.form.get("next", "/")
        if not check_login(config, name, request.form.get("password", "")):
            return login_page("Unknown user or wrong password.", target, 401)
        session.clear()
        session.permanent = True
        session[SESSION_USER] = name
        return redirect(_safe_next(target))

    @server.route("/logout")
    def logout():
        session.pop(SESSION_USER, None)
        return redirect("/login" if config.users else "/")

    server.extensions["gpulens_auth"] = config


def current_user() -> str | None:
    """The user of the current Flask request (proxy header or session), else None."""
    from flask import current_app, has_request_context, request, session

    if not has_request_context():
        return None
    config: AuthConfig | None = current_app.extensions.get("gpulens_auth")
    if config is None:
        return None
    if config.trusted_user_header:
        name = request.headers.get(config.trusted_user_header, "").strip()
        if name:
            return name
    name = session.get(SESSION_USER)
    return name if name in config.users else None


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")

"""Who may use the dashboard, and as what: a login, or a trusted reverse proxy; roles.

Modes, from :class:`AuthConfig` (the ``dashboard.*`` settings; docs/operations.md has the
whole security model):

- neither users nor a trusted header: open; everyone who reaches the service (it binds
  127.0.0.1 unless told otherwise) is an operator;
- ``users``: ``name:hash`` pairs; a login form at ``/login`` starts a server-side session
  (a random id in the signed cookie, looked up in :class:`dashboard.login.SessionStore`),
  so ``/logout`` revokes it and a changed password hash invalidates it;
- ``trusted_user_header``: the header names the user, but only on requests whose peer
  address is in ``trusted_proxies`` (default none: the header is ignored). The user must
  be configured (``users``, ``operators`` or ``viewers``) unless ``auto_provision``.

Roles: ``viewer`` reads; ``operator`` also acknowledges, silences and makes reports. A
user's role is ``operator`` when listed in ``operators`` or in one of the
``operator_groups`` (from the proxy's ``groups_header``), ``viewer`` when listed in
``viewers``, else ``default_role``.

The login form, the sessions and the throttling of failed logins are in
:mod:`dashboard.login`. Hashes are werkzeug's (``scrypt:...`` or ``pbkdf2:...``, compared
in constant time); :func:`hash_password` makes one (``gpulens hash-password``). Host,
Origin and CSRF checks and the response headers live in :mod:`dashboard.web_security`.
Nothing here imports Dash.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from werkzeug.security import generate_password_hash

from gpulens.settings import default

if TYPE_CHECKING:
    from dashboard.login import SessionStore

log = logging.getLogger(__name__)

OPEN_PATHS = ("/healthz", "/metrics", "/login", "/logout", "/api/session")  # /metrics
# checks service.metrics_public itself (gpulens/exporter.py)
HASH_METHODS = ("scrypt", "pbkdf2")
ROLES = ("viewer", "operator")
SESSION_USER = "gpulens_user"
SESSION_ID = "gpulens_sid"
MAX_NAME = 256  # characters of a user or group name
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


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


def parse_names(text: str) -> frozenset[str]:
    """``"alice, bob"`` -> ``{"alice", "bob"}``; ValueError for a name with control
    characters or longer than MAX_NAME."""
    names = set()
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        if len(part) > MAX_NAME or not part.isprintable():
            raise ValueError(f"{part[:20]!r} is not a name")
        names.add(part)
    return frozenset(names)


def parse_networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``"127.0.0.1, 10.0.0.0/8"`` -> networks; ValueError names the bad part."""
    nets = []
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        try:
            nets.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part[:40]!r} is not an IP address or CIDR network") from None
    return tuple(nets)


def parse_limits(text: str) -> list:
    """``"5 per minute; 20 per hour"`` -> ``limits`` items; ValueError when empty or bad."""
    from limits import parse_many

    items = parse_many(text or "")
    if not items:
        raise ValueError("no limit given")
    return items


@dataclass(frozen=True)
class AuthConfig:
    users: dict[str, str] = field(default_factory=dict)  # name -> werkzeug hash
    trusted_user_header: str = ""
    secret_key: str = ""
    state_path: str = ""  # prefix of the files keeping the key and sessions; "": memory
    session_hours: float = default("dashboard.session_hours")
    trusted_proxies: tuple = ()  # ipaddress networks
    auto_provision: bool = False
    operators: frozenset[str] = frozenset()
    viewers: frozenset[str] = frozenset()
    default_role: str = default("dashboard.default_role")
    groups_header: str = ""
    operator_groups: frozenset[str] = frozenset()
    public_url: str = ""
    allowed_hosts: frozenset[str] = frozenset()
    cookie_secure: str = default("dashboard.cookie_secure")  # auto | true | false
    login_limits: str = default("dashboard.login_limits")

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.trusted_user_header)

    @property
    def proxy_trusted(self) -> bool:
        """True when a proxy header can name the user (a header and proxy addresses)."""
        return bool(self.trusted_user_header and self.trusted_proxies)

    @property
    def secure_cookies(self) -> bool:
        if self.cookie_secure == "auto":
            return self.public_url.startswith("https://")
        return self.cookie_secure == "true"

    def known(self, name: str) -> bool:
        return name in self.users or name in self.operators or name in self.viewers

    def role_of(self, name: str, groups: frozenset[str] = frozenset()) -> str:
        if name in self.operators or groups & self.operator_groups:
            return "operator"
        if name in self.viewers:
            return "viewer"
        return self.default_role

    def from_trusted_proxy(self, address: str | None) -> bool:
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        return any(ip in net for net in self.trusted_proxies)

    @classmethod
    def from_settings(cls, values) -> AuthConfig:
        """From a mapping with the ``dashboard.*`` settings (``gpulens.config.Config``)."""
        return cls(
            users=parse_users(values["dashboard.users"]),
            trusted_user_header=values["dashboard.trusted_user_header"].strip(),
            secret_key=values["dashboard.secret_key"],
            state_path=state_path_for(values["service.db"]),
            session_hours=values["dashboard.session_hours"],
            trusted_proxies=parse_networks(values["dashboard.trusted_proxies"]),
            auto_provision=values["dashboard.auto_provision"],
            operators=parse_names(values["dashboard.operators"]),
            viewers=parse_names(values["dashboard.viewers"]),
            default_role=values["dashboard.default_role"],
            groups_header=values["dashboard.groups_header"].strip(),
            operator_groups=parse_names(values["dashboard.operator_groups"]),
            public_url=values["dashboard.public_url"],
            allowed_hosts=frozenset(h.lower() for h in
                                    parse_names(values["dashboard.allowed_hosts"])),
            cookie_secure=values["dashboard.cookie_secure"],
            login_limits=values["dashboard.login_limits"],
        )


PROXY_ONLY = "Forbidden: this dashboard expects an authenticating proxy.\n"


def state_path_for(db: str) -> str:
    """Where the service keeps its signing key and sessions: beside the database file."""
    return "" if db in ("", ":memory:") else f"{db}.auth"


def signing_key(config: AuthConfig) -> str:
    """``dashboard.secret_key``, else a random key kept in ``<state_path>.key`` (mode
    0600), so sessions and CSRF tokens outlive a restart; else one per process."""
    if config.secret_key:
        return config.secret_key
    if not config.state_path:
        return secrets.token_hex(32)
    path = Path(config.state_path + ".key")
    try:
        key = path.read_text().strip()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    key = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key)
    except OSError as exc:
        log.warning("cannot keep the session key in %s (%s): logins end at a restart",
                    path, exc.strerror)
    return key


@dataclass(frozen=True)
class Identity:
    user: str | None  # None: nobody (auth on, no login)
    role: str | None
    refused: str = ""  # why a proxy-named user is refused


def client_address(config: AuthConfig) -> str:
    """The client's address: the peer, or the last X-Forwarded-For hop a trusted proxy
    added (so throttling by address sees users, not the proxy)."""
    from flask import request

    peer = request.remote_addr or ""
    forwarded = request.headers.get("X-Forwarded-For", "")
    if forwarded and config.from_trusted_proxy(peer):
        return forwarded.split(",")[-1].strip()[:64] or peer
    return peer


_warned_peers: set[str] = set()


def _proxy_identity(config: AuthConfig) -> Identity | None:
    from flask import request

    if not config.trusted_user_header:
        return None
    raw = request.headers.get(config.trusted_user_header)
    if raw is None:
        return None
    peer = request.remote_addr or ""
    if not config.from_trusted_proxy(peer):
        if peer not in _warned_peers and len(_warned_peers) < 1000:
            _warned_peers.add(peer)
            log.warning("ignoring %s from %s: not in dashboard.trusted_proxies",
                        config.trusted_user_header, peer)
        return None
    name = raw.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        return Identity(None, None, "the proxy sent no usable user name")
    if not config.known(name) and not config.auto_provision:
        log.warning("refused proxy user %r from %s: not a configured user", name[:64], peer)
        return Identity(None, None, "the proxy's user is not a gpulens user: list it in "
                                    "dashboard.operators or dashboard.viewers")
    groups = frozenset()
    if config.groups_header:
        groups = parse_names_lenient(request.headers.get(config.groups_header, ""))
    return Identity(name, config.role_of(name, groups))


def parse_names_lenient(text: str) -> frozenset[str]:
    """Names from a header: what :func:`parse_names` accepts, bad parts dropped."""
    return frozenset(p.strip() for p in text.split(",")
                     if p.strip() and len(p.strip()) <= MAX_NAME and p.strip().isprintable())


def identity() -> Identity:
    """Who sends the current Flask request, and with which role (cached per request)."""
    from flask import current_app, g, has_request_context, session

    if not has_request_context():
        return Identity(None, None)
    cached = g.get("gpulens_identity")
    if cached is not None:
        return cached
    state = current_app.extensions.get("gpulens_auth")
    if state is None or not state.config.enabled:
        found = Identity(None, "operator")
    else:
        config = state.config
        found = _proxy_identity(config)
        if found is None:
            name = state.sessions.user(session.get(SESSION_ID), state.fingerprint)
            if name is not None and name == session.get(SESSION_USER):
                found = Identity(name, config.role_of(name))
            else:
                found = Identity(None, None)
    g.gpulens_identity = found
    return found


def current_user() -> str | None:
    """The user of the current Flask request (trusted proxy header or session), else None."""
    return identity().user


def current_role() -> str | None:
    """``operator`` or ``viewer`` for the current request; None when nobody is logged in.
    Without a login configured everyone is an operator."""
    return identity().role


def can_operate() -> bool:
    """May the current request acknowledge, silence or make reports?"""
    return current_role() == "operator"


@dataclass
class _State:
    config: AuthConfig
    sessions: SessionStore  # dashboard.login's
    key: bytes

    def fingerprint(self, user: str) -> str:
        """A keyed digest of the user's password hash: a new hash ends old sessions."""
        hashed = self.config.users.get(user, "")
        return hmac.new(self.key, hashed.encode(), hashlib.sha256).hexdigest()


def install(server, config: AuthConfig) -> None:
    """Guard every route of the Flask ``server`` except OPEN_PATHS; add /login, /logout.

    Dash's own requests (``/_dash-*``) and the API get 401 without a login; pages
    redirect to ``/login?next=<page>``. State-changing API requests need the operator
    role (403 otherwise). Call after :func:`dashboard.web_security.install`, which sets
    the secret key, the cookie flags and the CSRF check.
    """
    from flask import jsonify, redirect, request

    from dashboard import login

    sessions = login.SessionStore(
        config.session_hours * 3600,
        path=config.state_path + ".sessions" if config.state_path and config.enabled else None)
    state = _State(config, sessions, key=(server.secret_key or secrets.token_hex(32)).encode())
    server.extensions["gpulens_auth"] = state
    if not config.enabled:  # open: everyone is an operator (see identity())
        return
    if config.trusted_user_header and not config.trusted_proxies:
        log.warning("dashboard.trusted_user_header %s is ignored: dashboard.trusted_proxies "
                    "is empty", config.trusted_user_header)
    elif config.proxy_trusted:
        log.info("trusting %s from %s", config.trusted_user_header,
                 ", ".join(map(str, config.trusted_proxies)))
    server.config.update(PERMANENT_SESSION_LIFETIME=timedelta(hours=config.session_hours))

    @server.before_request
    def _require_login():
        who = identity()
        if who.refused:
            return jsonify({"error": f"Forbidden: {who.refused}"}), 403
        if request.path in OPEN_PATHS:
            return None
        if who.user is None:
            if request.path.startswith(("/_dash-", "/api/")) or request.method != "GET":
                return jsonify({"error": "login required"}), 401
            if not config.users:
                return PROXY_ONLY, 403
            return redirect("/login?next=" + _quote(request.full_path.rstrip("?")))
        if (request.method in STATE_CHANGING and request.path.startswith("/api/")
                and who.role != "operator"):
            return jsonify({"error": f"Forbidden: {who.user} is a {who.role}; "
                                     "this needs the operator role"}), 403
        return None

    login.install(server, state)



def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")

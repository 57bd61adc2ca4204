"""Dashboard access: password hashes, the users setting, login, the trusted proxy header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashboard import auth
from dashboard import login as login_mod
from gpulens.config import ConfigError, load
from tests.support.dash_seed import NOW, seed_overview
from tests.support.web import csrf_headers, form_token
from warehouse import Warehouse

HASH = auth.hash_password("s3cret")


def test_hash_password_is_salted_scrypt_and_verifies():
    assert HASH.startswith("scrypt:") and HASH != auth.hash_password("s3cret")
    assert auth.hash_password("pw", method="pbkdf2").startswith("pbkdf2:")
    with pytest.raises(ValueError, match="empty password"):
        auth.hash_password("")
    config = auth.AuthConfig(users={"alice": HASH})
    assert login_mod.check_login(config, "alice", "s3cret")
    assert not login_mod.check_login(config, "alice", "wrong")
    assert not login_mod.check_login(config, "mallory", "s3cret")


def test_parse_users_names_the_bad_part():
    assert auth.parse_users(f"alice:{HASH}, bob:{HASH}") == {"alice": HASH, "bob": HASH}
    assert auth.parse_users("") == {}
    for bad, message in (("alice", "not name:hash"), ("alice:plaintext", "hash-password"),
                         (f"a:{HASH},a:{HASH}", "twice")):
        with pytest.raises(ValueError, match=message):
            auth.parse_users(bad)


def test_users_setting_is_checked_at_load(tmp_path):
    cfg = load(None, env={"GPULENS_DASHBOARD_USERS": f"alice:{HASH}"})
    assert auth.AuthConfig.from_settings(cfg).users == {"alice": HASH}
    with pytest.raises(ConfigError, match="dashboard.users"):
        load(None, env={"GPULENS_DASHBOARD_USERS": "alice:hunter2"})


def test_safe_next_never_leaves_the_site():
    assert login_mod._safe_next("/jobs/1?range=7d") == "/jobs/1?range=7d"
    for evil in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        assert login_mod._safe_next(evil) == "/"


def test_names_networks_and_limits_name_the_bad_part():
    assert auth.parse_names(" alice, bob ,,") == {"alice", "bob"}
    assert [str(n) for n in auth.parse_networks("127.0.0.1, 10.0.0.0/8, ::1")] == [
        "127.0.0.1/32", "10.0.0.0/8", "::1/128"]
    for parser, bad, message in ((auth.parse_networks, "10.0.0.0/33", "'10.0.0.0/33'"),
                                 (auth.parse_networks, "proxy.example", "proxy.example"),
                                 (auth.parse_names, "a\x00b", "not a name"),
                                 (auth.parse_names, "x" * 300, "not a name")):
        with pytest.raises(ValueError, match=message):
            parser(bad)
    assert len(auth.parse_limits("5 per minute; 20 per hour")) == 2
    for bad in ("", "lots", "5 per fortnight"):
        with pytest.raises(ValueError):
            auth.parse_limits(bad)


@pytest.mark.parametrize("env, key", [
    ({"GPULENS_DASHBOARD_TRUSTED_PROXIES": "10.0.0.0/33"}, "dashboard.trusted_proxies"),
    ({"GPULENS_DASHBOARD_DEFAULT_ROLE": "admin"}, "dashboard.default_role"),
    ({"GPULENS_DASHBOARD_PUBLIC_URL": "gpulens.example.com"}, "dashboard.public_url"),
    ({"GPULENS_DASHBOARD_LOGIN_LIMITS": "often"}, "dashboard.login_limits"),
    ({"GPULENS_DASHBOARD_COOKIE_SECURE": "maybe"}, "dashboard.cookie_secure"),
])
def test_security_settings_are_checked_at_load(env, key):
    with pytest.raises(ConfigError, match=key):
        load(None, env=env)


def test_roles_from_lists_groups_and_the_default():
    config = auth.AuthConfig(users={"alice": HASH, "bob": HASH}, operators=frozenset({"alice"}),
                             viewers=frozenset({"dave"}), operator_groups=frozenset({"sre"}))
    assert config.role_of("alice") == "operator"
    assert config.role_of("bob") == "viewer"  # default_role
    assert config.role_of("dave", frozenset({"sre"})) == "operator"
    assert auth.AuthConfig(default_role="operator").role_of("zed") == "operator"
    assert config.known("dave") and not config.known("mallory")
    assert config.from_trusted_proxy("127.0.0.1") is False  # no proxies configured
    proxied = auth.AuthConfig(trusted_proxies=auth.parse_networks("10.1.0.0/16"))
    assert proxied.from_trusted_proxy("10.1.2.3") and not proxied.from_trusted_proxy("10.2.0.1")
    assert not proxied.from_trusted_proxy("not an address")


@pytest.mark.parametrize("peer, forwarded, expected", [
    ("10.1.0.5", "203.0.113.9", "203.0.113.9"),  # the proxy's word for its client
    ("10.1.0.5", "6.6.6.6, 203.0.113.9", "203.0.113.9"),  # the hop the proxy added
    ("10.1.0.5", "", "10.1.0.5"),
    ("192.0.2.7", "203.0.113.9", "192.0.2.7"),  # anyone else's header is ignored
])
def test_throttling_address_behind_a_trusted_proxy(peer, forwarded, expected):
    from flask import Flask

    config = auth.AuthConfig(trusted_proxies=auth.parse_networks("10.1.0.0/16"))
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    with Flask("t").test_request_context(environ_base={"REMOTE_ADDR": peer},
                                         headers=headers):
        assert auth.client_address(config) == expected


def test_session_store_revokes_expires_and_follows_the_password():
    clock = [0.0]
    store = login_mod.SessionStore(60, clock=lambda: clock[0])
    fingerprints = {"alice": "fp1"}
    sid = store.open("alice", "fp1")
    assert store.user(sid, fingerprints.get) == "alice"
    assert store.user("forged", fingerprints.get) is None
    fingerprints["alice"] = "fp2"  # a new password hash
    assert store.user(sid, fingerprints.get) is None
    fingerprints["alice"] = "fp1"
    clock[0] = 61
    assert store.user(sid, fingerprints.get) is None  # expired
    sid = store.open("alice", "fp1")
    store.revoke(sid)
    assert store.user(sid, fingerprints.get) is None


def test_sessions_and_the_key_outlive_a_restart_in_files_only_the_service_reads(tmp_path):
    import json
    import stat

    path = str(tmp_path / "w.duckdb.auth.sessions")
    first = login_mod.SessionStore(3600, path=path)
    kept, ended = first.open("alice", "fp"), first.open("bob", "fp")
    first.revoke(ended)
    second = login_mod.SessionStore(3600, path=path)  # the next start
    assert second.user(kept, lambda _: "fp") == "alice"
    assert second.user(ended, lambda _: "fp") is None
    text = Path(path).read_text()
    assert kept not in text and len(json.loads(text)) == 1  # digests, not usable ids
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    Path(path).write_text("{not json")
    assert len(login_mod.SessionStore(3600, path=path)) == 0  # a bad file costs the logins
    config = auth.AuthConfig(state_path=str(tmp_path / "w.duckdb.auth"))
    key = auth.signing_key(config)
    assert auth.signing_key(config) == key and len(key) == 64
    assert stat.S_IMODE((tmp_path / "w.duckdb.auth.key").stat().st_mode) == 0o600
    assert auth.signing_key(auth.AuthConfig(secret_key="set", state_path=config.state_path)
                            ) == "set"
    assert auth.signing_key(auth.AuthConfig()) != auth.signing_key(auth.AuthConfig())
    assert auth.state_path_for(":memory:") == ""


@pytest.fixture(scope="module")
def guarded():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_overview(wh)
        config = auth.AuthConfig(users={"alice": HASH, "bob": HASH},
                                 trusted_user_header="X-Forwarded-User",
                                 trusted_proxies=auth.parse_networks("127.0.0.1"),
                                 secret_key="test-key", operators=frozenset({"alice"}))
        app = create_app(wh, now=lambda: NOW, auth_config=config)
        app.server.add_url_rule("/healthz", "healthz", lambda: {"status": "ok"})
        client = app.server.test_client()
        assert _login(client, "alice", "s3cret").status_code == 302
        assert client.get("/_dash-dependencies").status_code == 200  # claims the callbacks
        yield app


def _login(client, name, password, target="/"):
    token = form_token(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"username": name, "password": password, "next": target,
                                       "csrf_token": token},
                       headers={"Origin": "http://localhost"})


def test_pages_need_a_login_but_healthz_does_not(guarded):
    client = guarded.server.test_client()
    for path in ("/", "/utilization", "/jobs/1001?range=7d"):
        resp = client.get(path)
        assert resp.status_code == 302, path
        assert resp.headers["Location"].startswith("/login?next=")
    assert client.get("/_dash-layout").status_code == 401
    assert client.post("/_dash-update-component", json={},
                       headers=csrf_headers(client)).status_code == 401
    assert client.get("/healthz").status_code == 200
    form = client.get("/login?next=%22%3E%3Cscript%3E")
    assert form.status_code == 200 and b"<script>" not in form.data


def test_login_logout_and_wrong_password(guarded):
    client = guarded.server.test_client()
    bad = _login(client, "alice", "nope")
    assert bad.status_code == 401 and b"wrong password" in bad.data
    ok = _login(client, "alice", "s3cret", "/thermal?rack=r01")
    assert ok.status_code == 302 and ok.headers["Location"] == "/thermal?rack=r01"
    assert client.get("/thermal").status_code == 200
    layout = client.get("/_dash-layout")
    assert layout.status_code == 200 and b"alice" in layout.data  # the user badge
    badge = json.dumps(layout.get_json())
    assert '"operator"' in badge and '"action": "/logout", "method": "POST"' in badge
    assert client.get("/logout").status_code == 200  # a form: GET changes nothing
    assert client.get("/thermal").status_code == 200
    out = client.post("/logout", data={"csrf_token": form_token(
        client.get("/logout").get_data(as_text=True))}, headers={"Origin": "http://localhost"})
    assert out.status_code == 302
    assert client.get("/").status_code == 302


def test_a_new_password_hash_ends_old_sessions(guarded):
    import dataclasses

    client = guarded.server.test_client()
    assert _login(client, "alice", "s3cret").status_code == 302
    assert client.get("/api/session").get_json()["user"] == "alice"
    state = guarded.server.extensions["gpulens_auth"]
    old = state.config
    state.config = dataclasses.replace(old, users={"alice": auth.hash_password("n3w")})
    try:
        assert client.get("/api/session").get_json()["user"] is None
    finally:
        state.config = old


def test_trusted_proxy_header_names_the_user(guarded):
    client = guarded.server.test_client()
    resp = client.get("/_dash-layout", headers={"X-Forwarded-User": "alice"})
    assert resp.status_code == 200
    resp = client.get("/_dash-layout", headers={"X-Forwarded-User": "<b>bob</b>"})
    assert resp.status_code == 403  # not a configured user
    assert b"<b>bob</b>" not in resp.data  # the name is logged, not echoed


def _click_ack(client, alert_id: str):
    """The Thermal page's acknowledge button, as Dash's renderer posts its click."""
    from dashboard import ids

    button = {"alert": alert_id, "type": ids.ALERT_ACK}
    body = {"output": f"{ids.THERMAL_ALERT_MSG}.children",
            "outputs": {"id": ids.THERMAL_ALERT_MSG, "property": "children"},
            "inputs": [[{"id": button, "property": "n_clicks", "value": 1}], []],
            "changedPropIds": [json.dumps(button, separators=(",", ":")) + ".n_clicks"],
            "state": []}
    resp = client.post("/_dash-update-component", json=body, headers=csrf_headers(client))
    assert resp.status_code == 200, resp.data
    return resp.get_json()["response"][ids.THERMAL_ALERT_MSG]["children"]


def test_a_viewer_cannot_acknowledge_from_the_thermal_page(guarded):
    viewer = guarded.server.test_client()
    assert _login(viewer, "bob", "s3cret").status_code == 302
    assert "bob is a viewer" in _click_ack(viewer, "a1")
    operator = guarded.server.test_client()
    assert _login(operator, "alice", "s3cret").status_code == 302
    assert _click_ack(operator, "no-such-alert") == "That alert no longer exists."


def test_cookies_are_secure_behind_a_tls_proxy():
    """Last in the module: its app replaces the guarded one (one live app per process)."""
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        config = auth.AuthConfig(public_url="https://gpulens.example.com/")
        assert config.secure_cookies
        app = create_app(wh, now=lambda: NOW, auth_config=config)
        resp = app.server.test_client().get("/", headers={"Host": "gpulens.example.com"})
        cookies = resp.headers.getlist("Set-Cookie")
        assert cookies and all("Secure" in c and "SameSite=Strict" in c for c in cookies)
        assert "max-age" in resp.headers["Strict-Transport-Security"]
        # the public host is allowed; its origin may post
        post = app.server.test_client().post(
            "/api/alerts/silences", json={}, headers={"Host": "gpulens.example.com",
                                                      "Origin": "https://evil.example.com"})
        assert post.status_code == 403
    assert not auth.AuthConfig(public_url="https://x/", cookie_secure="false").secure_cookies
    assert auth.AuthConfig(cookie_secure="true").secure_cookies

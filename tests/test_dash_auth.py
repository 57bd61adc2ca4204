"""Dashboard access: password hashes, the users setting, login, the trusted proxy header."""

from __future__ import annotations

import pytest

from dashboard import auth
from gpulens.config import ConfigError, load
from tests.support.dash_seed import NOW, seed_overview
from warehouse import Warehouse

HASH = auth.hash_password("s3cret")


def test_hash_password_is_salted_scrypt_and_verifies():
    assert HASH.startswith("scrypt:") and HASH != auth.hash_password("s3cret")
    assert auth.hash_password("pw", method="pbkdf2").startswith("pbkdf2:")
    with pytest.raises(ValueError, match="empty password"):
        auth.hash_password("")
    config = auth.AuthConfig(users={"alice": HASH})
    assert auth.check_login(config, "alice", "s3cret")
    assert not auth.check_login(config, "alice", "wrong")
    assert not auth.check_login(config, "mallory", "s3cret")


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
    assert auth._safe_next("/jobs/1?range=7d") == "/jobs/1?range=7d"
    for evil in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        assert auth._safe_next(evil) == "/"


@pytest.fixture(scope="module")
def guarded():
    from dashboard.app import create_app

    with Warehouse(":memory:") as wh:
        seed_overview(wh)
        config = auth.AuthConfig(users={"alice": HASH}, trusted_user_header="X-Forwarded-User",
                                 secret_key="test-key")
        app = create_app(wh, now=lambda: NOW, auth_config=config)
        app.server.add_url_rule("/healthz", "healthz", lambda: {"status": "ok"})
        client = app.server.test_client()
        client.post("/login", data={"username": "alice", "password": "s3cret"})
        assert client.get("/_dash-dependencies").status_code == 200  # claims the callbacks
        yield app


def test_pages_need_a_login_but_healthz_does_not(guarded):
    client = guarded.server.test_client()
    for path in ("/", "/utilization", "/jobs/1001?range=7d"):
        resp = client.get(path)
        assert resp.status_code == 302, path
        assert resp.headers["Location"].startswith("/login?next=")
    assert client.get("/_dash-layout").status_code == 401
    assert client.post("/_dash-update-component", json={}).status_code == 401
    assert client.get("/healthz").status_code == 200
    form = client.get("/login?next=%22%3E%3Cscript%3E")
    assert form.status_code == 200 and b"<script>" not in form.data


def test_login_logout_and_wrong_password(guarded):
    client = guarded.server.test_client()
    bad = client.post("/login", data={"username": "alice", "password": "nope", "next": "/"})
    assert bad.status_code == 401 and b"wrong password" in bad.data
    ok = client.post("/login", data={"username": "alice", "password": "s3cret",
                                     "next": "/thermal?rack=r01"})
    assert ok.status_code == 302 and ok.headers["Location"] == "/thermal?rack=r01"
    assert client.get("/thermal").status_code == 200
    layout = client.get("/_dash-layout")
    assert layout.status_code == 200 and b"alice" in layout.data  # the user badge
    client.get("/logout")
    assert client.get("/").status_code == 302


def test_trusted_proxy_header_names_the_user(guarded):
    client = guarded.server.test_client()
    resp = client.get("/_dash-layout", headers={"X-Forwarded-User": "<b>bob</b>"})
    assert resp.status_code == 200
    assert b"<b>bob</b>" not in resp.data  # JSON-escaped text, rendered as text by React

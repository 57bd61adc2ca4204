"""Issue #13: the dashboard and its API let in only whom they should.

One test per attack of the issue, each over real HTTP against `gpulens demo` running in
a subprocess: an open service (no login, as the demo runs) and one with password users,
a trusted proxy at 127.0.0.2 and roles. Loopback addresses other than 127.0.0.1 stand
for other machines (Linux routes all of 127/8 to lo).
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlencode, urlsplit

import pytest
import requests

from dashboard import auth
from tests.support.integration import ServiceProcess
from tests.support.web import api_headers, form_token, login

pytestmark = pytest.mark.integration

PROXY = "127.0.0.2"  # dashboard.trusted_proxies
ELSEWHERE = "127.0.0.3"  # a client that is not the proxy
SILENCE = {"rack": "r01", "duration": "1h", "comment": "fan swap", "created_by": "t"}
SECURITY_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options",
                    "Referrer-Policy")


def raw(base: str, method: str, path: str, *, headers: dict | None = None,
        body: bytes | None = None, source: str = "127.0.0.1"):
    """(status, headers, parsed JSON or text) of one request sent from ``source``."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read().decode()
        try:
            data = json.loads(data)
        except ValueError:
            pass
        return resp.status, resp.headers, data
    finally:
        conn.close()


def _silences(base: str, session=None) -> list:
    return (session or requests).get(base + "/api/alerts/silences", timeout=10).json()[
        "silences"]


@pytest.fixture(scope="module")
def open_service(tmp_path_factory):
    """The demo as it runs out of the box: no login, bound to 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("open")
    svc = ServiceProcess(tmp / "demo.duckdb", "--history-days", "0", "--racks", "1")
    yield svc.url
    svc.stop()


@pytest.fixture(scope="module")
def guarded_service(tmp_path_factory):
    """Password users alice (operator) and bob (viewer); proxy-only users dave (viewer)
    and members of group sre (operators); a trusted proxy at 127.0.0.2."""
    tmp = tmp_path_factory.mktemp("guarded")
    users = ",".join(f"{name}:{auth.hash_password(pw, method='pbkdf2')}"
                     for name, pw in (("alice", "alice-pw"), ("bob", "bob-pw"),
                                      ("erin", "erin-pw")))
    config = tmp / "gpulens.toml"
    config.write_text(f"""
[dashboard]
users = "{users}"
operators = "alice"
viewers = "bob, dave, carol"
trusted_user_header = "X-Forwarded-User"
groups_header = "X-Forwarded-Groups"
operator_groups = "sre"
trusted_proxies = "{PROXY}/32"
login_limits = "3 per minute"
""")
    svc = ServiceProcess(tmp / "demo.duckdb", "--config", str(config), "--history-days", "0",
                         "--racks", "1")
    yield svc
    svc.stop()


# -- login bypass through the proxy header -------------------------------------------

def test_spoofed_user_header_from_a_non_proxy_address_is_ignored(guarded_service):
    base = guarded_service.url
    for source in ("127.0.0.1", ELSEWHERE):
        status, _, _ = raw(base, "GET", "/api/alerts", source=source,
                           headers={"X-Forwarded-User": "alice"})
        assert status == 401, source
        status, _, _ = raw(base, "GET", "/_dash-layout", source=source,
                           headers={"X-Forwarded-User": "alice"})
        assert status == 401, source


def test_user_header_from_the_configured_proxy_is_accepted(guarded_service):
    base = guarded_service.url
    status, _, who = raw(base, "GET", "/api/session", source=PROXY,
                         headers={"X-Forwarded-User": "dave"})
    assert status == 200 and (who["user"], who["role"]) == ("dave", "viewer")
    status, _, who = raw(base, "GET", "/api/session", source=PROXY,
                         headers={"X-Forwarded-User": "carol", "X-Forwarded-Groups": "ml,sre"})
    assert (who["user"], who["role"]) == ("carol", "operator")  # role from the group
    status, _, page = raw(base, "GET", "/api/alerts", source=PROXY,
                          headers={"X-Forwarded-User": "dave"})
    assert status == 200 and "alerts" in page
    # a name the proxy vouches for but gpulens does not know: refused (no auto-provision)
    status, _, body = raw(base, "GET", "/api/alerts", source=PROXY,
                          headers={"X-Forwarded-User": "mallory"})
    assert status == 403 and "not a gpulens user" in body["error"]


def test_proxy_viewer_cannot_silence(guarded_service):
    base = guarded_service.url
    hdr = {"X-Forwarded-User": "dave"}
    # the token is bound to the session cookie; take both from the proxy's answer
    status, headers, who = raw(base, "GET", "/api/session", source=PROXY, headers=hdr)
    cookies = "; ".join(c.split(";")[0] for c in headers.get_all("Set-Cookie"))
    status, _, body = raw(base, "POST", "/api/alerts/silences", source=PROXY,
                          body=json.dumps(SILENCE).encode(),
                          headers={**hdr, "Cookie": cookies, "Origin": base,
                                   "X-CSRFToken": who["csrf_token"],
                                   "Content-Type": "application/json"})
    assert status == 403 and "operator" in body["error"]
    assert requests.get(base + "/api/alerts/silences", timeout=10).status_code == 401


# -- cross-site requests and DNS rebinding -------------------------------------------

def test_cross_origin_post_is_refused(open_service):
    base = open_service
    for origin in ("http://evil.example", "http://127.0.0.1:1", "null"):
        resp = requests.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                             headers={"Origin": origin})
        assert resp.status_code == 403 and "cross-origin" in resp.json()["error"], origin
    # no Origin, a foreign Referer; neither
    for headers in ({"Referer": "http://evil.example/page"}, {}):
        resp = requests.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                             headers=headers)
        assert resp.status_code == 403
    assert _silences(base) == []


def test_text_plain_post_is_refused(open_service):
    base = open_service
    headers = {"Origin": base, "Content-Type": "text/plain"}  # what a <form> or fetch can send
    resp = requests.post(base + "/api/alerts/nonexistent/ack", data=json.dumps({"by": "x"}),
                         headers=headers, timeout=10)
    assert resp.status_code == 415 and "application/json" in resp.json()["error"]
    resp = requests.post(base + "/api/alerts/silences", data=json.dumps(SILENCE),
                         headers=headers, timeout=10)
    assert resp.status_code == 415
    assert _silences(base) == []


def test_post_without_the_csrf_token_is_refused(open_service):
    base = open_service
    resp = requests.post(base + "/api/alerts/silences", json=SILENCE,
                         headers={"Origin": base}, timeout=10)
    assert resp.status_code == 403 and "CSRF" in resp.json()["error"]
    resp = requests.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                         headers={"Origin": base, "X-CSRFToken": "forged"})
    assert resp.status_code == 403
    assert _silences(base) == []


def test_same_origin_post_with_token_works_and_the_cli_too(open_service):
    from click.testing import CliRunner

    from gpulens.cli_alerts import alerts as alerts_cli

    base = open_service
    session = requests.Session()
    resp = session.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                        headers=api_headers(session, base))
    assert resp.status_code == 201
    sid = resp.json()["silence"]["silence_id"]
    runner = CliRunner()
    out = runner.invoke(alerts_cli, ["--url", base, "unsilence", sid])
    assert out.exit_code == 0, out.output
    out = runner.invoke(alerts_cli, ["--url", base, "silence", "--rack", "r01", "--for", "1h",
                                     "--comment", "cli"])
    assert out.exit_code == 0 and out.output.startswith("silence "), out.output
    made = [s for s in _silences(base) if s["comment"] == "cli"]
    assert len(made) == 1
    out = runner.invoke(alerts_cli, ["--url", base, "unsilence", made[0]["silence_id"]])
    assert out.exit_code == 0, out.output
    # gpulens report's request passes the checks too: the service's own validation answers
    from gpulens.cli_report import report as report_cli

    out = runner.invoke(report_cli, ["--url", base, "--week", "2999-W01"])
    assert out.exit_code != 0 and "refused: week: '2999-W01' is not between" in out.output


def test_foreign_host_is_refused(open_service):
    base = open_service
    port = urlsplit(base).port
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io"):
        status, _, body = raw(base, "GET", "/", headers={"Host": host})
        assert status == 400 and "unknown Host" in body["error"], host
        status, _, _ = raw(base, "GET", "/api/alerts", headers={"Host": host})
        assert status == 400
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert raw(base, "GET", "/api/alerts", headers={"Host": host})[0] == 200


def test_security_headers_on_every_response(open_service):
    base = open_service
    for path in ("/", "/thermal", "/api/alerts", "/healthz", "/_dash-layout", "/nope"):
        resp = requests.get(base + path, timeout=10)
        for name in SECURITY_HEADERS:
            assert name in resp.headers, (path, name)
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    cookies = requests.get(base + "/", timeout=10).headers["Set-Cookie"]
    assert "SameSite=Strict" in cookies and "HttpOnly" in cookies


# -- sessions ------------------------------------------------------------------------

def test_brute_force_is_throttled_per_address_and_per_account(guarded_service):
    base = guarded_service.url
    session = requests.Session()
    token = form_token(session.get(base + "/login", timeout=10).text)

    def attempt(user, password, source):
        cookie = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
        form = urlencode({"username": user, "password": password, "csrf_token": token})
        return raw(base, "POST", "/login", source=source, body=form.encode(),
                   headers={"Origin": base, "Cookie": cookie,
                            "Content-Type": "application/x-www-form-urlencoded"})

    for _ in range(3):
        assert attempt("erin", "guess", ELSEWHERE)[0] == 401
    status, headers, _ = attempt("erin", "erin-pw", ELSEWHERE)  # the right one, too late
    assert status == 429 and int(headers["Retry-After"]) > 0
    assert attempt("erin", "erin-pw", "127.0.0.4")[0] == 429  # per account
    assert attempt("bob", "bob-pw", ELSEWHERE)[0] == 429  # per address
    log_text = "".join(guarded_service.output)
    assert "erin-pw" not in log_text and "guess" not in log_text


def test_cookie_used_after_logout_is_refused(guarded_service):
    base = guarded_service.url
    session = requests.Session()
    assert login(session, base, "alice", "alice-pw").status_code == 302
    captured = dict(session.cookies)
    assert session.get(base + "/api/session", timeout=10).json()["user"] == "alice"
    token = form_token(session.get(base + "/logout", timeout=10).text)
    out = session.post(base + "/logout", data={"csrf_token": token}, headers={"Origin": base},
                       allow_redirects=False, timeout=10)
    assert out.status_code == 302
    replay = requests.get(base + "/api/alerts", cookies=captured, timeout=10)
    assert replay.status_code == 401
    assert requests.get(base + "/api/session", cookies=captured, timeout=10).json()[
        "user"] is None


def test_viewer_cannot_silence_but_operator_can(guarded_service):
    base = guarded_service.url
    viewer = requests.Session()
    assert login(viewer, base, "bob", "bob-pw").status_code == 302
    resp = viewer.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                       headers=api_headers(viewer, base))
    assert resp.status_code == 403 and "operator" in resp.json()["error"]
    resp = viewer.post(base + "/api/reports", json={"week": "2026-W01"}, timeout=10,
                       headers=api_headers(viewer, base))
    assert resp.status_code == 403
    assert _silences(base, viewer) == []
    operator = requests.Session()
    assert login(operator, base, "alice", "alice-pw").status_code == 302
    resp = operator.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                         headers=api_headers(operator, base))
    assert resp.status_code == 201


# -- input ---------------------------------------------------------------------------

@pytest.mark.parametrize("method, path, body, field", [
    ("GET", "/api/alerts?since_s=abc", None, "since_s"),
    ("GET", "/api/alerts?since_s=inf", None, "since_s"),
    ("GET", "/api/alerts?since_s=-5", None, "since_s"),
    ("GET", "/api/alerts?state=bogus", None, "state"),
    ("POST", "/api/alerts/silences", {**SILENCE, "duration": "inf"}, "duration"),
    ("POST", "/api/alerts/silences", {**SILENCE, "duration": "nan"}, "duration"),
    ("POST", "/api/alerts/silences", {**SILENCE, "duration": "1e308d"}, "duration"),
    ("POST", "/api/alerts/silences", {**SILENCE, "duration_s": 1e308}, "duration_s"),
    ("POST", "/api/alerts/silences", {**SILENCE, "duration_s": [1]}, "duration_s"),
    ("POST", "/api/alerts/silences", {**SILENCE, "comment": 5}, "comment"),
    ("POST", "/api/alerts/silences", {**SILENCE, "comment": "x" * 5000}, "comment"),
    ("POST", "/api/alerts/silences", {**SILENCE, "rack": {"a": 1}}, "rack"),
    ("POST", "/api/alerts/silences", [SILENCE], "JSON object"),
    ("POST", "/api/alerts/x/ack", ["by"], "JSON object"),
    ("POST", "/api/alerts/x/ack", {"by": 7}, "by"),
    ("POST", "/api/reports", {"week": "9999-W52"}, "week"),
    ("POST", "/api/reports", {"week": "2026-W99"}, "week"),
    ("POST", "/api/reports", {"week": 2026}, "week"),
    ("POST", "/api/reports", {"week": "2026-W01", "send": "yes"}, "send"),
    ("POST", "/api/reports", [1, 2], "JSON object"),
    ("POST", "/_dash-update-component", [1], "JSON object"),
    ("POST", "/_dash-update-component", {"output": 5, "inputs": []}, "output"),
])
def test_malformed_input_is_a_400_naming_the_field(open_service, method, path, body, field):
    base = open_service
    session = requests.Session()
    headers = api_headers(session, base) if method == "POST" else {}
    resp = session.request(method, base + path, json=body, headers=headers, timeout=30)
    assert resp.status_code == 400, resp.text
    assert field in resp.json()["error"]


def test_startup_log_names_ignored_header(tmp_path):
    config = tmp_path / "gpulens.toml"
    config.write_text('[dashboard]\ntrusted_user_header = "X-Forwarded-User"\n')
    svc = ServiceProcess(tmp_path / "d.duckdb", "--config", str(config), "--history-days",
                         "0", "--racks", "1")
    try:
        status, _, _ = raw(svc.url, "GET", "/api/alerts", headers={"X-Forwarded-User": "x"})
        assert status == 401  # the header is not believed: nobody is logged in
    finally:
        svc.stop()
    log_text = "".join(svc.output)
    assert "X-Forwarded-User is ignored: dashboard.trusted_proxies is empty" in log_text


def test_a_login_and_its_csrf_token_outlive_a_restart(tmp_path):
    """The key and the sessions are kept beside the database: a wall display stays
    logged in across a restart of the service."""
    config = tmp_path / "gpulens.toml"
    config.write_text(f'[dashboard]\nusers = "alice:{auth.hash_password("pw", method="pbkdf2")}"'
                      '\noperators = "alice"\n')
    args = (tmp_path / "d.duckdb", "--config", str(config), "--history-days", "0",
            "--racks", "1")
    svc = ServiceProcess(*args)
    session = requests.Session()
    try:
        assert login(session, svc.url, "alice", "pw").status_code == 302
        headers = api_headers(session, svc.url)
    finally:
        svc.stop()
    svc = ServiceProcess(*args)
    try:
        base = svc.url  # a new port; cookies do not depend on ports, the Origin does
        assert session.get(base + "/api/session", timeout=10).json()["user"] == "alice"
        resp = session.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                            headers={**headers, "Origin": base})
        assert resp.status_code == 201
        assert (tmp_path / "d.duckdb.auth.key").exists()
    finally:
        svc.stop()

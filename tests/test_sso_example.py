"""docs/examples/sso: gpulens behind real nginx (TLS, auth_request) as documented.

nginx runs the example's server block with its addresses mapped onto loopback (the proxy
connects from 127.0.0.2, gpulens listens on 127.0.0.1) and a self-signed certificate.
oauth2-proxy's part, answering ``/oauth2/auth`` with 202 and ``X-Auth-Request-User`` /
``X-Auth-Request-Groups`` for a signed-in browser and 401 otherwise, is played by a small
HTTP server here: the identity provider is not what is tested, gpulens's trust is.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from gpulens.config import load
from tests.support.integration import ROOT, ServiceProcess, need

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "docs" / "examples" / "sso"
PUBLIC = "https://gpulens.example.com"
SIGNED_IN = {"ana": "gpu-oncall,ml", "bob": "ml"}  # oauth2-proxy cookie -> groups
SILENCE = {"rack": "r01", "duration": "1h", "comment": "fan swap"}


class _AuthStandIn(BaseHTTPRequestHandler):
    """oauth2-proxy's /oauth2/auth with set_xauthrequest = true."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        match = re.search(r"_oauth2_proxy=(\w+)", self.headers.get("Cookie", ""))
        user = match[1] if match else None
        if self.path.startswith("/oauth2/auth") and user in SIGNED_IN:
            self.send_response(202)
            self.send_header("X-Auth-Request-User", user)
            self.send_header("X-Auth-Request-Groups", SIGNED_IN[user])
        elif self.path.startswith("/oauth2/sign_in"):
            self.send_response(200)
        else:
            self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _site(auth_port: int, gpulens_url: str, tmp: Path) -> str:
    """The example server block with its addresses, ports and certificate mapped here."""
    site = (EXAMPLE / "nginx-gpulens.conf").read_text()
    https_port = _free_port()
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{https_port} ssl;")
    site = site.replace("/etc/ssl/gpulens/", f"{tmp}/")
    site = site.replace("127.0.0.1:4180", f"127.0.0.1:{auth_port}")
    site = site.replace("proxy_bind 10.0.0.2;", "proxy_bind 127.0.0.2;")
    site = site.replace("http://10.0.0.3:8050", gpulens_url)
    assert "10.0.0." not in site
    return site, https_port


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    nginx = need("nginx", "nginx")
    openssl = need("openssl", "openssl")
    tmp = tmp_path_factory.mktemp("sso")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=gpulens.example.com", "-keyout", str(tmp / "privkey.pem"),
                    "-out", str(tmp / "fullchain.pem")], check=True, capture_output=True)
    auth = ThreadingHTTPServer(("127.0.0.1", 0), _AuthStandIn)
    threading.Thread(target=auth.serve_forever, daemon=True).start()
    # the example's gpulens.toml, but listening where this machine can: loopback
    env = {"GPULENS_DASHBOARD_TRUSTED_PROXIES": "127.0.0.2/32"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        svc = ServiceProcess(tmp / "demo.duckdb", "--config", str(EXAMPLE / "gpulens.toml"),
                             "--host", "127.0.0.1", "--history-days", "0", "--racks", "1")
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    site, https_port = _site(auth.server_port, svc.url, tmp)
    (tmp / "site.conf").write_text(site)
    (tmp / "nginx.conf").write_text(f"""
daemon off; master_process off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{}}
http {{
    access_log off;
    client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
    include {tmp}/site.conf;
}}
""")
    proc = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"https://127.0.0.1:{https_port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            _browser(base, None).get(base, timeout=2)
            break
        except requests.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"nginx did not start: {proc.stdout.read()}") from None
            time.sleep(0.2)
    yield base, svc.url
    proc.terminate()
    proc.wait(timeout=10)
    auth.shutdown()
    svc.stop()


def _browser(base: str, user: str | None) -> requests.Session:
    """A browser at the public name: its Host, its oauth2-proxy cookie."""
    session = requests.Session()
    session.trust_env = False  # else REQUESTS_CA_BUNDLE wins over verify=False
    session.verify = False
    session.headers["Host"] = "gpulens.example.com"
    if user:
        session.cookies.set("_oauth2_proxy", user)
    return session


def _post_silence(session, base: str):
    token = session.get(base + "/api/session", timeout=10).json()["csrf_token"]
    return session.post(base + "/api/alerts/silences", json=SILENCE, timeout=10,
                        headers={"Origin": PUBLIC, "X-CSRFToken": token})


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_example_configuration_behind_nginx(stack):
    base, direct = stack
    cfg = load(EXAMPLE / "gpulens.toml", env={})  # the example loads as written
    assert cfg["dashboard.trusted_proxies"] == "10.0.0.2/32"
    # not signed in: nginx shows oauth2-proxy's sign-in page; gpulens is never asked
    anon = _browser(base, None).get(base + "/thermal", allow_redirects=False, timeout=10)
    assert anon.status_code == 403 and "Content-Security-Policy" not in anon.headers
    # the on-call group operates; the Secure cookie follows the https public URL
    ana = _browser(base, "ana")
    who = ana.get(base + "/api/session", timeout=10)
    assert (who.json()["user"], who.json()["role"]) == ("ana", "operator")
    assert all("Secure" in c for c in who.raw.headers.getlist("Set-Cookie"))
    assert _post_silence(ana, base).status_code == 201
    page = ana.get(base + "/thermal", timeout=10)
    assert page.status_code == 200 and "Content-Security-Policy" in page.headers
    # others read; a header of their own is overwritten by nginx
    bob = _browser(base, "bob")
    bob.headers.update({"X-Forwarded-User": "ana", "X-Forwarded-Groups": "gpu-oncall"})
    who = bob.get(base + "/api/session", timeout=10).json()
    assert (who["user"], who["role"]) == ("bob", "viewer")
    refused = _post_silence(bob, base)
    assert refused.status_code == 403 and "operator" in refused.json()["error"]
    # around the proxy, straight to gpulens: the header is not believed
    spoof = requests.get(direct + "/api/alerts", timeout=10,
                         headers={"X-Forwarded-User": "ana", "X-Forwarded-Groups": "gpu-oncall"})
    assert spoof.status_code == 401

"""The service in a subprocess: /healthz, live collection, clean shutdown; its web server
stopped in process."""

import http.client
import socket
import threading
import time

import pytest
import requests
import waitress

from gpulens.config import load
from gpulens.service import Service, stop_web_server
from tests.support.integration import ServiceProcess
from warehouse import Warehouse

pytestmark = pytest.mark.integration


def wait_for(fn, timeout=60.0, every=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met in {timeout} s (last: {last})")


def test_demo_serves_health_collects_and_stops_cleanly(tmp_path):
    db = tmp_path / "demo.duckdb"
    svc = ServiceProcess(db, "--history-days", "0.25", "--racks", "2")
    try:
        assert svc.url.startswith("http://127.0.0.1:")

        def healthy():
            h = requests.get(svc.url + "/healthz", timeout=5).json()
            src = h["sources"].get("simulator", {})
            return h if src.get("last_success") and h["backfill"].get("state") == "done" else None

        health = wait_for(healthy, timeout=90)
        assert health["status"] == "ok"
        assert health["sources"]["simulator"]["last_error"] is None
        assert health["sources"]["simulator"]["rows"] > 0
        assert health["database"]["size_bytes"] > 0
        page = requests.get(svc.url + "/", timeout=10)
        assert page.status_code == 200 and "gpulens" in page.text
    finally:
        code = svc.stop()
    log = "".join(svc.output)
    assert code == 0, log
    assert "gpulens stopped; the database is checkpointed." in log
    assert "objects of the started app frozen out of the garbage collector" in log
    assert "Traceback" not in log and "checkpoint at close" not in log
    with Warehouse(db) as wh:
        cur = wh.reader()
        gpus = cur.execute("SELECT count(*) FROM gpus").fetchone()[0]
        assert gpus == 2 * 8 * 8
        hours = cur.execute(
            "SELECT (max(ts) - min(ts)) FROM gpu_samples").fetchone()[0].total_seconds() / 3600
        assert hours >= 5.9  # 6 h of history plus the live cycles
        assert cur.execute("SELECT count(*) FROM jobs").fetchone()[0] > 0
        assert cur.execute("SELECT count(*) FROM gpu_samples_1h").fetchone()[0] > 0


def test_port_in_use_is_a_one_line_error(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "gpulens.cli", "demo", "--port", str(port), "--db",
             str(tmp_path / "d.duckdb"), "--history-days", "0"],
            capture_output=True, text=True, timeout=120,
        )
    assert out.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use. Choose another with --port" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.fixture
def thread_errors(monkeypatch):
    """What ended a thread during the test, as "thread: exception" (threading.excepthook)."""
    errors = []

    def hook(args):
        name = args.thread.name if args.thread is not None else "?"
        errors.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")

    monkeypatch.setattr(threading, "excepthook", hook)
    return errors


def test_shutdown_closes_a_kept_alive_connection_and_ends_the_web_thread(
        tmp_path, thread_errors):
    """When shutdown returns, the web server's loop has ended and every socket is closed,
    a kept-alive connection too; before, shutdown closed the listener from the main
    thread and the loop went on serving the connections still open."""
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(f'[service]\nport = 0\ndb = "{tmp_path / "w.duckdb"}"\n'
                   "[simulator]\nracks = 1\nnodes_per_rack = 1\nhistory_days = 0\n")
    svc = Service(load(cfg, env={}))
    before = set(threading.enumerate())
    svc.start()
    try:
        [web] = [t for t in threading.enumerate() if t.name == "gpulens-web" and t not in before]
        client = http.client.HTTPConnection(svc.server.effective_host,
                                            int(svc.server.effective_port), timeout=30)
        client.request("GET", "/healthz")
        client.getresponse().read()  # HTTP/1.1: the connection stays open
    finally:
        svc.shutdown()
    assert not web.is_alive()
    assert client.sock.recv(1) == b""  # closed by the server
    client.close()
    assert thread_errors == []


def _ok(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def test_the_web_server_stops_cleanly_however_busy(thread_errors, caplog):
    """Stopped while 150 clients connect and each sends a request, round after round.
    Closed from the main thread while the loop ran, a socket could be in the list the
    loop was handing to select(), which failed with EBADF and ended the loop's thread
    with a traceback (in a quarter to a half of the rounds here); a trigger closed by the
    thunk it carried could be closed before pull_trigger wrote to it (EBADF in the stop,
    about one run in fifty). No round may raise or end a thread on an exception or log
    one, and every loop has ended when stop_web_server returns."""
    running = []  # loops still running once stopped
    for _ in range(20):
        server = waitress.create_server(_ok, host="127.0.0.1", port=0, threads=2)
        loop = threading.Thread(target=server.run, name="web-loop", daemon=True)
        loop.start()
        address = (server.effective_host, int(server.effective_port))
        clients = [socket.create_connection(address) for _ in range(150)]
        try:
            for client in clients:
                client.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            stop_web_server(server, loop)
        finally:
            running += [loop] if loop.is_alive() else []
            for client in clients:
                client.close()
    assert thread_errors == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert running == []


def test_a_web_server_whose_loop_never_ran_is_closed_all_the_same():
    server = waitress.create_server(_ok, host="127.0.0.1", port=0, threads=1)
    address = (server.effective_host, int(server.effective_port))
    stop_web_server(server, None)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=10)

"""The alerts HTTP API (Flask blueprint) and the ``gpulens alerts`` CLI over it, and the
CLI's fallback to the warehouse file when no service runs."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner
from flask import Flask
from werkzeug.serving import make_server

from alerts.api import create_blueprint
from gpulens.cli_alerts import alerts as alerts_cli
from tests.support.alerts import Incident


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    inc = Incident(tmp_path_factory.mktemp("api") / "w.duckdb")
    inc.run_until(24)  # rack_cooling fires on r2
    yield inc
    inc.wh.close()


@pytest.fixture(scope="module")
def service(incident):
    app = Flask("test")
    app.register_blueprint(create_blueprint(incident.wh, now=lambda: incident.now))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield app, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.mark.slow
def test_list_ack_and_silence_over_http(service):
    app, _ = service
    client = app.test_client()
    [alert] = client.get("/api/alerts?state=firing").get_json()["alerts"]
    assert (alert["rule"], alert["rack"], alert["state"]) == ("rack_cooling", "r2", "firing")
    acked = client.post(f"/api/alerts/{alert['alert_id']}/ack",
                        json={"by": "ana", "comment": "on it"}).get_json()["alert"]
    assert (acked["acked_by"], acked["ack_comment"]) == ("ana", "on it")
    assert client.post("/api/alerts/nope/ack", json={}).status_code == 404
    made = client.post("/api/alerts/silences",
                       json={"rack": "r2", "duration": "2h", "comment": "fan swap"})
    assert made.status_code == 201
    sid = made.get_json()["silence"]["silence_id"]
    assert [s["silence_id"] for s in client.get("/api/alerts/silences").get_json()["silences"]
            ] == [sid]
    bad = client.post("/api/alerts/silences", json={"rack": "r2", "duration": "2h"})
    assert bad.status_code == 400 and "comment" in bad.get_json()["error"]
    assert client.delete(f"/api/alerts/silences/{sid}").status_code == 200
    assert client.get("/api/alerts/silences").get_json()["silences"] == []


@pytest.mark.slow
def test_cli_talks_to_the_running_service(service):
    _, url = service
    runner = CliRunner()
    out = runner.invoke(alerts_cli, ["--url", url, "list", "--state", "firing", "--json"])
    assert out.exit_code == 0, out.output
    [alert] = json.loads(out.output)
    out = runner.invoke(alerts_cli, ["--url", url, "silence", "--rule", "rack_cooling",
                                     "--for", "30m", "--comment", "known", "--by", "bo"])
    assert out.exit_code == 0 and out.output.startswith("silence "), out.output
    out = runner.invoke(alerts_cli, ["--url", url, "ack", alert["alert_id"], "--by", "bo"])
    assert out.exit_code == 0 and "acknowledged by bo" in out.output
    out = runner.invoke(alerts_cli, ["--url", url, "ack", "nope"])
    assert out.exit_code != 0 and "no alert" in out.output


@pytest.mark.slow
def test_cli_opens_the_file_when_no_service_runs(tmp_path):
    inc = Incident(tmp_path / "w.duckdb")
    inc.run_until(24)
    inc.wh.close()
    runner = CliRunner()
    args = ["--url", "http://127.0.0.1:9", "--db", str(tmp_path / "w.duckdb")]
    out = runner.invoke(alerts_cli, [*args, "list", "--json"])
    assert out.exit_code == 0, out.output
    assert [a["rule"] for a in json.loads(out.output)] == ["rack_cooling"]
    out = runner.invoke(alerts_cli, [*args, "silence", "--node", "n20", "--for", "1h",
                                     "--comment", "drain"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(alerts_cli, [*args, "silences", "--json"])
    assert [s["node"] for s in json.loads(out.output)] == ["n20"]


def test_cli_test_sends_to_the_configured_sink(tmp_path, monkeypatch):
    from alerts.receiver import start_receiver

    rx = start_receiver(secret="k")
    monkeypatch.setenv("GPULENS_ALERTS_WEBHOOK_URL", rx.url)
    monkeypatch.setenv("GPULENS_ALERTS_WEBHOOK_SECRET", "k")
    try:
        out = CliRunner().invoke(alerts_cli, ["test", "--sink", "webhook"])
        assert out.exit_code == 0, out.output
        assert [b["kind"] for b in rx.bodies()] == ["test"] and rx.rejected == 0
        out = CliRunner().invoke(alerts_cli, ["test", "--sink", "slack"])
        assert out.exit_code != 0 and "GPULENS_ALERTS_SLACK_URL" in out.output
    finally:
        rx.stop()

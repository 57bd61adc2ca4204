"""The backtest (issue 22) replays stored history through the service's evaluator: over
the same window it fires, resolves and pages exactly as the live service did."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner
from flask import Flask
from werkzeug.serving import make_server

from alerts import backtest
from alerts.api import create_blueprint
from alerts.rules import DEFAULTS
from alerts.runtime import AlertRuntime
from collector.simulated import SimulatedSource
from collector.simulator import SimConfig
from gpulens.cli_alerts import alerts as alerts_cli
from tests.support.alerts import T0, Incident, alert_config
from warehouse import Warehouse

pytestmark = pytest.mark.slow

LIVE = datetime(2026, 11, 20, 12, 0, 0)


def _live_run(wh, source, until: datetime):
    """The service's loop: collect a tick, evaluate, every 15 s from LIVE to ``until``;
    returns (fired alerts as last seen, notifications, evaluation times)."""
    clock = [LIVE]
    rt = AlertRuntime(wh, alert_config(), now=lambda: clock[0])
    alerts, notes, times = {}, [], []
    while clock[0] <= until:
        for kind, table in source.collect(clock[0]):
            wh.ingest(kind, table).result()
        result = rt.evaluate_once()
        if result is not None:
            times.append(clock[0])
            alerts.update({a.alert_id: a for a in result.upserts})
            notes.extend(result.notifications)
        clock[0] += timedelta(seconds=15)
    return alerts, notes, times


def _key(a):
    return (a.rule, a.fingerprint, a.fired_at, a.resolved_at, a.state)


def test_backtest_agrees_with_the_live_service_over_a_simulated_cooling_failure():
    sim = replace(SimConfig(), racks=5, nodes_per_rack=2, cooling_hold_min=(4.0, 4.0))
    source = SimulatedSource(sim, anchor=LIVE - timedelta(days=1), live_start=LIVE)
    [incident] = [i for i in source.cluster.incidents()
                  if i.kind == "rack_cooling" and LIVE <= i.start < LIVE + timedelta(hours=1)]
    until = incident.end + timedelta(minutes=6)
    wh = Warehouse(":memory:")
    try:
        wh.ingest_all(source.topology())
        source.history(lambda kind, t: wh.ingest(kind, t).result(),
                       LIVE - timedelta(minutes=16), LIVE, progress=False)
        live_alerts, live_notes, times = _live_run(wh, source, until)
        result = backtest.replay(DEFAULTS, backtest.WarehouseSource(wh.reader), LIVE, until,
                                 step_s=15.0, every_s=15.0, chunk_s=600.0)
    finally:
        wh.close()
    live_fired = sorted(_key(a) for a in live_alerts.values() if a.fired_at is not None)
    assert live_fired, "the cooling failure fired nothing live"
    assert sorted(_key(a) for a in result.firings) == live_fired
    assert [(n.kind, n.group, n.created_at) for n in result.notifications] == [
        (n.kind, n.group, n.created_at) for n in live_notes]
    assert result.evaluations == len(times)
    # the incident is found, with its time to page
    [row] = [r for r in backtest.incident_rows(result, [incident])]
    assert row["pages"] >= 1 and "rack_cooling" in row["rules"], row
    assert 0 < row["time_to_page_s"] <= 6 * 60
    rack = [r for r in backtest.per_rule_rack(result) if r["rule"] == "rack_cooling"
            and r["rack"] == incident.rack]
    assert rack[0]["pages"] == 1 and rack[0]["resolved"] == 1 and rack[0]["firing_s"] > 0


def test_overrides_change_the_rules_and_name_what_is_wrong():
    rules = backtest.with_overrides({}, {"gpu_temp.threshold": "90", "rack_cooling.hold_s": 120})
    by = {r.name: r for r in rules}
    assert by["gpu_temp"].threshold == 90.0 and by["rack_cooling"].hold_s == 120.0
    assert by["hbm_temp"] == {r.name: r for r in DEFAULTS}["hbm_temp"]
    for bad, says in (({"gpu_tmp.threshold": 1}, "no rule 'gpu_tmp'"),
                      ({"gpu_temp.treshold": 1}, "has no 'treshold'"),
                      ({"gpu_temp.threshold": "hot"}, "'hot' is not a number"),
                      ({"gpu_temp.threshold": "nan"}, "not a finite number"),
                      ({"gpu_temp.clear": 99}, "clear 99 above threshold 87")):
        with pytest.raises(backtest.RuleError, match=says):
            backtest.with_overrides({}, bad)


def _serve(app):
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_cli_backtest_through_the_running_service_and_on_the_file(tmp_path):
    inc = Incident(tmp_path / "w.duckdb")
    inc.run_until(42, deliver=False)  # r2's cooling fails from +16 to +30 min
    app = Flask("test")
    app.register_blueprint(create_blueprint(inc.wh, now=lambda: inc.now))
    server = _serve(app)
    url = f"http://127.0.0.1:{server.server_port}"
    window = ["--since", T0.isoformat(), "--until", (T0 + timedelta(minutes=42)).isoformat()]
    try:
        out = CliRunner().invoke(alerts_cli, ["--url", url, "backtest", *window,
                                              "--out", str(tmp_path / "bt")])
        assert out.exit_code == 0, out.output
        doc = json.loads((tmp_path / "bt" / "backtest.json").read_text())
        [row] = [r for r in doc["per_rule_rack"] if r["rule"] == "rack_cooling"]
        assert (row["rack"], row["firings"], row["pages"], row["resolved"]) == ("r2", 1, 1, 1)
        assert "rack_cooling  r2  1  1  1" in out.output
        lines = (tmp_path / "bt" / "notifications.csv").read_text().splitlines()
        assert {"kind", "rule", "rack", "created_at"} <= set(lines[0].split(","))
        assert len(lines) == 3  # the header, firing and resolved
        # a threshold too high for the incident: the rule would have stayed quiet
        out = CliRunner().invoke(alerts_cli, ["--url", url, "backtest", *window, "--set",
                                              "rack_cooling.threshold=30", "--json"])
        assert out.exit_code == 0, out.output
        assert not [r for r in json.loads(out.output)["per_rule_rack"]
                    if r["rule"] == "rack_cooling"]
        bad = CliRunner().invoke(alerts_cli, ["--url", url, "backtest", *window, "--set",
                                              "rack_cooling.treshold=30"])
        assert bad.exit_code != 0 and "has no 'treshold'" in bad.output
    finally:
        server.shutdown()
        inc.wh.close()
    # no service: the command opens the file itself, and finds the same
    rules = tmp_path / "rules.toml"
    rules.write_text("[alerts.rack_cooling]\nhold_s = 60.0\n")
    out = CliRunner().invoke(alerts_cli, ["--url", "http://127.0.0.1:9", "--db",
                                          str(tmp_path / "w.duckdb"), "backtest", *window,
                                          "--rules", str(rules), "--json"])
    assert out.exit_code == 0, out.output
    assert [(r["rule"], r["rack"], r["pages"]) for r in json.loads(out.output)["per_rule_rack"]
            if r["rule"] == "rack_cooling"] == [("rack_cooling", "r2", 1)]

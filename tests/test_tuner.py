"""The Thermal page's rule tuner (issue 22): its callbacks give what `gpulens alerts
backtest --set ...` gives for the same settings; saving writes the configuration file
(comments kept), reloads the service's rules, is refused to viewers and without the CSRF
token; bad inputs are named."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from flask import g
from hypothesis import given
from hypothesis import strategies as st

from alerts import backtest
from alerts.runtime import AlertRuntime
from dashboard import auth, ids
from gpulens.cli_alerts import alerts as alerts_cli
from gpulens.config import ConfigError, load
from gpulens.config_edit import set_values
from tests.support.dash_seed import NOW
from tests.support.tuner import PASSWORD, seed_incident, write_config
from tests.support.web import csrf_headers, form_token
from warehouse import Warehouse

RULE = "gpu_temp"
SETS = {"gpu_temp.threshold": 60.0, "gpu_temp.clear": 55.0, "gpu_temp.hold_s": 60.0,
        "gpu_temp.resolve_hold_s": 120.0}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(warehouse path, now, configuration file): the seeded incident, closed."""
    tmp = tmp_path_factory.mktemp("tuner")
    db = tmp / "w.duckdb"
    with Warehouse(str(db)) as wh:
        now = seed_incident(wh)
    return db, now, write_config(tmp / "gpulens.toml", db)


def _app(wh, now, config, saved=None, auth_config=None):
    from dashboard.app import create_app

    return create_app(wh, now=lambda: now, config=config, auth_config=auth_config,
                      rules_saved=None if saved is None else saved.append)


def _finish(tuner, job: dict, limit: int = 600) -> object:
    """Poll the tuner as the page's interval does until the backtest ends."""
    for _ in range(limit):
        result, status, stop = tuner.poll_backtest(1, job)
        if stop:
            return result, status
        assert "%" in status, status  # progress while it runs
        time.sleep(0.2)
    raise AssertionError("the backtest did not end")


def _cli(db, now, sets: dict) -> dict:
    args = ["--url", "http://127.0.0.1:9", "--db", str(db), "backtest",
            "--since", (now - timedelta(days=1)).isoformat(), "--until", now.isoformat(),
            "--json", *[x for k, v in sets.items() for x in ("--set", f"{k}={v}")]]
    out = CliRunner().invoke(alerts_cli, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_tuner_results_equal_the_cli_backtest_and_change_with_the_threshold(site):
    db, now, path = site
    config = load(path, env={})
    cli = {t: _cli(db, now, sets) for t, sets in (("default", {}), ("low", SETS))}
    from dashboard.pages import thermal_tuner as tuner

    with Warehouse(str(db)) as wh:
        app = _app(wh, now, config)
        with app.server.test_request_context():
            values = tuner.show_rule(RULE)
            assert values[:4] == (87.0, 82.0, 60.0, 120.0)  # hold_s from the file
            docs = {}
            for name, sets in (("default", {}), ("low", SETS)):
                fields = [sets.get(f"{RULE}.{k}", v) for k, v in zip(tuner.FIELDS, values[:4],
                                                                      strict=True)]
                job, polling, status = tuner.run_backtest(1, RULE, 1, *fields)
                assert polling is False and "Backtesting gpu_temp over 1 days" in status
                result, _ = _finish(tuner, job)
                docs[name] = tuner._jobs[job["job"]]["doc"]
                totals = tuner.summary(docs[name])
                assert f"{totals['firings']} firings, {totals['pages']} pages" in str(result)
    for name in ("default", "low"):
        want = backtest.only_rule(cli[name], RULE)
        for table in ("per_rule_rack", "firings", "notifications"):
            assert docs[name][table] == want[table], (name, table)
        assert (docs[name]["start"], docs[name]["end"]) == (want["start"], want["end"])
    assert tuner.summary(docs["default"])["firings"] == 0
    low = tuner.summary(docs["low"])
    assert low["firings"] == 48 and low["pages"] == 6  # 8 busy GPUs in each of 6 racks


def test_the_rule_and_its_inhibitors_fire_as_all_rules_do(site):
    """``only``: the tuned rule with the rack rules gives the rows of every rule's run."""
    db, now, _ = site
    config = load(None, env={})
    with Warehouse(str(db)) as wh:
        full = backtest.run(wh, config, since=now - timedelta(hours=1), until=now,
                            overrides=SETS)
        for rule in ("gpu_temp", "rack_cooling"):
            part = backtest.run(wh, config, since=now - timedelta(hours=1), until=now,
                                overrides=SETS, only=rule)
            assert backtest.only_rule(part, rule)["per_rule_rack"] == \
                backtest.only_rule(full, rule)["per_rule_rack"]
    assert any(r["rule"] == "rack_cooling" for r in full["per_rule_rack"])


def test_bad_inputs_are_named(site):
    db, now, path = site
    from dashboard.pages import thermal_tuner as tuner

    with Warehouse(str(db)) as wh:
        app = _app(wh, now, load(None, env={}))
        with app.server.test_request_context():
            for days, fields, says in (
                    (1, (80.0, 85.0, 60.0, 120.0), "clear 85 above threshold 80"),
                    (31, (87.0, 82.0, 60.0, 120.0), "Days: 31 is outside 1 to 30"),
                    (0, (87.0, 82.0, 60.0, 120.0), "Days: 0 is outside 1 to 30"),
                    (1, (None, 82.0, 60.0, 120.0), "Threshold: enter a number")):
                _, polling, status = tuner.run_backtest(1, RULE, days, *fields)
                assert polling is True and says in status, status
            # an app built without a configuration file cannot save
            said = tuner.save_rule(1, RULE, 90.0, 82.0, 60.0, 120.0)
            assert "without a configuration file" in said
    # a span without raw samples: the error is shown, not lost in the thread
    with Warehouse(":memory:") as empty:
        app = _app(empty, NOW, load(None, env={}))
        with app.server.test_request_context():
            job, _, _ = tuner.run_backtest(1, RULE, 1, 87.0, 82.0, 60.0, 120.0)
            result, _ = _finish(tuner, job)
            assert "Backtest failed: no raw samples" in str(result)


def test_an_operator_saves_the_file_and_the_service_reloads(site, tmp_path):
    """Through the service's own hook: the file holds the values (its comments kept), the
    running configuration and the alert runtime's rules too."""
    from dashboard.pages import thermal_tuner as tuner
    from gpulens.service import Service

    db, now, original = site
    path = tmp_path / "gpulens.toml"
    path.write_text(original.read_text())
    config = load(path, env={})
    with Warehouse(str(db)) as wh:
        service = Service(config)
        service.alerts = AlertRuntime(wh, config, now=lambda: now)
        app = _app(wh, now, config)
        from dashboard import context

        context.set_context(wh, lambda: now, config=config, rules_saved=service._rules_saved)
        with app.server.test_request_context():
            said = tuner.save_rule(1, RULE, 91.0, 85.0, 30.0, 240.0)
    assert said.startswith(f"Saved gpu_temp to {path}: threshold = 91"), said
    assert "reloaded its rules" in said
    text = path.read_text()
    assert "# the site's configuration" in text and "# kept as it was" in text
    saved = load(path, env={})
    assert [saved[f"alerts.gpu_temp.{k}"] for k in tuner.FIELDS] == [91.0, 85.0, 30.0, 240.0]
    assert saved["dashboard.operators"] == "alice"  # the rest as it was
    [rule] = [r for r in service.alerts.rules if r.name == RULE]
    assert (rule.threshold, rule.clear, rule.hold_s, rule.resolve_hold_s) == (91, 85, 30, 240)
    assert config["alerts.gpu_temp.threshold"] == 91.0  # the backtest API reads this one


def _post(client, output: str, inputs: list, state: list, headers: dict):
    body = {"output": f"{output}.children",
            "outputs": {"id": output, "property": "children"},
            "inputs": inputs, "changedPropIds": [f"{inputs[0]['id']}.n_clicks"],
            "state": state}
    return client.post("/_dash-update-component", json=body, headers=headers)


def _save_click(client, values, headers=None):
    from dashboard.pages import thermal_tuner as tuner

    state = [{"id": ids.TUNER_RULE, "property": "value", "value": RULE},
             *[{"id": tuner.field_id(k), "property": "value", "value": v}
               for k, v in zip(tuner.FIELDS, values, strict=True)]]
    return _post(client, ids.TUNER_SAVE_MSG,
                 [{"id": ids.TUNER_SAVE, "property": "n_clicks", "value": 1}], state,
                 csrf_headers(client) if headers is None else headers)


def _login(client, name):
    token = form_token(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"username": name, "password": PASSWORD, "next": "/",
                                       "csrf_token": token},
                       headers={"Origin": "http://localhost"})


def test_a_viewer_cannot_save_and_a_save_needs_the_csrf_token(site, tmp_path):
    db, now, original = site
    path = tmp_path / "gpulens.toml"
    path.write_text(original.read_text())
    before = path.read_text()
    config = load(path, env={})
    saved: list = []
    with Warehouse(str(db)) as wh:
        app = _app(wh, now, config, saved, auth.AuthConfig.from_settings(config))
        viewer = app.server.test_client()
        assert _login(viewer, "bob").status_code == 302
        assert viewer.get("/_dash-dependencies").status_code == 200
        resp = _save_click(viewer, (70.0, 65.0, 60.0, 120.0))
        assert resp.status_code == 200, resp.data
        said = resp.get_json()["response"][ids.TUNER_SAVE_MSG]["children"]
        assert said.startswith("bob is a viewer")
        assert path.read_text() == before and saved == []
        # the viewer's page: the Save button disabled, no acknowledge/silence buttons
        from dashboard.pages import thermal

        with app.server.test_request_context():
            g.gpulens_identity = auth.Identity("bob", "viewer")
            page = str(thermal.layout())
            assert "bob is a viewer: you can backtest" in page
            assert "id='tuner-save', className='btn', disabled=True" in page
        operator = app.server.test_client()
        assert _login(operator, "alice").status_code == 302
        refused = _save_click(operator, (70.0, 65.0, 60.0, 120.0),
                              headers={"Origin": "http://localhost"})
        assert refused.status_code == 403 and path.read_text() == before
        resp = _save_click(operator, (70.0, 65.0, 60.0, 120.0))
        said = resp.get_json()["response"][ids.TUNER_SAVE_MSG]["children"]
        assert said.startswith("Saved gpu_temp"), said
    assert load(path, env={})["alerts.gpu_temp.threshold"] == 70.0
    assert saved == [{"alerts.gpu_temp.threshold": 70.0, "alerts.gpu_temp.clear": 65.0,
                      "alerts.gpu_temp.hold_s": 60.0, "alerts.gpu_temp.resolve_hold_s": 120.0}]


def test_viewers_get_the_alert_list_without_buttons():
    import pandas as pd

    from dashboard import alerts_view

    df = pd.DataFrame([{"alert_id": "a1", "rule": "rack_cooling", "severity": "critical",
                        "state": "firing", "rack": "r1", "node": None, "gpu_index": None,
                        "value": 6.0, "threshold": 4.0, "unit": "C", "acked_by": None,
                        "active_since": NOW, "fired_at": NOW}])
    assert "Acknowledge" in str(alerts_view.actionable_list(df))
    shown = str(alerts_view.actionable_list(df, actions=False))
    assert "Acknowledge" not in shown and "Silence" not in shown and "rack_cooling" in shown


# -- writing the configuration file --------------------------------------------------------
LAYOUTS = {
    "none": "",
    "table": "[alerts.rack_cooling]\nclear = 2.5  # note\n",
    "parent": "[alerts]\nrack_cooling.clear = 2.5\nevaluate_interval_s = 15.0\n",
    "top": "alerts.rack_cooling.clear = 2.5\n[service]\nport = 8051\n",
    "set": "[alerts.rack_cooling]\nthreshold = 3.0\nclear = 2.5\n",
}


@given(layout=st.sampled_from(sorted(LAYOUTS)),
       key=st.sampled_from(["threshold", "hold_s", "resolve_hold_s"]),
       value=st.floats(min_value=2.5, max_value=1e6, allow_nan=False))
def test_set_values_changes_only_the_setting_in_any_layout(tmp_path_factory, layout, key,
                                                           value):
    path = tmp_path_factory.mktemp("cfg") / "g.toml"
    path.write_text("# head\n" + LAYOUTS[layout])
    before = load(path, env={})
    name = f"alerts.rack_cooling.{key}"
    set_values(path, {name: value})
    after = load(path, env={})
    assert after[name] == value
    assert {k: after[k] for k in after._values if k != name} == \
        {k: before[k] for k in before._values if k != name}
    assert path.read_text().startswith("# head\n")


def test_set_values_refuses_what_it_cannot_write(tmp_path):
    path = tmp_path / "g.toml"
    for text, values, says in (
            ("", {"alerts.nope.threshold": 1.0}, "unknown setting"),
            ("[alerts\n", {"alerts.gpu_temp.threshold": 1.0}, "not valid TOML"),
            ("", {"alerts.gpu_temp.threshold": "hot"}, r"g.toml: alerts.gpu_temp.threshold = 'hot' is a str"),
            ("[alerts]\ngpu_temp = { clear = 80.0 }\n", {"alerts.gpu_temp.threshold": 90.0},
             "by hand")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=says):
            set_values(path, values)
        assert path.read_text() == text  # nothing written
    with pytest.raises(ConfigError, match="no such file"):
        set_values(tmp_path / "missing.toml", {"alerts.gpu_temp.threshold": 90.0})

"""`gpulens export parquet` while the service runs (issue 18): the request parser of
POST /api/export, and a real service in a subprocess asked by the CLI."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from pathlib import Path

import click
import duckdb
import pytest
import requests
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from gpulens.cli_export import export
from gpulens.export_api import ExportRequest, parse_request
from tests.support.integration import ServiceProcess

NOW = datetime(2026, 11, 20, 12)


def test_a_request_is_read_with_its_defaults(tmp_path):
    lake = tmp_path.resolve()
    req = parse_request({"since": "2026-11-18"}, NOW, lake)
    assert (req.since, req.until, req.out, req.tables) == (datetime(2026, 11, 18), NOW,
                                                           lake, None)
    req = parse_request({"since": "2026-11-18T01:00+01:00", "until": "2026-11-19",
                         "out": "rsc", "tables": ["jobs"]}, NOW, lake)
    assert (req.since, req.out, req.tables) == (datetime(2026, 11, 18), lake / "rsc", ["jobs"])
    assert parse_request({"since": "2026-11-18", "out": str(lake / "a" / "b")}, NOW,
                         lake).out == lake / "a" / "b"
    # no since: the lake job's scheduled run, all tables into the lake folder
    assert parse_request({}, NOW, lake) == ExportRequest(None, NOW, lake, None)


@pytest.mark.parametrize("body, message", [
    ([], "body: expected a JSON object"),
    ({"until": "2026-11-19"}, "since: needed with until"),
    ({"since": None, "tables": ["jobs"]}, "since: needed with tables"),
    ({"since": 7}, "since: expected an ISO date"),
    ({"since": "yesterday"}, "since: 'yesterday' is not an ISO date"),
    ({"since": "2026-11-19", "until": "2026-11-18"}, "until: 2026-11-18 00:00:00 is not after"),
    ({"since": "2026-11-18", "out": "/etc"}, "out: '/etc' is outside the lake folder"),
    ({"since": "2026-11-18", "out": "../x"}, "out: '../x' is outside the lake folder"),
    ({"since": "2026-11-18", "out": "a\x00b"}, "out: expected a folder path"),
    ({"since": "2026-11-18", "out": "gpu_samples/cluster=other"},
     "out: 'gpu_samples/cluster=other' is inside the lake's own 'gpu_samples' folder"),
    ({"since": "2026-11-18", "out": "nodes"}, "out: 'nodes' is inside the lake's own"),
    ({"since": "2026-11-18", "out": "./jobs/x"}, "out: './jobs/x' is inside the lake's own"),
    ({"since": "2026-11-18", "out": ".trash-1-x"}, "out: '.trash-1-x' is inside the lake"),
    ({"since": "2026-11-18", "tables": ["secrets"]}, "tables: cannot export 'secrets'"),
    ({"since": "2026-11-18", "tables": "jobs"}, "tables: expected a list"),
    ({"since": "2026-11-18", "drop": True}, "drop: unknown field"),
    ({":": None}, '^":": unknown field'),  # found by the property test below
    ({"": 1}, '^"": unknown field'),
    ({"a: b": 1}, '^"a: b": unknown field'),
])
def test_a_bad_field_is_named(tmp_path, body, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_request(body, NOW, tmp_path.resolve())


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=8)
_field = st.one_of(_json, st.text(max_size=40), st.dates().map(str),
                   st.datetimes().map(datetime.isoformat))


@given(st.one_of(_json, st.fixed_dictionaries({}, optional={
    "since": _field, "until": _field, "out": _field,
    "tables": st.one_of(_json, st.lists(st.sampled_from(["jobs", "nodes", "x"])))})))
def test_any_body_is_a_request_inside_the_lake_or_a_value_error(body):
    lake = Path("/srv/lake")
    try:
        req = parse_request(body, NOW, lake)
    except ValueError as exc:  # it names the field: a plain word as it is, else quoted
        keys = body if isinstance(body, dict) else {}
        named = {"body", "since", "until", "out", "tables", *keys, *map(json.dumps, keys)}
        assert any(str(exc).startswith(name + ": ") for name in named)
        return
    if req.since is None:  # the scheduled run: everything into the lake folder
        assert (req.out, req.tables) == (lake, None)
        return
    assert req.until > req.since and (req.out == lake or lake in req.out.parents)
    top = req.out.relative_to(lake).parts[:1]  # never a table's folder, staging, trash
    assert not top or not (top[0] in {"jobs", "nodes", "gpu_samples"} or top[0][0] == ".")


@pytest.mark.integration
@pytest.mark.slow  # a demo service with six simulated hours
def test_cli_exports_through_the_running_service(tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    monkeypatch.setenv("GPULENS_LAKE_DIR", str(lake))
    monkeypatch.setenv("GPULENS_CLUSTER_NAME", "sim-a")
    db = tmp_path / "demo.duckdb"
    svc = ServiceProcess(db, "--history-days", "0.25", "--racks", "1")
    try:
        deadline = time.monotonic() + 120
        while requests.get(svc.url + "/healthz", timeout=5).json()["backfill"].get(
                "state") != "done":
            assert time.monotonic() < deadline, "the demo's history did not finish"
            time.sleep(0.5)
        # the demo exports its lake on schedule: once right after its history
        while (lake_state := requests.get(svc.url + "/healthz", timeout=5).json()["lake"])[
                "last_run"] is None:
            assert time.monotonic() < deadline, f"no scheduled lake export: {lake_state}"
            time.sleep(0.5)
        assert lake_state["interval_min"] == 10.0 and not lake_state["failing"], lake_state
        assert lake_state["last_run"]["kind"] == "scheduled"
        assert lake_state["last_run"]["days_written"] > 0
        assert list((lake / "gpu_samples_1m" / "cluster=sim-a").glob("date=*/part-0.parquet"))
        # and on request, through the service that holds the file
        res = CliRunner().invoke(export, ["lake", "--db", str(db), "--url", svc.url])
        assert res.exit_code == 0, res.output
        assert f"{lake} (written by the service at {svc.url})" in res.output
        args = ["parquet", "--since", "1d", "--db", str(db), "--url", svc.url]
        res = CliRunner().invoke(export, [*args, "--out", str(lake / "daily")])
        assert res.exit_code == 0, res.output
        assert "written by the service at" in res.output and "gpu_samples" in res.output
        con = duckdb.connect()
        n, clusters = con.execute(
            f"SELECT count(*), list(DISTINCT cluster) FROM read_parquet('{lake}/daily/"
            "gpu_samples_1m/**/*.parquet', hive_partitioning = true)").fetchone()
        assert n > 0 and clusters == ["sim-a"]
        assert not list((lake / "daily").glob(".staging-*"))
        # the service writes only inside lake.dir
        res = CliRunner().invoke(export, [*args, "--out", str(tmp_path / "elsewhere")])
        assert res.exit_code != 0 and "outside the lake folder" in res.output
        assert not (tmp_path / "elsewhere").exists()
        # as every state-changing API request: a foreign Origin is refused
        bad = requests.post(svc.url + "/api/export", json={"since": "2026-11-01"},
                            headers={"Origin": "http://evil.example"}, timeout=10)
        assert bad.status_code == 403
    finally:
        code = svc.stop()
    assert code == 0, "".join(svc.output)


def test_the_lake_run_on_request_answers_409_during_the_history_backfill(tmp_path):
    """POST /api/export {} while the backfill writes: 409 "history backfill running",
    and `gpulens export lake` (asking the service) says so; nothing is written."""
    from flask import Flask
    from werkzeug.serving import make_server

    from gpulens.cli_export import _remote
    from gpulens.config import load
    from gpulens.export_api import create_blueprint
    from gpulens.lake_job import LakeJob

    lake = tmp_path / "lake"
    job = LakeJob(None, load(None).with_overrides(lake__dir=str(lake)),
                  now=lambda: NOW, busy=lambda: True)
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(job, now=lambda: NOW))
    res = app.test_client().post("/api/export", json={})
    assert res.status_code == 409 and "history backfill running" in res.get_json()["error"]
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(click.ClickException, match="refused the export: history "
                                                       "backfill running"):
            _remote(f"http://127.0.0.1:{server.server_port}", {}, "The file is in use.")
    finally:
        server.shutdown()
        thread.join()
    assert not lake.exists()

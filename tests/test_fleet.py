"""The fleet view over a Parquet lake (issue 18): each figure has one definition, so the
lake's numbers for a cluster are its own dashboard's numbers; bad lake contents cost
only themselves; ``gpulens fleet`` serves with the dashboard's security."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.figures import fleet as ff
from dashboard.figures import goodput as fg
from dashboard.fleet_app import render, summary
from gpulens.settings.core import cluster_name_ok
from tests.support.fleet import export_cluster, simulated_cluster
from warehouse import Warehouse
from warehouse.analytics import Options
from warehouse.queries import lake_fleet as lf

NOW = datetime(2026, 11, 20, 6, 0)
DAYS = 1.0
WINDOW = lf.Window(NOW - timedelta(days=30), NOW, NOW)
OPTS = Options(large_job_gpus=8)  # the small cluster's jobs count as large


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """One small simulated cluster (2 nodes, a day, a raised failure rate) and its lake."""
    tmp = tmp_path_factory.mktemp("fleet-one")
    db = simulated_cluster(tmp / "a.duckdb", now=NOW, days=DAYS, rate=3000.0, seed=5)
    export_cluster(db, tmp / "lake", "A", now=NOW, days=DAYS)
    return db, tmp / "lake"


def _same(a, b, where="figures"):
    """``a`` equals ``b`` up to the order of float sums (relative 1e-9)."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, pd.DataFrame):
        key = [c for c in ("category", "job_id", "gpus") if c in a.columns][:1]
        x, y = (d.sort_values(key).reset_index(drop=True) if key else d for d in (a, b))
        pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=1e-9, obj=where)
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9), where
    else:
        assert a == b, where


def test_the_lake_gives_each_figure_of_the_cluster_s_own_dashboard(one):
    db, lake = one
    with Warehouse(db) as wh:
        ref = lf.cluster_figures(wh.reader(), WINDOW, OPTS)
    got = lf.fleet_figures(lf.Lake(lake), WINDOW, OPTS)
    assert list(got) == ["A"]
    got = got["A"]
    assert got.pop("missing") == []  # every table the figures need is in the lake
    assert ref["rate"]["failures"] > 0 and len(ref["large_jobs"]) > 0  # something to compare
    assert ref["energy"]["facility_kwh"] > 0 and ref["fleet"]["gpus"] == 16
    _same(got, ref)


def test_the_lake_counts_a_run_s_nodes_from_its_allocations(tmp_path):
    """r_f's node-days count the distinct nodes of a run's allocations (run_nodes in the
    warehouse, which is not exported: a view of it over the lake's allocations): a
    4-GPU run on 2 + 2 GPUs of two 8-GPU nodes for a day is 2 node-days in both, not
    the 1 its GPUs over 8 give (a second reader's case)."""
    from warehouse.export import export_parquet
    from warehouse.queries import failures as qf

    t = NOW - timedelta(days=2)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest("nodes", pd.DataFrame({"node": ["n0", "n1"], "rack": "r0",
                                         "gpus": 8})).result()
        wh.ingest("jobs", pd.DataFrame({"job_id": ["j"], "gpus": [4], "start_ts": [t],
                                        "end_ts": [t + timedelta(days=1)]})).result()
        wh.ingest("runs", pd.DataFrame({"job_id": ["j"], "run_index": [0], "start_ts": [t],
                                        "end_ts": [t + timedelta(days=1)], "gpus": [4]})
                  ).result()
        wh.ingest("allocations", pd.DataFrame({
            "job_id": "j", "run_index": 0, "node": ["n0", "n0", "n1", "n1"],
            "gpu_index": [0, 1, 0, 1], "start_ts": t, "end_ts": t + timedelta(days=1)})
                  ).result()
        p = {"start": t - timedelta(days=1), "end": NOW}
        here = qf.failure_rate(wh.reader(), **p)["node_days"]
        export_parquet(wh.reader(), tmp_path / "lake", since=t - timedelta(days=1),
                       until=NOW, cluster="c")
    there = qf.failure_rate(lf.open_cluster(str(tmp_path / "lake"), "c"), **p)["node_days"]
    assert here == pytest.approx(2.0) and there == pytest.approx(2.0)


def _ys(trace) -> list[float]:
    return [float(v) for v in trace.y]


def test_fleet_figures_draw_the_single_cluster_figures_numbers(one):
    """The fleet view's trace for a cluster read from the lake carries the numbers the
    single-cluster page's figure draws from the warehouse."""
    db, lake = one
    with Warehouse(db) as wh:
        ref = lf.cluster_figures(wh.reader(), WINDOW, OPTS)
    figs = lf.fleet_figures(lf.Lake(lake), WINDOW, OPTS)
    single = fg.mttf_projection(ref["rate"]).data[0]
    fleet = ff.mttf_by_cluster(figs).data[0]
    assert fleet.name == "A" and list(fleet.x) == list(single.x)
    assert _ys(fleet) == pytest.approx(_ys(single), rel=1e-9)
    assert list(fleet.error_y.array) == pytest.approx(list(single.error_y.array), rel=1e-9)
    # GPU-hours lost by category: the stack of each category for cluster A
    lost = {t.name: t.y[0] for t in ff.lost_by_cluster(figs).data}
    want = dict(zip(ref["lost"]["category"], ref["lost"]["gpu_hours_lost"], strict=True))
    assert lost == pytest.approx(want, rel=1e-9)
    # ETTR of each large job, by job
    points = {j: (x, y) for t in ff.ettr_by_cluster(figs, min_gpus=8).data
              for j, x, y in zip(t.text, t.x, t.y, strict=True)}
    s = fg.ettr_jobs(ref["large_jobs"], min_gpus=8).data[0]
    assert points == {j: (x, pytest.approx(y, rel=1e-9))
                      for j, x, y in zip(s.text, s.x, s.y, strict=True)}
    # the rate and its interval
    r = ff.failure_rates(figs).data[0]
    assert float(r.y[0]) == pytest.approx(ref["rate"]["r_f_per_1000_node_days"], rel=1e-9)
    assert float(r.y[0] + r.error_y.array[0]) == pytest.approx(ref["rate"]["r_f_high"],
                                                                rel=1e-9)
    assert float(r.y[0] - r.error_y.arrayminus[0]) == pytest.approx(ref["rate"]["r_f_low"],
                                                                     rel=1e-9)


def test_render_fills_the_table_and_every_figure(one):
    _, lake = one
    updated, names, table, errors, *figures = render(lf.Lake(lake), "?range=30d", NOW, OPTS)
    assert updated.startswith("Last 30 days") and names == "1 clusters: A" and errors == []
    assert len(figures) == 6
    assert all(not f.layout.meta for f in figures), [f.layout.meta for f in figures]
    grid = table.children[0]
    assert [row["cluster"] for row in grid.data] == ["A"]


# ----------------------------------------------------------- what the lake may hold


def _parquet(path: Path, sql: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"COPY ({sql}) TO '{path}' (FORMAT parquet)")
    con.close()


def test_a_column_the_files_lack_reads_null_with_the_warehouse_type(tmp_path):
    """An older export without a column: the view still has it (NULL), typed as the
    warehouse's, and the queries run."""
    _parquet(tmp_path / "nodes" / "cluster=old" / "nodes.parquet",
             "SELECT 'n1' AS node, 'r1' AS rack, 8 AS gpus")  # no partition column
    con = lf.open_cluster(str(tmp_path), "old")
    cols = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                            "WHERE table_name = 'nodes'").fetchall())
    assert cols["gpus"] == "INTEGER" and "partition" in cols and "cluster" not in cols
    assert con.execute("SELECT node, partition, gpus FROM nodes").fetchall() == [("n1", None, 8)]
    rate = lf.qf.failure_rate(con, start=WINDOW.start, end=WINDOW.end)  # empty tables
    assert rate["failures"] == 0 and rate["gpus_per_node"] == 8


def test_a_value_that_does_not_convert_costs_that_value(tmp_path):
    _parquet(tmp_path / "nodes" / "cluster=odd" / "nodes.parquet",
             "SELECT * FROM (VALUES ('n1', 'r1', 'eight'), ('n2', 'r1', '8')) t(node, rack, gpus)")
    con = lf.open_cluster(str(tmp_path), "odd")
    assert con.execute("SELECT node, gpus FROM nodes ORDER BY node").fetchall() == [
        ("n1", None), ("n2", 8)]


def test_an_unreadable_cluster_costs_itself(one, tmp_path):
    _, lake = one
    import shutil

    shutil.copytree(lake, tmp_path / "lake")
    bad = tmp_path / "lake" / "failures" / "cluster=broken" / "date=2026-11-19"
    bad.mkdir(parents=True)
    (bad / "part-0.parquet").write_bytes(b"PAR1 not parquet at all")
    figs = lf.fleet_figures(lf.Lake(tmp_path / "lake"), WINDOW, OPTS)
    assert sorted(figs) == ["A", "broken"]
    assert "error" in figs["broken"] and "part-0.parquet" in figs["broken"]["error"]
    assert figs["A"]["rate"]["failures"] > 0  # the readable cluster keeps its figures
    assert list(summary(figs)["cluster"]) == ["A"]
    _, _, _, errors, *_ = render(lf.Lake(tmp_path / "lake"), "", NOW, OPTS)
    assert len(errors) == 1 and "broken" in errors[0].children


def test_a_lake_exported_with_fewer_tables_is_named_on_the_page(one, tmp_path):
    """A cluster exported without its allocations (lake.tables) still shows, and the page
    says which tables its figures lack."""
    import shutil

    _, lake = one
    shutil.copytree(lake, tmp_path / "lake", ignore=shutil.ignore_patterns("allocations"))
    figs = lf.fleet_figures(lf.Lake(tmp_path / "lake"), WINDOW, OPTS)
    assert figs["A"]["missing"] == ["allocations"] and "rate" in figs["A"]
    _, _, _, errors, *_ = render(lf.Lake(tmp_path / "lake"), "", NOW, OPTS)
    assert len(errors) == 1 and "no allocations" in errors[0].children


def test_a_bad_cluster_name_is_refused_before_it_reaches_sql(tmp_path):
    with pytest.raises(ValueError, match="cluster name"):
        lf.open_cluster(str(tmp_path), "a'; DROP TABLE x; --")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.text(st.characters(blacklist_characters="/\\\x00",
                                            blacklist_categories=("Cs",)),
                              min_size=1, max_size=20), min_size=1, max_size=4, unique=True))
def test_clusters_are_the_folders_with_a_valid_cluster_name(tmp_path_factory, names):
    """Folder names are outside input: every ``cluster=`` folder holding a file counts
    when its name is a valid cluster.name, and no name makes the listing fail."""
    lake = tmp_path_factory.mktemp("names")
    made = []
    for name in names:
        try:
            folder = lake / "nodes" / f"cluster={name}"
            folder.mkdir(parents=True)
            (folder / "nodes.parquet").write_bytes(b"")
        except OSError:  # the file system refuses the name (too long, ...)
            continue
        made.append(name)
    found = lf.clusters(str(lake))
    assert found == sorted(n for n in made if cluster_name_ok(n))


def test_figures_say_why_when_the_lake_is_empty(tmp_path):
    updated, names, table, errors, *figures = render(lf.Lake(tmp_path), "", NOW, OPTS)
    assert names == "0 clusters: none yet" and errors == []
    assert "No cluster in the lake" in table.children
    assert all(f.layout.meta == {"empty": True} for f in figures)


# ------------------------------------------------------------------ gpulens fleet


def test_gpulens_fleet_serves_the_lake_with_the_dashboard_s_checks(one, tmp_path):
    _, lake = one
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "gpulens.cli", "fleet", "--lake", str(lake),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert "gpulens fleet is serving http://127.0.0.1:" in line, line
        assert "1 clusters: A" in line
        url = line.split("serving ")[1].split()[0].rstrip("/")
        assert requests.get(url + "/healthz", timeout=10).json()["status"] == "ok"
        page = requests.get(url + "/", timeout=10)
        assert page.status_code == 200 and "Content-Security-Policy" in page.headers
        assert page.headers["X-Frame-Options"] == "DENY"
        # DNS rebinding: another Host is refused; a callback from another site too
        assert requests.get(url + "/", headers={"Host": "attacker.example"},
                            timeout=10).status_code == 400
        assert requests.post(url + "/_dash-update-component", json={},
                             headers={"Origin": "http://attacker.example"},
                             timeout=10).status_code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_fleet_view_takes_the_dashboard_s_login(one):
    """With dashboard.users set, the fleet view asks for the login as the dashboard does,
    and shows the logged-in user with the log-out button."""
    from dashboard import auth
    from dashboard.fleet_app import create_fleet_app
    from tests.support.web import form_token

    _, lake = one
    config = auth.AuthConfig(users={"alice": auth.hash_password("s3cret")})
    client = create_fleet_app(lf.Lake(lake), now=lambda: NOW, auth_config=config,
                              options=OPTS).server.test_client()
    first = client.get("/?range=7d")
    assert first.status_code == 302 and first.headers["Location"].startswith("/login?next=")
    assert client.get("/_dash-layout").status_code == 401
    token = form_token(client.get("/login").get_data(as_text=True))
    ok = client.post("/login", data={"username": "alice", "password": "s3cret",
                                     "next": "/?range=7d", "csrf_token": token},
                     headers={"Origin": "http://localhost"})
    assert ok.status_code == 302 and ok.headers["Location"] == "/?range=7d"
    layout = client.get("/_dash-layout")
    assert layout.status_code == 200 and b"alice" in layout.data and b"Log out" in layout.data


def test_gpulens_fleet_without_a_lake_folder_says_what_to_pass(tmp_path, capsys):
    from gpulens.cli import main

    assert main(["fleet", "--lake", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert "no lake folder at" in err and "--lake" in err


def test_non_overlapping_intervals_need_rates_that_differ_enough():
    """The reading the browser test relies on: the exact intervals of 26 failures in
    20 node-days and of none in 20 do not overlap; of 2 and 1 they do."""
    from warehouse.reliability import rate_interval

    assert rate_interval(26, 20.0)[0] > rate_interval(0, 20.0)[1]
    assert rate_interval(2, 20.0)[0] < rate_interval(1, 20.0)[1]
    assert np.isfinite(rate_interval(0, 20.0)[1])


@pytest.mark.slow  # 1,024 GPUs x 3 days, exported twice
def test_bench_fleet_quick_run_finds_the_lake_equal_to_the_warehouse(capsys):
    from bench import fleet as bench_fleet

    assert bench_fleet.main(["--quick"]) == 0
    assert "the lake's figures equal the warehouse's: yes" in capsys.readouterr().out


def test_a_cursor_held_across_a_change_of_the_tables_keeps_reading(tmp_path):
    """A new table in the lake opens the cluster again; a query another thread runs on
    a cursor of the former connection goes on (it is not closed under it)."""
    _parquet(tmp_path / "nodes" / "cluster=c" / "nodes.parquet",
             "SELECT 'n1' AS node, 'r1' AS rack, 8 AS gpus")
    lake = lf.Lake(str(tmp_path))
    held = lake.reader("c")
    _parquet(tmp_path / "racks" / "cluster=c" / "racks.parquet", "SELECT 'r1' AS rack")
    fresh = lake.reader("c")  # the table set changed: opened again
    assert fresh.execute("SELECT rack FROM racks").fetchall() == [("r1",)]
    assert held.execute("SELECT node, gpus FROM nodes").fetchall() == [("n1", 8)]
    lake.close()

"""Parquet export (warehouse/export.py, `gpulens export parquet`) read back with DuckDB,
and the OpenMetrics text bench/vs_prometheus.py feeds to promtool."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta

import duckdb
import pytest
from click.testing import CliRunner

from gpulens.cli_export import export
from warehouse import Warehouse
from warehouse.export import day_range, export_parquet, sweep_trash, write_openmetrics
from warehouse.schema import SCHEMAS

START = datetime(2026, 11, 18)
END = START + timedelta(days=2)


@pytest.fixture(scope="module")
def db(sim_days_db):
    """A warehouse file with two simulated days (START, END) of 60-s samples, rolled up."""
    return sim_days_db


def _read(out, table: str, select: str = "count(*)", where: str = "true") -> tuple:
    """One row of ``SELECT select FROM <exported table> WHERE where``."""
    con = duckdb.connect()
    return con.execute(f"SELECT {select} FROM read_parquet('{out}/{table}/**/*.parquet', "
                       f"hive_partitioning = true) WHERE {where}").fetchone()


def _stored(path, sql: str):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_day_range_widens_to_whole_days():
    assert day_range(datetime(2026, 11, 18, 6), datetime(2026, 11, 19, 1)) == (
        datetime(2026, 11, 18), datetime(2026, 11, 20))
    assert day_range(START, END) == (START, END)


def test_cli_export_reads_back_with_duckdb(db, tmp_path):
    out = tmp_path / "lake"
    # the export leaves out raw days that retention (counted from today) has cut: keep
    # the fixture's days, whatever the date the test runs on
    res = CliRunner().invoke(export, ["parquet", "--since", "2026-11-18", "--until",
                                      "2026-11-20", "--out", str(out), "--db", str(db)],
                             env={"GPULENS_RETENTION_RAW_DAYS": "36500"})
    assert res.exit_code == 0, res.output
    assert "gpu_samples" in res.output
    assert [p.name for p in (out / "gpu_samples").iterdir()] == ["cluster=default"]
    days = sorted(p.name for p in (out / "gpu_samples" / "cluster=default").iterdir())
    assert days == ["date=2026-11-18", "date=2026-11-19"]
    for table, col in (("gpu_samples", "power_w"), ("gpu_samples_1m", "energy_j"),
                       ("gpu_samples_1h", "energy_j")):
        n, total = _read(out, table, f"count(*), sum({col})")
        want_n, want_total = _stored(db, f"SELECT count(*), sum({col}) FROM {table}")
        assert n == want_n > 0
        assert total == pytest.approx(want_total, rel=1e-9)
    # the hive partition column is the row's UTC day
    bad = _read(out, "gpu_samples", where="CAST(ts AS DATE) <> date")[0]
    assert bad == 0
    assert (out / "nodes" / "cluster=default" / "nodes.parquet").exists()
    assert _read(out, "nodes", "count(DISTINCT cluster), min(cluster)") == (1, "default")
    jobs = _read(out, "jobs")[0]
    assert jobs == _stored(db, "SELECT count(*) FROM jobs WHERE submit_ts >= "
                               "'2026-11-18' AND submit_ts < '2026-11-20'")[0] > 0
    # a lake holds the batch's columns: not the key the writer derives for the read checks
    names = duckdb.connect().execute(
        f"DESCRIBE SELECT * FROM read_parquet('{out}/allocations/**/*.parquet', "
        "hive_partitioning = false)").fetchall()
    assert [r[0] for r in names] == SCHEMAS["allocations"].names
    assert _read(out, "allocations")[0] > 0

def test_export_again_replaces_days(db, tmp_path):
    out = tmp_path / "lake"
    with Warehouse(db) as wh:
        first = export_parquet(wh.reader(), out, since=START, until=END)
        again = export_parquet(wh.reader(), out, since=START + timedelta(days=1), until=END,
                               tables=["gpu_samples"])
    assert again.days["gpu_samples"] == [END.date() - timedelta(days=1)]
    n = _read(out, "gpu_samples")[0]
    assert n == first.rows["gpu_samples"]  # replaced, not doubled
    assert not list(out.glob(".staging-*"))
    assert len(list(out.glob(".trash-*"))) == 1  # the replaced day, kept for its readers
    assert sweep_trash(out, grace_s=0) == 1 and not list(out.glob(".trash-*"))


def test_every_row_carries_its_cluster_and_clusters_share_a_lake(db, tmp_path):
    out = tmp_path / "lake"
    with Warehouse(db) as wh:
        a = export_parquet(wh.reader(), out, since=START, until=END, cluster="rsc-1",
                           tables=["gpu_samples_1h", "nodes"])
        b = export_parquet(wh.reader(), out, since=START, until=END, cluster="eval.2",
                           tables=["gpu_samples_1h", "nodes"])
        again = export_parquet(wh.reader(), out, since=START, until=END, cluster="rsc-1",
                               tables=["gpu_samples_1h"])
    assert a.cluster == "rsc-1" and b.cluster == "eval.2"
    per = dict(duckdb.connect().execute(
        f"SELECT cluster, count(*) FROM read_parquet('{out}/gpu_samples_1h/**/*.parquet', "
        "hive_partitioning = true) GROUP BY cluster").fetchall())
    n = a.rows["gpu_samples_1h"]
    assert per == {"rsc-1": n, "eval.2": n} and again.rows["gpu_samples_1h"] == n
    assert _read(out, "nodes", "count(*)", "cluster IS NULL")[0] == 0
    assert sorted(p.name for p in (out / "nodes").iterdir()) == [
        "cluster=eval.2", "cluster=rsc-1"]


@pytest.mark.parametrize("name", ["", "..", "a/b", "rsc 1", "x" * 65, "ü"])
def test_bad_cluster_name_is_refused_before_writing(db, tmp_path, name):
    with Warehouse(db) as wh, pytest.raises(ValueError, match="cluster name"):
        export_parquet(wh.reader(), tmp_path / "lake", since=START, until=END, cluster=name)
    assert not (tmp_path / "lake").exists()


def test_unknown_table_is_refused(db, tmp_path):
    res = CliRunner().invoke(export, ["parquet", "--since", "2026-11-18", "--out",
                                      str(tmp_path), "--db", str(db), "--table", "secrets"])
    assert res.exit_code != 0 and "cannot export" in res.output


def test_locked_database_says_what_to_do(db, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(db)!r})
        print("open", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        res = CliRunner().invoke(export, ["parquet", "--since", "2026-11-18", "--out",
                                          str(tmp_path / "x"), "--db", str(db),
                                          "--url", "http://127.0.0.1:9"])  # no service
        assert res.exit_code != 0
        assert "open in another process" in res.output and "stop the service" in res.output
        assert "No service answered at http://127.0.0.1:9" in res.output
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_openmetrics_text_for_promtool(db, tmp_path):
    path = tmp_path / "om.txt"
    with Warehouse(db) as wh:
        n = write_openmetrics(wh.reader(), path, start=START, end=START + timedelta(hours=1),
                              metrics=["DCGM_FI_DEV_GPU_TEMP",
                                       "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    lines = path.read_text().splitlines()
    assert n == 2 * 64 * 60
    assert lines[0] == "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" and lines[-1] == "# EOF"
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in lines
    first = lines[1]
    assert first.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="') and 'rack="' in first
    stamps = [int(ln.rsplit(" ", 1)[1]) for ln in lines[1:n // 2 + 1]]
    assert stamps == sorted(stamps)  # promtool wants each series in time order


def test_cli_export_lake_runs_the_scheduled_export_and_fails_on_a_failed_day(
        db, tmp_path, monkeypatch):
    copy = tmp_path / "w.duckdb"
    copy.write_bytes(db.read_bytes())
    lake = tmp_path / "lake"
    monkeypatch.setenv("GPULENS_LAKE_DIR", str(lake))
    monkeypatch.setenv("GPULENS_CLUSTER_NAME", "rsc-1")
    lake.mkdir()
    (lake / "nodes").write_text("a file where the table's folder belongs")
    res = CliRunner().invoke(export, ["lake", "--db", str(copy)])
    assert res.exit_code == 1, res.output
    assert "FAILED nodes: NotADirectoryError" in res.output
    assert "gpu_samples_1m" in res.output  # the others were written
    assert sorted(p.name for p in (lake / "gpu_samples_1m" / "cluster=rsc-1").iterdir()) == [
        "date=2026-11-18", "date=2026-11-19"]
    (lake / "nodes").unlink()
    res = CliRunner().invoke(export, ["lake", "--db", str(copy)])
    assert res.exit_code == 0, res.output
    assert (lake / "nodes" / "cluster=rsc-1" / "nodes.parquet").exists()

"""`gpulens import`: CSV job traces, sacct dumps, intensity series, bad rows, a locked file."""

from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector import traces
from gpulens import cli_import
from warehouse import Warehouse, WarehouseLocked

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"

ACME = """job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time
dlc1,u1,2,16,64,Pretrain,COMPLETED,2023-03-01 08:00:00,2023-03-01 08:30:00,2023-03-01 20:00:00
dlc2,u2,1,1,8,Evaluation,FAILED,2023-03-01 09:00:00,2023-03-01 09:00:05,2023-03-01 09:10:00
dlc3,u2,1,0,4,Other,CANCELLED,2023-03-01 10:00:00,,
dlc4,u3,1,8,8,SFT,COMPLETED,1677700800,1677700900,1677704500
dlc5,u3,1,8,8,SFT,COMPLETED,2023-03-01T12:00:00+00:00,2023-03-01T12:00:00Z,2023-03-01T13:00:00Z
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_trace_with_time_zone(tmp_path):
    res = traces.read_csv_trace(_write(tmp_path, "acme.csv", ACME), tz="Asia/Shanghai")
    jobs = res.batch.jobs.to_pandas().set_index("job_id")
    assert res.rows == 5 and res.bad == []
    # 08:00 in Shanghai (UTC+8) is 00:00 UTC
    assert jobs.loc["dlc1", "submit_ts"] == datetime(2023, 3, 1, 0, 0)
    assert jobs.loc["dlc1", "gpus"] == 16 and jobs.loc["dlc1", "nodes"] == 2
    assert jobs.loc["dlc1", "job_type"] == "Pretrain" and jobs.loc["dlc1", "user_name"] == "u1"
    # Unix seconds and explicit offsets are UTC whatever the trace's zone
    assert jobs.loc["dlc4", "submit_ts"] == datetime(2023, 3, 1, 20, 0)
    assert jobs.loc["dlc5", "start_ts"] == datetime(2023, 3, 1, 12, 0)
    runs = res.batch.runs.to_pandas()
    assert sorted(runs["job_id"]) == ["dlc1", "dlc2", "dlc4", "dlc5"]  # dlc3 never ran
    assert (runs["run_index"] == 0).all()


@pytest.mark.parametrize("row, problem", [
    ("x9,u,1,abc,1,T,FAILED,2023-03-01 00:00:00,,", "gpu_num 'abc' is not a whole number"),
    ("x9,u,1,1,1,T,FAILED,2023-13-01 00:00:00,,",
     "submit_time '2023-13-01 00:00:00' is not a plausible time"),
    ("x9,u,1,1,1,T,FAILED,2023-03-01 00:00:00,1e12,", "start_time '1e12' is not a plausible"),
    ("x9,u,1,1,1,T,FAILED,2023-03-01 00:00:00,9999-01-01 00:00:00,",
     "start_time '9999-01-01 00:00:00' is not a plausible"),
    ("x9,u,1,1,1,T,FAILED,1999-03-01 00:00:00,,", "submit_time '1999-03-01 00:00:00'"),
    ("x9,u,1,1e20,1,T,FAILED,2023-03-01 00:00:00,,", "gpu_num '1e20' is not a whole number"),
    ("x9,u,-2,1,1,T,FAILED,2023-03-01 00:00:00,,", "node_num '-2' is not a whole number"),
    (",u,1,1,1,T,FAILED,2023-03-01 00:00:00,,", "job_id is empty"),
    ("x9,u,1,1,1,T,FAILED,2023-03-01 00:00:00,2023-03-01 02:00:00,2023-03-01 01:00:00",
     "end time is before start time"),
])
def test_malformed_rows_are_named(tmp_path, row, problem):
    text = ACME + row + "\n"
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(traces.TraceError) as err:
        traces.read_csv_trace(path)
    assert "line 7" in str(err.value) and problem in str(err.value)
    res = traces.read_csv_trace(path, skip_bad=True)
    assert res.rows == 5 and len(res.bad) == 1 and problem in res.bad[0]


def test_missing_columns(tmp_path):
    with pytest.raises(traces.TraceError, match="missing column"):
        traces.read_csv_trace(_write(tmp_path, "x.csv", "user,gpu_num\nu,1\n"))


def test_cli_imports_trace_sacct_and_carbon(tmp_path):
    db = tmp_path / "w.duckdb"
    runner = CliRunner()
    trace = _write(tmp_path, "acme.csv", ACME)
    carbon = _write(tmp_path, "grid.csv", "timestamp,region,gCO2e/kWh\n"
                    "2023-03-01T00:00:00Z,de,380\n2023-03-01T01:00:00Z,de,360\n")
    result = runner.invoke(cli_import.import_, [
        str(trace), str(FIXTURES / "sacct_24.05.json"), str(carbon), "--db", str(db),
        "--tz", "Asia/Shanghai", "--gpus-per-node", "8", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "5 jobs" in result.output and "2 intensity readings" in result.output
    with Warehouse(db) as wh:
        cur = wh.reader()
        assert cur.execute("SELECT count(*) FROM jobs WHERE job_id LIKE 'dlc%'"
                           ).fetchone()[0] == 5
        sacct_jobs = cur.execute("SELECT count(*) FROM jobs WHERE job_id NOT LIKE 'dlc%'"
                                 ).fetchone()[0]
        assert sacct_jobs > 0
        assert cur.execute("SELECT region, g_co2_per_kwh FROM grid_intensity ORDER BY ts"
                           ).fetchall() == [("DE", 380.0), ("DE", 360.0)]
    # importing again changes nothing (upserts)
    again = runner.invoke(cli_import.import_, [str(trace), "--db", str(db), "--no-progress"])
    assert again.exit_code == 0
    with Warehouse(db) as wh:
        assert wh.reader().execute("SELECT count(*) FROM job_runs WHERE job_id LIKE 'dlc%'"
                                   ).fetchone()[0] == 4


def test_cli_reports_bad_rows_and_a_locked_database(tmp_path, monkeypatch):
    runner = CliRunner()
    bad = _write(tmp_path, "bad.csv", ACME + "x9,u,1,-2,1,T,FAILED,2023-03-01,,\n")
    result = runner.invoke(cli_import.import_, [str(bad), "--db", str(tmp_path / "a.duckdb")])
    assert result.exit_code == 1 and "line 7" in result.output and "--skip-bad" in result.output

    def locked(path, **kw):
        raise WarehouseLocked(f"database {path} is open in another process.")

    monkeypatch.setattr("warehouse.Warehouse", locked)
    result = runner.invoke(cli_import.import_, [str(bad), "--db", str(tmp_path / "b.duckdb")])
    assert result.exit_code == 1
    assert "open in another process" in result.output and "HTTP import API" in result.output


def test_trace_bytes_that_are_not_utf8_and_a_bad_time_zone(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(ACME.encode().replace(b"u1,2,16", b"u\xff1,2,16"))
    res = traces.read_csv_trace(path)
    assert res.batch.jobs.to_pandas().set_index("job_id").loc["dlc1", "user_name"] == "u\ufffd1"
    with pytest.raises(traces.TraceError, match="unknown time zone 'Mars/Olympus'"):
        traces.read_csv_trace(path, tz="Mars/Olympus")


@pytest.mark.parametrize("line, problem", [
    ("2023-03-01T02:00:00Z,de,-5", "line 4"),
    ("2023-03-01T02:00:00Z,de,1e9", "line 4"),
    ("1e12,de,300", "line 4"),
    ("2023-03-01T02:00:00Z,,300", "line 4"),
])
def test_intensity_series_refuses_impossible_readings(tmp_path, line, problem):
    text = "timestamp,region,gCO2e/kWh\n2023-03-01T00:00:00Z,de,380\n2023-03-01T01:00:00Z,de,360\n"
    path = _write(tmp_path, "grid.csv", text + line + "\n")
    with pytest.raises(traces.TraceError) as err:
        traces.read_intensity_csv(path)
    assert problem in str(err.value) and "grid.csv" in str(err.value)
    assert len(traces.read_intensity_csv(_write(tmp_path, "ok.csv", text))) == 2


@pytest.mark.parametrize("text", ["", "\x00\x01", "a,a\n1,2\n", "timestamp,region\n"])
def test_intensity_unreadable_files_raise_trace_error(tmp_path, text):
    with pytest.raises(traces.TraceError):
        traces.read_intensity_csv(_write(tmp_path, "g.csv", text))

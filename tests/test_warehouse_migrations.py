import duckdb
import pytest

from warehouse import SchemaTooNew, Warehouse
from warehouse.migrate import available, current_version, migrate


def test_migrations_are_numbered_and_applied_once(tmp_path):
    path = tmp_path / "w.duckdb"
    con = duckdb.connect(str(path))
    applied = migrate(con)
    assert applied == [m.version for m in available()]
    assert migrate(con) == []
    assert current_version(con) == available()[-1].version
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for table in ("racks", "nodes", "gpus", "gpu_samples", "gpu_events", "jobs", "job_runs",
                  "allocations", "gpu_samples_1m", "gpu_samples_1h", "carbon_intensity"):
        assert table in tables
    con.close()


def test_units_are_in_column_names():
    con = duckdb.connect()
    migrate(con)
    cols = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'gpu_samples'"
    ).fetchall()}
    assert {"power_w", "energy_j", "temp_c", "mem_used_mib", "util_pct", "sm_clock_mhz"} <= cols


def test_a_database_from_a_newer_gpulens_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "new.duckdb"
    with Warehouse(path):
        pass
    con = duckdb.connect(str(path))
    newest = available()[-1].version
    con.execute("INSERT INTO schema_migrations VALUES (?, 'from_the_future', now()::TIMESTAMP)",
                [newest + 1])
    con.close()
    before = path.read_bytes()
    with pytest.raises(SchemaTooNew, match=f"schema version {newest + 1}.*newer gpulens"):
        Warehouse(path)
    assert path.read_bytes() == before


def test_reopening_keeps_data(tmp_path):
    from tests.support.frames import samples

    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.ingest("samples", samples(ticks=3)).result()
    with Warehouse(path) as wh:
        assert wh.reader().execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 24

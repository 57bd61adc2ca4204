"""How the telemetry tiers are stored (issue 17): column types that compress, rows in an
order that compresses, and values the narrower types cannot hold stored as NULL and
counted, never failing the rollup. Sizes themselves are measured by
bench/vs_prometheus.py (docs/performance.md), not asserted here."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.support.frames import T0, samples
from warehouse import Warehouse
from warehouse.migrate import available, current_version, migrate
from warehouse.store import BLOCK_SIZE_B

TYPES = ("SELECT table_name, data_type FROM information_schema.columns "
         "WHERE column_name = 'energy_j' AND table_name LIKE 'gpu_samples%' ORDER BY 1")


@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    yield w
    w.close()


def test_energy_types_per_tier(wh):
    # the raw tier keeps the cumulative counter (~1e10 J to the mJ) in DOUBLE; a
    # bucket's energy (at most MJ) is REAL, 7 significant digits
    assert wh.reader().execute(TYPES).fetchall() == [
        ("gpu_samples", "DOUBLE"), ("gpu_samples_1h", "FLOAT"), ("gpu_samples_1m", "FLOAT")]


def shuffled(table: pa.Table, seed: int = 3) -> pa.Table:
    return table.take(pa.array(np.random.default_rng(seed).permutation(table.num_rows)))


def stored_order(cur, table: str) -> list[tuple]:
    # rowid follows the order rows were appended in
    return cur.execute(f"SELECT ts, node, gpu_index FROM {table} ORDER BY rowid").fetchall()


def test_rollup_rows_are_stored_in_time_then_gpu_order(wh):
    # 40 minutes of 4 nodes x 8 GPUs, delivered in random order: 1,280 minute rows,
    # which the hash aggregate hands back in no particular order
    wh.ingest("samples", shuffled(samples(ticks=160, gpus=8, nodes=4))).result()
    wh.ingest("samples", samples(start=T0 + timedelta(hours=1), ticks=8, gpus=8,
                                 nodes=4)).result()
    wh.rollup().result()
    cur = wh.reader()
    minute = stored_order(cur, "gpu_samples_1m")
    assert len(minute) == 42 * 32 and minute == sorted(minute)
    hour = stored_order(cur, "gpu_samples_1h")
    assert len(hour) == 64 and hour == sorted(hour)


def test_energy_beyond_real_is_null_and_counted_and_the_rest_rolls_up(wh):
    # the bulk path takes any float32 power: 1e37 W for four 15-s samples is 6e38 J in
    # a minute, which REAL cannot hold; that minute's energy is NULL, counted, the
    # rest stands
    batch = samples(ticks=8, gpus=2, power_w=100.0)  # two minutes
    power = np.full(batch.num_rows, 100.0, dtype="float32")
    power[[0, 2, 4, 6]] = 1e37  # minute 0, GPU 0
    batch = batch.set_column(batch.schema.get_field_index("power_w"), "power_w",
                             pa.array(power))
    wh.ingest("samples", batch).result()
    result = wh.rollup().result()
    assert result.energy_unstorable == 1
    cur = wh.reader()
    rows = cur.execute("SELECT ts, gpu_index, energy_j FROM gpu_samples_1m "
                       "ORDER BY ts, gpu_index").fetchall()
    assert rows == [(T0, 0, None), (T0, 1, 6000.0),
                    (T0 + timedelta(minutes=1), 0, 6000.0),
                    (T0 + timedelta(minutes=1), 1, 6000.0)]
    assert cur.execute("SELECT sum(energy_j) FROM gpu_samples_1h").fetchall() == [(18000.0,)]
    assert cur.execute("SELECT count(*) FROM rollup_pending").fetchall() == [(0,)]


def test_a_bucket_energy_keeps_seven_significant_digits(wh):
    wh.ingest("samples", samples(ticks=4, gpus=1, power_w=698.123)).result()
    wh.rollup().result()
    (energy,), = wh.reader().execute("SELECT energy_j FROM gpu_samples_1m").fetchall()
    expected = 4 * 15 * float(np.float32(698.123))
    assert energy == pytest.approx(expected, rel=6e-8)


def older_warehouse(path: str = ":memory:", before: str = "narrow_energy"
                    ) -> duckdb.DuckDBPyConnection:
    """A warehouse at the migration before ``before`` (012 by default), with rollup rows
    of five energies and power 250.5 W."""
    con = duckdb.connect(path)
    current_version(con)
    ours = next(m.version for m in available() if m.name == before)
    for mig in available()[:ours - 1]:
        con.execute(mig.sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, now()::TIMESTAMP)",
                    [mig.version, mig.name])
    for table in ("gpu_samples_1m", "gpu_samples_1h"):
        # 1e300 J: beyond REAL (012 nulls it); REAL holds at most 3.4e38 once 012 ran
        huge = 1e300 if before == "narrow_energy" else 1e30
        for k, energy in enumerate([42_000.123, 2.5e6, None, float("nan"), huge]):
            con.execute(f"INSERT INTO {table} (ts, node, gpu_index, samples, energy_j, "
                        "power_w_avg) VALUES ($1, 'n1', $2, 4, $3, 250.5)",
                        [T0, k, energy])
    return con


def test_migration_012_keeps_every_rollup_row_and_its_energy():
    con = older_warehouse()
    assert 12 in migrate(con)
    for table in ("gpu_samples_1m", "gpu_samples_1h"):
        rows = con.execute(f"SELECT gpu_index, samples, energy_j, power_w_avg FROM {table} "
                           "ORDER BY gpu_index").fetchall()
        assert [r[0] for r in rows] == [0, 1, 2, 3, 4]
        assert all(r[1] == 4 and r[3] == 250.5 for r in rows)
        energy = [r[2] for r in rows]
        assert energy[0] == pytest.approx(42_000.123, rel=6e-8)
        assert energy[1] == 2.5e6
        # NULL and NaN stay; what REAL cannot hold becomes NULL, and is counted
        assert energy[2] is None and math.isnan(energy[3]) and energy[4] is None
    assert con.execute("SELECT value FROM meta WHERE key = 'migration_012_energy_nulled'"
                       ).fetchall() == [("2",)]


def test_bulk_appends_go_through_the_wal(tmp_path):
    # optimistic writes of large appends left a third of a bulk-loaded file as free
    # blocks (docs/performance.md); the warehouse turns them off for every connection
    w = Warehouse(tmp_path / "w.duckdb")
    try:
        cur = w.reader()
        assert cur.execute("SELECT current_setting('enable_optimistic_write')"
                           ).fetchall() == [(False,)]
        for k in range(3):  # three bulk batches of 131k rows
            w.ingest("samples", samples(start=T0 + k * timedelta(hours=18), ticks=4100,
                                        gpus=8, nodes=4)).result()
        w.checkpoint().result()
        used, free = w.reader().execute(
            "SELECT used_blocks, free_blocks FROM pragma_database_size() "
            "WHERE database_name = current_database()").fetchall()[0]
        assert free <= 2 and used > 0
    finally:
        w.close()


def test_migration_012_survives_a_crash_before_the_checkpoint(tmp_path):
    # DuckDB replays an ALTER's USING expression from the WAL; a function in it (isfinite,
    # abs) made the replay fail and the warehouse could not be opened again
    path = str(tmp_path / "old.duckdb")
    older_warehouse(path).close()
    code = ("import os, duckdb\n"
            "from warehouse.migrate import migrate\n"
            f"con = duckdb.connect({path!r})\n"
            "con.execute(\"SET checkpoint_threshold = '1GB'\")\n"
            "assert 12 in migrate(con)\n"
            "os._exit(0)  # killed: the migration is in the WAL only\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[1])
    con = duckdb.connect(path)
    try:
        assert con.execute(TYPES.replace("gpu_samples%", "gpu_samples_1%")).fetchall() == [
            ("gpu_samples_1h", "FLOAT"), ("gpu_samples_1m", "FLOAT")]
        assert con.execute("SELECT count(*), count(energy_j) FROM gpu_samples_1m"
                           ).fetchall() == [(5, 3)]
    finally:
        con.close()


POWER_TYPES = ("SELECT table_name, column_name, data_type FROM information_schema.columns "
               "WHERE column_name LIKE 'power_w%' AND table_name LIKE 'gpu_samples%' "
               "ORDER BY 1, 2")


def test_power_types_per_tier(wh):
    # raw readings as they came (REAL); rollup power to the mW as DOUBLE (migration 017)
    assert wh.reader().execute(POWER_TYPES).fetchall() == [
        ("gpu_samples", "power_w", "FLOAT"),
        ("gpu_samples_1h", "power_w_avg", "DOUBLE"), ("gpu_samples_1h", "power_w_max", "DOUBLE"),
        ("gpu_samples_1m", "power_w_avg", "DOUBLE"), ("gpu_samples_1m", "power_w_max", "DOUBLE")]


def test_rollup_power_is_rounded_to_the_milliwatt(wh):
    # readings of 698.123 and 250.001 W: their mean has more digits; the minute keeps
    # it to the mW, the hour the weighted mean of minutes to the mW, both exact decimals
    wh.ingest("samples", samples(ticks=2, gpus=1, power_w=698.123)).result()
    wh.ingest("samples", samples(start=T0 + timedelta(seconds=30), ticks=1, gpus=1,
                                 power_w=250.001)).result()
    wh.rollup().result()
    cur = wh.reader()
    raw = [float(np.float32(698.123))] * 2 + [float(np.float32(250.001))]
    (avg, mx), = cur.execute("SELECT power_w_avg, power_w_max FROM gpu_samples_1m").fetchall()
    assert avg == round(sum(raw) / 3, 3) == 548.749 and mx == 698.123
    (h_avg, h_max), = cur.execute("SELECT power_w_avg, power_w_max FROM gpu_samples_1h"
                                  ).fetchall()
    assert h_avg == 548.749 and h_max == 698.123


def power_rows(con, table):
    return con.execute(f"SELECT gpu_index, samples, energy_j, power_w_avg, power_w_max "
                       f"FROM {table} ORDER BY gpu_index").fetchall()


def older_power_warehouse(path: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A warehouse before migration 017 with rollup power of every kind (REAL)."""
    con = older_warehouse(path, before="rollup_power_mw")
    for table in ("gpu_samples_1m", "gpu_samples_1h"):
        for k, power in enumerate([548.7493286, None, float("nan"), float("inf"), 3e30],
                                  start=5):
            con.execute(f"INSERT INTO {table} (ts, node, gpu_index, samples, power_w_avg, "
                        "power_w_max) VALUES ($1, 'n1', $2, 4, $3, $3)", [T0, k, power])
    return con


def check_power_migrated(con) -> None:
    for table in ("gpu_samples_1m", "gpu_samples_1h"):
        rows = power_rows(con, table)
        assert [r[0] for r in rows] == list(range(10))  # every row kept
        assert all(r[3] == 250.5 and r[4] is None for r in rows[:5])  # already to the mW
        assert rows[5][3] == rows[5][4] == 548.749
        assert rows[6][3] is None and math.isnan(rows[7][3]) and rows[8][3] == math.inf
        assert rows[9][3] == float(np.float32(3e30))  # beyond BIGINT mW: as it was
        assert rows[0][2] == pytest.approx(42_000.123, rel=6e-8)  # energy untouched


def test_migration_017_rounds_rollup_power_to_the_milliwatt():
    con = older_power_warehouse()
    version = next(m.version for m in available() if m.name == "rollup_power_mw")
    assert version in migrate(con)
    check_power_migrated(con)


def test_migration_017_survives_a_crash_before_the_checkpoint(tmp_path):
    path = str(tmp_path / "old.duckdb")
    older_power_warehouse(path).close()
    version = next(m.version for m in available() if m.name == "rollup_power_mw")
    code = ("import os, duckdb\n"
            "from warehouse.migrate import migrate\n"
            f"con = duckdb.connect({path!r})\n"
            "con.execute(\"SET checkpoint_threshold = '1GB'\")\n"
            f"assert {version} in migrate(con)\n"
            "os._exit(0)  # killed: the migration is in the WAL only\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[1])
    con = duckdb.connect(path)
    try:
        check_power_migrated(con)
    finally:
        con.close()


def block_size(cur) -> int:
    return cur.execute("SELECT block_size FROM pragma_database_size() "
                       "WHERE database_name = current_database()").fetchall()[0][0]


def test_a_new_file_has_small_blocks_and_an_old_one_keeps_its_own(tmp_path):
    # every table rounds up to whole blocks (issue 17: 43.7 against 50.0 MiB on the
    # benchmark's week with 64 KiB blocks instead of DuckDB's 256 KiB)
    with Warehouse(tmp_path / "new.duckdb") as w:
        w.ingest("samples", samples(ticks=8, gpus=2)).result()
        assert block_size(w.reader()) == BLOCK_SIZE_B == 64 * 1024
        other = duckdb.connect(str(tmp_path / "new.duckdb"))  # DuckDB's defaults: allowed
        assert other.execute("SELECT count(*) FROM gpu_samples").fetchall() == [(16,)]
        other.close()
    old = tmp_path / "old.duckdb"
    duckdb.connect(str(old)).close()  # DuckDB's default blocks, 256 KiB
    with Warehouse(old) as w:
        w.ingest("samples", samples(ticks=8, gpus=2)).result()
        assert block_size(w.reader()) == 256 * 1024
    with Warehouse(old) as w:  # and reopens
        assert w.reader().execute("SELECT count(*) FROM gpu_samples").fetchall() == [(16,)]

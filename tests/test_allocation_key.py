"""The allocation key kept as a column (migration 26, issue 17): the kept hours' read
checks weight each allocation by ``allocations.alloc_key`` instead of hashing its
primary key on every read. The writer sets it; the migration sets every stored row to
the value the kept moments were summed with, so no kept hour changes."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.migrations import migrated_before
from warehouse import Warehouse
from warehouse.migrate import available, migrate
from warehouse.schema import SCHEMAS

T = datetime(2026, 11, 2)
#: The key as migration 23's code hashed it on each read, from the table's columns.
HASHED = "(hash(job_id, run_index, node, gpu_index) >> 32)"
ROWS = [("j1", 0, "n0", 0, T, T + timedelta(hours=3), None, None),
        ("j1", 1, "n0", 0, T + timedelta(hours=3), None, 0.25, None),
        ("jöb\u00a02", 0, "nœud-7", 7, T, T + timedelta(minutes=5), None, [1, 2]),
        ("3", 2147483647, "", -32768, None, None, 1.0, [])]


def test_the_migration_keys_every_row_with_the_value_the_kept_moments_used():
    con = duckdb.connect()
    ours = migrated_before(con, "allocation_key")
    con.executemany("INSERT INTO allocations VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
    before = con.execute(f"SELECT *, {HASHED} FROM allocations ORDER BY ALL").fetchall()
    assert migrate(con) == [m.version for m in available() if m.version >= ours]
    after = con.execute("SELECT * FROM allocations ORDER BY ALL").fetchall()
    assert after == before  # every column as it was, and the key the reads hashed
    with pytest.raises(duckdb.ConstraintException):  # still the primary key
        con.execute("INSERT INTO allocations VALUES ('j1', 0, 'n0', 0, NULL, NULL, NULL, "
                    "NULL, 1)")
    with pytest.raises(duckdb.ConstraintException):  # a writer must set it
        con.execute("INSERT INTO allocations (job_id, run_index, node, gpu_index) "
                    "VALUES ('j9', 0, 'n0', 0)")


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_row = st.tuples(_text, st.integers(-2**31, 2**31 - 1), _text, st.integers(-2**15, 2**15 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(_row, min_size=1, max_size=6, unique=True))
def test_the_writer_keys_each_row_from_its_primary_key_and_an_update_keeps_it(keys):
    """Any job id, run, node and GPU index the scheduler's parsers can deliver: the key is
    the hash of the stored row's key columns, and a re-delivery that changes the row's
    times or share leaves it."""
    def batch(end):
        return pa.Table.from_pylist(
            [dict(job_id=j, run_index=r, node=n, gpu_index=g, start_ts=T, end_ts=end,
                  share=None, gpu_i_ids=None) for j, r, n, g in keys],
            schema=SCHEMAS["allocations"])

    with Warehouse(":memory:") as w:
        w.ingest("allocations", batch(None)).result()
        got = w.reader().execute(f"SELECT alloc_key, {HASHED} FROM allocations").fetchall()
        assert len(got) == len(keys) and all(a == b for a, b in got)
        w.ingest("allocations", batch(T + timedelta(hours=1))).result()
        again = w.reader().execute(
            f"SELECT alloc_key, {HASHED}, end_ts FROM allocations").fetchall()
        assert sorted(r[:2] for r in again) == sorted(got)
        assert {r[2] for r in again} == {T + timedelta(hours=1)}

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.frames import T0, samples
from warehouse import BatchError, Warehouse
from warehouse.ingest import repeats_a_key


@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    yield w
    w.close()


def count(wh, table):
    return wh.reader().execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_samples_delivered_twice_are_stored_once(wh):
    batch = samples(ticks=4, gpus=8)
    assert wh.ingest("samples", batch).result() == 32
    wh.ingest("samples", batch).result()
    assert count(wh, "gpu_samples") == 32


def test_overlapping_batches_add_only_new_rows(wh):
    wh.ingest("samples", samples(ticks=4)).result()
    wh.ingest("samples", samples(start=T0 + timedelta(seconds=30), ticks=4)).result()
    assert count(wh, "gpu_samples") == 6 * 8  # ticks 0..5


def test_retried_batches_do_not_double_count_energy_after_rollup(wh):
    batch = samples(ticks=8, power_w=100.0)
    for _ in range(3):
        wh.ingest("samples", batch).result()
        wh.rollup().result()
    energy = wh.reader().execute("SELECT sum(energy_j) FROM gpu_samples_1h").fetchone()[0]
    assert energy == pytest.approx(8 * 8 * 100.0 * 15.0)


def test_events_idempotent_including_node_wide_events(wh):
    ev = pa.table({
        "ts": [T0, T0], "node": ["node000", "node000"], "gpu_index": pa.array([0, None], pa.int16()),
        "kind": ["xid", "lost"], "code": [79, 0], "detail": ["fallen off the bus", "node lost"],
    })
    wh.ingest("events", ev).result()
    wh.ingest("events", ev).result()
    assert count(wh, "gpu_events") == 2


def test_job_state_is_upserted_and_keeps_known_values(wh):
    submitted = pd.DataFrame({"job_id": ["42"], "name": ["pretrain-7b"], "state": ["PENDING"],
                              "submit_ts": [T0], "gpus": [64]})
    running = pd.DataFrame({"job_id": ["42"], "state": ["RUNNING"],
                            "start_ts": [T0 + timedelta(minutes=5)]})
    wh.ingest("jobs", submitted).result()
    wh.ingest("jobs", running).result()
    wh.ingest("jobs", running).result()
    row = wh.reader().execute(
        "SELECT name, state, submit_ts, start_ts, gpus FROM jobs").fetchall()
    assert row == [("pretrain-7b", "RUNNING", T0, T0 + timedelta(minutes=5), 64)]


def test_upsert_batch_with_repeated_key_keeps_the_last_row(wh):
    runs = pa.table({"job_id": ["7", "7"], "run_index": [0, 0], "state": ["RUNNING", "FAILED"]})
    wh.ingest("runs", runs).result()
    assert wh.reader().execute("SELECT state FROM job_runs").fetchall() == [("FAILED",)]


def test_zone_aware_timestamps_are_stored_as_utc(wh):
    df = pd.DataFrame({"ts": [pd.Timestamp("2026-11-02 10:00", tz="Europe/Berlin")],
                       "node": ["n"], "gpu_index": [0]})
    wh.ingest("samples", df).result()
    assert wh.reader().execute("SELECT ts FROM gpu_samples").fetchone()[0] == datetime(
        2026, 11, 2, 9, 0)


def test_bad_batches_are_refused_with_the_column_named(wh):
    with pytest.raises(BatchError, match="unknown column.*'powr_w'"):
        wh.ingest("samples", pd.DataFrame({"ts": [T0], "node": ["n"], "gpu_index": [0],
                                           "powr_w": [1.0]}))
    with pytest.raises(BatchError, match="'power_w'.*cannot be read as float"):
        wh.ingest("samples", pd.DataFrame({"ts": [T0], "node": ["n"], "gpu_index": [0],
                                           "power_w": ["12 W"]}))
    with pytest.raises(BatchError, match="NULL in key column 'node'"):
        wh.ingest("samples", pa.table({"ts": [T0], "node": pa.array([None], pa.string()),
                                       "gpu_index": [0]}))
    with pytest.raises(BatchError, match="unknown batch kind"):
        wh.ingest("sample", samples())
    with pytest.raises(BatchError, match="pass a pyarrow.Table"):
        wh.ingest("samples", [{"ts": T0}])
    assert count(wh, "gpu_samples") == 0


def test_a_failed_write_does_not_stop_the_writer(wh):
    fut = wh.write(lambda con: con.execute("SELECT * FROM no_such_table"))
    with pytest.raises(Exception, match="no_such_table"):
        fut.result()
    assert wh.ingest("samples", samples(ticks=1)).result() == 8


def test_readers_in_other_threads_see_committed_rows(wh):
    import threading

    wh.ingest("samples", samples(ticks=2)).result()
    seen = []
    t = threading.Thread(target=lambda: seen.append(count(wh, "gpu_samples")))
    t.start()
    t.join()
    assert seen == [16]


def test_reads_do_not_hold_back_checkpoints(tmp_path):
    """A reader's last result keeps a transaction open; fresh cursors let it end."""
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest("samples", samples(ticks=4)).result()
        assert wh.reader().execute("SELECT * FROM gpu_samples").fetchone() is not None
        wh.ingest("samples", samples(start=T0 + timedelta(minutes=5), ticks=4)).result()
        wh.checkpoint().result()  # raises TransactionException if a read were still open


def test_upsert_redelivered_rows_change_nothing_and_changes_still_land(wh):
    """An unchanged re-delivery is skipped by the upsert's WHERE (issue 17); a changed
    value, a LIST column included, still lands, and a NULL still keeps the stored value."""
    def allocs(end, ids, share):
        return pa.table({"job_id": ["9", "9"], "run_index": [0, 0], "node": ["n1", "n1"],
                         "gpu_index": pa.array([0, 1], pa.int16()), "start_ts": [T0, T0],
                         "end_ts": pa.array([end, end], pa.timestamp("us")),
                         "share": pa.array([share, None], pa.float64()),
                         "gpu_i_ids": pa.array([ids, None], pa.list_(pa.int32()))})

    def stored():
        return wh.reader().execute("SELECT gpu_index, end_ts, share, gpu_i_ids "
                                   "FROM allocations ORDER BY gpu_index").fetchall()

    wh.ingest("allocations", allocs(None, [1, 2], 0.5)).result()
    first = stored()
    wh.ingest("allocations", allocs(None, [1, 2], 0.5)).result()
    assert stored() == first
    end = T0 + timedelta(hours=1)
    wh.ingest("allocations", allocs(end, [3], None)).result()
    assert stored() == [(0, end, 0.5, [3]), (1, end, None, None)]


_KEY_VALUES = {
    "i": (pa.int64(), st.one_of(st.none(), st.integers(-3, 3))),
    "u": (pa.uint64(), st.one_of(st.none(), st.sampled_from([0, 1, 2**63, 2**64 - 1]))),
    "s": (pa.string(), st.one_of(st.none(), st.sampled_from(["", "a", "b", "node01"]))),
    "t": (pa.timestamp("us"), st.one_of(st.none(), st.sampled_from([T0, T0 + timedelta(1)]))),
}


@pytest.mark.property
@given(st.lists(st.sampled_from(sorted(_KEY_VALUES)), min_size=1, max_size=3, unique=True)
       .flatmap(lambda keys: st.tuples(st.just(keys), st.lists(
           st.tuples(*(_KEY_VALUES[k][1] for k in keys)), max_size=12))),
       st.booleans())
def test_property_a_repeated_key_is_found_as_pandas_finds_it(case, chunked):
    """The upsert's check for a repeated key (issue 17: a cheaper check than Arrow's
    group_by) finds a repeat exactly when pandas does, NULL equal to NULL."""
    keys, rows = case
    cols = {k: pa.array([r[i] for r in rows], _KEY_VALUES[k][0]) for i, k in enumerate(keys)}
    table = pa.table(cols)
    if chunked and table.num_rows > 1:  # batches concatenated by a source
        table = pa.concat_tables([table.slice(0, 1), table.slice(1)])
    expected = bool(pd.DataFrame(rows, dtype=object).duplicated().any()) if rows else False
    assert repeats_a_key(keys, table) == expected


_ALLOC_TIMES = st.sampled_from([None, T0, T0 + timedelta(hours=1), T0 + timedelta(hours=5)])
_ALLOC = st.fixed_dictionaries({
    "job_id": st.sampled_from(["j0", "j1", "j2"]), "run_index": st.integers(0, 1),
    "node": st.sampled_from(["n0", "n1"]), "gpu_index": st.integers(0, 2),
    "start_ts": _ALLOC_TIMES, "end_ts": _ALLOC_TIMES})
_KEPT = ("allocations", "run_nodes", "run_node_counts", "run_shapes")


@pytest.mark.property
@given(st.lists(st.lists(_ALLOC, min_size=1, max_size=10), min_size=1, max_size=3),
       st.integers(1, 4))
def test_property_an_upsert_in_slices_keeps_what_the_whole_batch_does(empty_wh, deliveries,
                                                                       rows):
    """An upserted batch is written UPSERT_ROWS rows per transaction (issue 17: DuckDB
    holds a transaction's rows in memory): a key repeated across slices keeps its last row
    whole, a job cut by a slice keeps its runs' nodes and shapes, as one transaction does."""
    from tests.support.allocations import CLEAR_ALLOCATIONS
    from warehouse import ingest

    def deliver() -> dict:
        for batch in deliveries:
            empty_wh.ingest("allocations", pd.DataFrame(batch)).result()
        cur = empty_wh.reader()
        kept = {t: sorted(cur.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in _KEPT}
        empty_wh.write(lambda con: con.execute(CLEAR_ALLOCATIONS)).result()
        return kept

    whole = deliver()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest, "UPSERT_ROWS", rows)
        assert deliver() == whole


@pytest.mark.property
@given(st.lists(st.one_of(st.none(), st.sampled_from(["j0", "j1", "j2"])), max_size=30),
       st.integers(1, 5))
def test_property_upsert_slices_cut_only_where_the_job_changes(jobs, rows):
    """Each slice of an upsert ends where the next row's job differs (a run's GPUs are
    written together) and holds UPSERT_ROWS rows or more, but the last; together they are
    the batch, in order."""
    from warehouse import ingest

    table = pa.table({"job_id": pa.array(jobs, pa.string()),
                      "run_index": pa.array(range(len(jobs)), pa.int32())})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest, "UPSERT_ROWS", rows)
        parts = ingest.upsert_slices("runs", table)
    assert pa.concat_tables(parts).to_pylist() == table.to_pylist()
    ends = list(np.cumsum([p.num_rows for p in parts]))[:-1]
    assert all(jobs[e] != jobs[e - 1] for e in ends)
    assert all(p.num_rows >= rows for p in parts[:-1])
    assert all(p.num_rows for p in parts) or parts[0].num_rows == len(jobs) == 0

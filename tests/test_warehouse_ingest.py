from datetime import datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest

from tests.support.frames import T0, samples
from warehouse import BatchError, Warehouse


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

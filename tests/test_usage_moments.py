"""The usage ledger's allocation moments (``gpu_usage_hours.alloc_m2``, ``alloc_gpu_us``,
migration 22, issue 17 review): before the recheck window an hour of ``gpu_usage_1h``
was recomputed only when its day's allocated microseconds changed, so an allocation
moved within its day with its length kept, or moved to another GPU at the same times,
left the per-run GPU-seconds and energy stale for good. Ledger rows kept before the
migration (no moments) keep the former check and do not make the history due."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest

from tests.support.allocations import edit_allocations, rebuild_derived
from tests.support.frames import T0, samples
from warehouse import Warehouse, analytics, usage
from warehouse.analytics import Options
from warehouse.schema import SCHEMAS

H = timedelta(hours=1)
OPTS = Options(recheck_days=2.0)
NOW = T0 + 5 * H + timedelta(days=5)  # the hours below: 5 days before the recheck window


def _alloc(start: datetime, end: datetime, gpu: int = 0, *, job: str = "a", run: int = 0,
           node: str = "node000") -> pa.Table:
    return pa.Table.from_pylist([{"job_id": job, "run_index": run, "node": node,
                                  "gpu_index": gpu, "start_ts": start, "end_ts": end}],
                                schema=SCHEMAS["allocations"])


def _refresh(w: Warehouse) -> int:
    """Hours of ``gpu_usage_1h`` recomputed by refreshes until none is pending, and at
    least as many as it takes the chunks of days before the recheck window
    (kept_hours.HEAL_DAYS each) to reach the first hour."""
    hours, pending, n = 0, True, 0
    while pending or n < 3:
        out = w.write(lambda con: analytics.refresh(con, NOW, OPTS)).result()
        hours, pending, n = hours + out["usage_hours"], out["usage_pending"], n + 1
    return hours


def _usage(w: Warehouse) -> pd.DataFrame:
    return w.reader().execute("SELECT * EXCLUDE (util_s) FROM gpu_usage_1h"
                              " ORDER BY ts, node, job_id NULLS FIRST").df()


def _fresh(w: Warehouse) -> pd.DataFrame:
    """``gpu_usage_1h`` computed again from nothing."""
    w.write(lambda con: (con.execute("DELETE FROM gpu_usage_1h"),
                         con.execute("DELETE FROM gpu_usage_hours"))).result()
    _refresh(w)
    return _usage(w)


@pytest.fixture()
def w():
    """Four hours of two GPUs (random power and utilisation, so each GPU and hour
    differs), refreshed once with the allocations of the test."""
    with Warehouse(":memory:") as wh:
        wh.ingest("samples", samples(start=T0, ticks=4 * 60, gpus=2, interval_s=60.0)
                  ).result()
        wh.rollup().result()
        yield wh


def _moved(w: Warehouse, before: pa.Table, move) -> None:
    w.ingest("allocations", before).result()
    _refresh(w)
    kept = _usage(w)
    move(w)
    assert _refresh(w) > 0
    got = _usage(w)
    assert not got.equals(kept)  # the move changed the usage rows
    pd.testing.assert_frame_equal(got, _fresh(w))


def test_an_allocation_moved_by_an_hour_within_its_day_is_recomputed(w):
    _moved(w, _alloc(T0 + H, T0 + 2 * H), lambda w: w.ingest(
        "allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result())


def test_an_allocation_moved_to_another_gpu_is_recomputed(w):
    _moved(w, _alloc(T0, T0 + 2 * H, gpu=0),
           lambda w: edit_allocations(w, "UPDATE allocations SET gpu_index = 1"))


@pytest.mark.parametrize("taker", [dict(job="b"), dict(run=1), dict(node="node001")])
def test_gpu_time_given_to_another_job_run_or_node_is_recomputed(w, taker):
    """A run's end learnt late and its last hour given to another job, run or node at the
    same GPU index: the hours' microseconds, time moment and GPU-weighted microseconds
    stay, the allocation key moment (migration 23) does not."""
    def move(w):
        w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
        w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H, **taker)).result()
    _moved(w, _alloc(T0 + H, T0 + 3 * H), move)


def test_ledger_rows_kept_before_the_key_are_signed_not_recomputed(w):
    """Rows kept before migration 23 (no key moment): the refresh signs them where their
    other moments are the allocations' now, recomputing none; a later change of job is
    then seen."""
    w.ingest("allocations", _alloc(T0 + H, T0 + 3 * H)).result()
    _refresh(w)
    w.write(lambda con: con.execute("UPDATE gpu_usage_hours SET alloc_key_us = NULL")
            ).result()
    assert _refresh(w) == 0
    assert w.reader().execute("SELECT count(*) - count(alloc_key_us) FROM gpu_usage_hours"
                              ).fetchall()[0][0] == 0
    w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
    w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H, job="b")).result()
    assert _refresh(w) == 24
    pd.testing.assert_frame_equal(_usage(w), _fresh(w))


def test_ledger_rows_the_minute_tier_no_longer_reaches_are_not_signed(w):
    """The day check reads no ledger row before the minute tier's reach: rows there are
    not given the key moment, and one whose allocations changed since (it keeps none) is
    not looked at again by every refresh for as long as the 1-hour tier keeps it."""
    w.ingest("allocations", _alloc(T0 + H, T0 + 3 * H)).result()
    _refresh(w)
    w.write(lambda con: (  # retention passed the first two hours of the minute tier
        con.execute("DELETE FROM gpu_samples_1m WHERE ts < $t", {"t": T0 + 2 * H}),
        con.execute("UPDATE gpu_usage_hours SET alloc_key_us = NULL"),
        con.execute("UPDATE allocations SET start_ts = start_ts + INTERVAL 10 MINUTE,"
                    " end_ts = end_ts + INTERVAL 10 MINUTE"),  # moved, too
        rebuild_derived(con))).result()
    _refresh(w)
    assert w.write(lambda con: usage.fill_keys(con)).result() == 0
    rows = w.reader().execute("SELECT ts >= $t, count(*), count(alloc_key_us)"
                              " FROM gpu_usage_hours GROUP BY ALL ORDER BY ALL",
                              {"t": T0 + 2 * H}).fetchall()
    assert rows == [(False, 2, 0), (True, rows[1][1], rows[1][1])]


def test_days_before_the_window_are_compared_a_chunk_per_refresh(w):
    """The day check reads the allocations of a chunk of days per refresh
    (kept_hours.HEAL_DAYS, going back from the recheck window), not of the minute tier's
    whole reach (~11 s of CPU per refresh over 90 days at 24,576 GPUs): a move 3 days
    before the window is found by the second refresh, whose chunk reaches its day."""
    w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
    _refresh(w)
    w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result()
    w.write(lambda con: con.execute("DELETE FROM meta WHERE key = $k",
                                    {"k": usage.HEAL_KEY})).result()  # from the window
    computed = [w.write(lambda con: analytics.refresh(con, NOW, OPTS)).result()[
        "usage_hours"] for _ in range(3)]
    assert computed == [0, 24, 0]
    pd.testing.assert_frame_equal(_usage(w), _fresh(w))


def test_ledger_rows_without_moments_keep_the_former_check(w):
    """Rows kept before migration 22: no hour is due for lacking moments, a move of the
    same length is not seen (as before), a changed length still is."""
    w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
    _refresh(w)
    w.write(lambda con: con.execute(
        "UPDATE gpu_usage_hours SET alloc_m2 = NULL, alloc_gpu_us = NULL")).result()
    assert _refresh(w) == 0
    w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result()  # same length
    assert _refresh(w) == 0
    w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H + H / 2)).result()
    assert _refresh(w) == 24  # the day's hours, with moments again
    assert w.reader().execute("SELECT count(alloc_m2) FROM gpu_usage_hours WHERE ts < $d",
                              {"d": T0 + 24 * H}).fetchall()[0][0] == 24
    pd.testing.assert_frame_equal(_usage(w), _fresh(w))

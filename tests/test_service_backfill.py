"""The history backfill in-process: what is missing is persisted, a failed or killed
backfill resumes at the next start, /healthz says when history is incomplete
(issue 12, section 6; the SIGKILL version is tests/test_service_history.py)."""

from datetime import datetime, timedelta

import pytest

from gpulens.config import load
from gpulens.service import Service, _load_ranges, _merge_ranges
from tests.support.frames import samples
from warehouse import Warehouse, meta

L1 = datetime(2026, 11, 2, 12, 0, 0)  # the first run's first live tick
STEP = timedelta(seconds=15)
CONFIG = load(None, env={"GPULENS_SIMULATOR_HISTORY_DAYS": "0.25"})  # 6 hours


class HistorySource:
    """Writes 15-s samples of 8 GPUs, one hour per chunk; ``crash_after``: chunks
    written before it fails as a killed process would stop."""

    name, interval_s = "sim", 15.0

    def __init__(self, live_start, crash_after=None):
        self.live_start = live_start
        self.crash_after = crash_after
        self.asked = []

    def history(self, ingest, start, end, *, progress=True, on_chunk=None):
        self.asked.append((start, end))
        t, chunks = start, 0
        while t < end:
            e = min(t + timedelta(hours=1), end)
            if chunks == self.crash_after:
                raise RuntimeError("killed")
            ingest("samples", samples(start=t, ticks=int((e - t) / STEP)))
            chunks += 1
            if on_chunk is not None:
                on_chunk(e)
            t = e


class NoReports:
    def catch_up(self):
        return None


def run_history(db, source):
    svc = Service(CONFIG, now=lambda: source.live_start)
    svc.warehouse = Warehouse(db)
    svc.reports = NoReports()
    svc.sources = [source]
    try:
        svc._start_history(source)
        for thread in svc._threads:
            thread.join(60)
        return svc.health.report(source.live_start, stale_after_s=45)["backfill"], \
            meta.get(svc.warehouse.reader(), "history.missing.sim")
    finally:
        svc.warehouse.close()


def tick_counts(db, start, end):
    with Warehouse(db) as wh:
        return dict(wh.reader().execute(
            "SELECT ts, count(*) FROM gpu_samples WHERE ts >= $1 AND ts < $2 GROUP BY ts",
            [start, end]).fetchall())


def test_a_backfill_that_stopped_midway_is_resumed_at_the_next_start(tmp_path):
    db = tmp_path / "w.duckdb"
    start = L1 - timedelta(hours=6)
    backfill, stored = run_history(db, HistorySource(L1, crash_after=2))
    assert backfill["state"] == "failed" and backfill["complete"] is False
    assert backfill["missing"] == [[(start + timedelta(hours=2)).isoformat() + "Z",
                                    L1.isoformat() + "Z"]]
    assert _load_ranges(stored) == [(start + timedelta(hours=2), L1)]
    with Warehouse(db) as wh:  # the first run collected live for 5 minutes
        wh.ingest("samples", samples(start=L1, ticks=20)).result()

    l2 = L1 + timedelta(minutes=10)
    second = HistorySource(l2)
    backfill, stored = run_history(db, second)
    # the interrupted range, then the gap since the last live sample
    assert second.asked == [(start + timedelta(hours=2), L1), (L1 + 20 * STEP, l2)]
    assert backfill["state"] == "done" and backfill["complete"] is True
    assert backfill["missing"] == [] and _load_ranges(stored) == []
    counts = tick_counts(db, start, l2)
    missing = [start + i * STEP for i in range(int((l2 - start) / STEP))
               if counts.get(start + i * STEP) != 8]
    assert not missing, f"{len(missing)} ticks missing, first {missing[:3]}"


def test_a_complete_history_asks_for_nothing_at_the_next_start(tmp_path):
    db = tmp_path / "w.duckdb"
    run_history(db, HistorySource(L1))
    again = HistorySource(L1)  # restarted within the same tick
    backfill, stored = run_history(db, again)
    assert again.asked == []  # the last sample is the tick before: no gap
    later = HistorySource(L1 + STEP)  # a tick later, and nothing was collected live
    run_history(db, later)
    assert later.asked == [(L1, L1 + STEP)]
    assert backfill["complete"] is True and _load_ranges(stored) == []


def test_missing_ranges_older_than_the_window_are_not_written(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:  # left by a run long ago, before the 6-hour window
        wh.write(lambda con: meta.put(con, "history.missing.sim", '[["2026-10-01T00:00:00", '
                                      '"2026-11-02T07:00:00"]]')).result()
    source = HistorySource(L1)
    run_history(db, source)
    assert source.asked == [(L1 - timedelta(hours=6), L1)]


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"a": 1}', '[["x", "y"]]', "[[1]]", "null"])
def test_a_stored_range_list_that_is_not_one_counts_as_none(text):
    assert _load_ranges(text) == []


def test_ranges_merge_when_they_touch_and_empty_ones_go():
    t = L1
    h = timedelta(hours=1)
    assert _merge_ranges([(t + 2 * h, t + 3 * h), (t, t + h), (t + h, t + 2 * h),
                          (t + 5 * h, t + 5 * h), (t + 4 * h, t + 6 * h)]) == [
        (t, t + 3 * h), (t + 4 * h, t + 6 * h)]

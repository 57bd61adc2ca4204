"""Collection keeps its rhythm while the writer is busy with analytics (issue 12, section 6).

The service collects each source in a loop of its own; live batches go to the writer as
urgent work, which runs between the steps of maintenance (rollups, the analytics
refresh). A tick is skipped only when a cycle ran a whole interval past it, and counted.
"""

import threading
import time
from datetime import datetime, timedelta

import pytest

from gpulens.config import load
from gpulens.service import Service, next_tick
from tests.support.frames import samples
from warehouse import Warehouse, analytics, usage
from warehouse.writer import yield_to_urgent

T = datetime(2026, 11, 2, 12, 0, 0)


class TickSource:
    """Records the ticks it is asked for; ``slow``: seconds to sleep per call number."""

    name = "dcgm"

    def __init__(self, interval_s, slow=None):
        self.interval_s = interval_s
        self.calls = []
        self.slow = slow or {}

    def collect(self, ts):
        self.calls.append(ts)
        time.sleep(self.slow.get(len(self.calls), 0))
        return [("samples", samples(start=ts, ticks=1))]


@pytest.fixture
def svc():
    service = Service(load(None, env={}))
    service.warehouse = Warehouse(":memory:")
    yield service
    service.stopping.set()
    for thread in service._threads:
        thread.join(30)
    service.warehouse.close()


def run_until(svc, source, calls, timeout=60):
    svc.sources = [source]
    svc._start_collection(source)
    deadline = time.monotonic() + timeout
    while len(source.calls) < calls and time.monotonic() < deadline:
        time.sleep(0.05)
    svc.stopping.set()
    for thread in svc._threads:
        thread.join(30)
    assert len(source.calls) >= calls


def gaps(ticks, interval_s):
    """Ticks missing between consecutive collected ticks."""
    step = timedelta(seconds=interval_s)
    return sum((b - a) // step - 1 for a, b in zip(ticks, ticks[1:], strict=False))


def test_next_tick_runs_a_late_tick_and_skips_only_whole_intervals():
    assert next_tick(T, T + timedelta(seconds=3), 15) == (T + timedelta(seconds=15), 0)
    # the cycle ended 14 s after the next tick: that tick still runs, late
    assert next_tick(T, T + timedelta(seconds=29), 15) == (T + timedelta(seconds=15), 0)
    # a whole interval past it: skipped, the tick after runs
    assert next_tick(T, T + timedelta(seconds=30), 15) == (T + timedelta(seconds=30), 1)
    assert next_tick(T, T + timedelta(seconds=77), 15) == (T + timedelta(seconds=75), 4)


def test_no_tick_is_lost_while_long_maintenance_holds_the_writer(svc):
    """A 3-s maintenance job (60 steps, as the analytics refresh's slices) on the
    writer while a 1-s source collects: each live batch waits one step, never the job."""
    steps, done = 60, threading.Event()

    def maintenance(con):
        for _ in range(steps):
            con.execute("SELECT count(*) FROM range(100000)").fetchall()
            time.sleep(0.05)
            yield_to_urgent()
        done.set()

    source = TickSource(interval_s=1.0)
    svc.warehouse.write(maintenance)
    run_until(svc, source, calls=6)
    assert done.is_set(), "the maintenance job did not finish while collecting"
    assert svc.health.sources["dcgm"].skipped_ticks == 0
    assert gaps(source.calls, 1.0) == 0
    stored = svc.warehouse.reader().execute(
        "SELECT count(DISTINCT ts), count(*) FROM gpu_samples").fetchone()
    assert stored == (len(source.calls), 8 * len(source.calls))
    assert svc.warehouse.urgent_waits()["max_steps"] <= 1


def test_a_cycle_longer_than_an_interval_skips_ticks_and_counts_them(svc):
    source = TickSource(interval_s=0.5, slow={2: 1.6})  # the second cycle takes 3+ intervals
    run_until(svc, source, calls=4)
    skipped = svc.health.sources["dcgm"].skipped_ticks
    assert skipped >= 2
    assert skipped == gaps(source.calls, 0.5)
    report = svc.health.report(datetime.utcnow(), stale_after_s=60)
    assert report["sources"]["dcgm"]["skipped_ticks"] == skipped
    assert report["sources"]["dcgm"]["last_skipped_at"] is not None


def test_live_batches_run_between_the_slices_of_a_usage_refresh(monkeypatch):
    """The real analytics refresh backfilling gpu_usage_1h (several 6-hour slices): a
    live batch queued during its first slice is written before the refresh ends."""
    wh = Warehouse(":memory:")
    start = datetime(2026, 11, 1)
    for day in range(3):  # 3 days of minute telemetry: hours for the usage table
        wh.ingest("samples", samples(start=start + timedelta(days=day), ticks=1440,
                                     interval_s=60, gpus=2)).result()
    wh.rollup().result()
    order, queued, first = [], threading.Event(), threading.Event()
    recompute = usage._recompute

    def gated(con, params):
        recompute(con, params)
        order.append(("slice", params["lo"]))
        if not first.is_set():
            first.set()
            assert queued.wait(10)  # the live batch is queued while this slice runs

    monkeypatch.setattr(usage, "_recompute", gated)
    now = start + timedelta(days=3)
    refresh = wh.write(lambda con: analytics.refresh(con, now))
    assert first.wait(30)
    live = wh.ingest("samples", samples(start=now, ticks=1), urgent=True)
    live.add_done_callback(lambda f: order.append(("live", None)))
    queued.set()
    result = refresh.result(60)
    live.result(10)
    wh.close()
    slices = [o for o in order if o[0] == "slice"]
    assert result["usage_hours"] == 48 and len(slices) == 8
    assert order.index(("live", None)) == 1  # right after the slice it was queued in


def test_a_wall_clock_stepped_back_does_not_stall_collection(svc):
    offset = [timedelta(0)]
    svc.now = lambda: datetime.utcnow() + offset[0]

    class Stepping(TickSource):
        def collect(self, ts):
            if len(self.calls) == 2:
                offset[0] = -timedelta(hours=1)  # NTP steps the clock back an hour
            return super().collect(ts)

    source = Stepping(interval_s=0.5)
    run_until(svc, source, calls=5, timeout=20)  # not an hour
    assert source.calls[3] < source.calls[2]  # stamped with the clock's new time

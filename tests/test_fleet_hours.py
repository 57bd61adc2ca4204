"""The fleet's GPU-hours per hour (``fleet_hours_1h``, warehouse/fleet_hours.py, issue 17):
the weekly report's reporting, allocated, utilised and throttled GPU-hours read from the
table equal the live join they replaced, by hand and on a seeded cluster; a table that
misses or mistakes an hour is not read; the refresh is incremental and keeps retention."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from tests.support.allocations import edit_allocations
from tests.support.dash_seed import NOW, seed_dashboard
from warehouse import Warehouse
from warehouse import fleet_hours as fh
from warehouse.analytics import refresh
from warehouse.queries import weekly

H = timedelta(hours=1)
KEYS = ["reporting_gpu_h", "allocated_gpu_h", "utilised_gpu_h", "throttled_gpu_h"]

#: The live query warehouse/queries/weekly.py ran before the table (the reference).
_FORMER_SQL = """
WITH al AS (
    SELECT job_id, run_index, node, gpu_index, greatest(start_ts, $start::TIMESTAMP) AS lo,
           least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS hi
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
alb AS (
    SELECT al.*, unnest(range(date_trunc('hour', lo), hi, INTERVAL 1 HOUR)) AS ts
    FROM al WHERE hi > lo
),
ah AS (
    SELECT node, gpu_index, ts,
           least(3600.0, sum(epoch(least(hi, ts + INTERVAL 1 HOUR))
                             - epoch(greatest(lo, ts)))) / 3600.0 AS af
    FROM alb GROUP BY ALL
),
h AS (
    SELECT coalesce(h.covered_s, 0) AS cov, coalesce(h.util_pct_avg, 0) AS util,
           coalesce(h.throttle_thermal_s, 0) AS thr, coalesce(a.af, 0) AS af
    FROM gpu_samples_1h h LEFT JOIN ah a USING (node, gpu_index, ts)
    WHERE h.ts >= $start AND h.ts < $end
)
SELECT sum(cov) / 3600 AS reporting_gpu_h,
       sum(af * cov) / 3600 AS allocated_gpu_h,
       sum(af * cov * util / 100) / 3600 AS utilised_gpu_h,
       sum(thr) / 3600 AS throttled_gpu_h
FROM h
"""


def _former(cur, start, end) -> dict:
    row = cur.execute(_FORMER_SQL, {"start": start, "end": end}).df().iloc[0]
    return {k: 0.0 if pd.isna(v) else float(v) for k, v in row.items()}


def _rows(wh) -> int:
    return wh.reader().execute("SELECT count(*) FROM fleet_hours_1h").fetchall()[0][0]


def _served(wh, start, end) -> bool:
    return fh.table_serves(wh.reader(), fh.ceil_hour(start), fh.floor_hour(end))


@pytest.fixture(scope="module")
def seeded():
    """tests/support/dash_seed.py's 32-GPU cluster, two days, refreshed until the table
    holds every hour."""
    w = Warehouse(":memory:")
    seed_dashboard(w)
    while True:
        out = w.write(lambda con: refresh(con, NOW, None)).result()
        if not out["usage_pending"] and not out["fleet_pending"]:
            break
    yield w
    w.close()


@pytest.mark.parametrize("start,end", [
    (NOW - 48 * H, NOW),  # whole hours: the table alone
    (NOW - 30 * H - timedelta(minutes=20), NOW - timedelta(minutes=35)),  # ragged ends
    (NOW - 10 * H, NOW - 10 * H + timedelta(minutes=50)),  # no whole hour
    (NOW - 80 * H, NOW + 5 * H),  # hours before and after the telemetry
    (NOW - 80 * H - timedelta(minutes=7), NOW - 60 * H),  # only hours before it
])
def test_the_table_gives_the_former_live_answers(seeded, start, end):
    assert _rows(seeded) >= 48
    got = weekly.fleet_hours(seeded.reader(), start=start, end=end)
    want = _former(seeded.reader(), start, end)
    if end > NOW - 48 * H:
        assert want["reporting_gpu_h"] > 0 and want["allocated_gpu_h"] > 0
        assert want["utilised_gpu_h"] > 0
    assert {k: got[k] for k in KEYS} == pytest.approx(want, rel=1e-12, abs=1e-12)
    if end - start > 2 * H and end > NOW - 48 * H:
        assert fh.table_serves(seeded.reader(), *fh.held_span(
            seeded.reader(), fh.ceil_hour(start), fh.floor_hour(end)))


def test_a_week_that_begins_before_the_telemetry_is_read_from_the_table():
    """The hours without rows in the 1-hour tier add nothing: a range that begins before
    the first (a first week, a stop) or ends after the last is read from the table. A
    kept row's sum that no check covers, doubled, shows which was read."""
    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        while w.write(lambda con: refresh(con, NOW, None)).result()["fleet_pending"]:
            pass
        start, end = NOW - 80 * H, NOW + 3 * H
        live = _former(w.reader(), start, end)
        assert not _served(w, start, end)  # the table has no rows before the telemetry
        w.write(lambda con: con.execute(
            "UPDATE fleet_hours_1h SET reporting_s = 2 * reporting_s WHERE ts = "
            "(SELECT min(ts) FROM fleet_hours_1h)")).result()
        first = w.reader().execute("SELECT reporting_s FROM fleet_hours_1h ORDER BY ts "
                                   "LIMIT 1").fetchall()[0][0] / 2 / 3600
        got = weekly.fleet_hours(w.reader(), start=start, end=end)
        assert first > 0
        assert got["reporting_gpu_h"] == pytest.approx(live["reporting_gpu_h"] + first,
                                                       rel=1e-12)
        assert got["allocated_gpu_h"] == pytest.approx(live["allocated_gpu_h"], rel=1e-12)
    finally:
        w.close()


def test_by_hand():
    """One node of 2 GPUs, two hours of the 1-hour tier (3,600 covered seconds each,
    60 % utilised, GPU 0 throttled 90 s in the first hour); an allocation holds GPU 0
    from 00:30 to 01:30: allocated 0.5 + 0.5 GPU-hours, utilised 0.6 of that."""
    t = datetime(2026, 11, 9)
    w = Warehouse(":memory:")
    try:
        w.ingest("nodes", pd.DataFrame({"node": ["n1"], "rack": ["r1"], "partition": ["p"],
                                        "gpus": [2]})).result()
        for ts, gpu, thr in [(t, 0, 90.0), (t, 1, 0.0), (t + H, 0, 0.0), (t + H, 1, 0.0)]:
            w.write(lambda con, ts=ts, gpu=gpu, thr=thr: con.execute(
                "INSERT INTO gpu_samples_1h (ts, node, gpu_index, covered_s, util_pct_avg, "
                "samples, throttle_thermal_s) VALUES ($ts, 'n1', $gpu, 3600, 60, 240, $thr)",
                {"ts": ts, "gpu": gpu, "thr": thr})).result()
        w.ingest("allocations", pd.DataFrame({
            "job_id": ["J"], "run_index": [0], "node": ["n1"], "gpu_index": [0],
            "start_ts": [t + 0.5 * H], "end_ts": [t + 1.5 * H]})).result()
        out = w.write(lambda con: fh.refresh_fleet_hours(con, t + 2 * H, recheck_days=2,
                                                            idle_pct=5.0)
                      ).result()
        assert out["fleet_hours"] == 2 and out["fleet_pending"] == 0
        assert _served(w, t, t + 2 * H)
        got = fh.fleet_hours(w.reader(), start=t, end=t + 2 * H)
        assert got == pytest.approx({"reporting_gpu_h": 4.0, "allocated_gpu_h": 1.0,
                                     "utilised_gpu_h": 0.6, "throttled_gpu_h": 0.025})
        # a second refresh finds nothing to do
        again = w.write(lambda con: fh.refresh_fleet_hours(con, t + 2 * H, recheck_days=2,
                                                            idle_pct=5.0)
                        ).result()
        assert again["fleet_hours"] == 0
    finally:
        w.close()


def test_a_stale_or_missing_hour_is_computed_live():
    """History written after the refresh (a GPU-hour added to the 1-hour tier, an
    allocation's end learnt late, both before the recheck window) and a deleted row: the
    table no longer serves the range, and the answer is the live one."""
    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        while w.write(lambda con: refresh(con, NOW, None)).result()["fleet_pending"]:
            pass
        start, end = NOW - 48 * H, NOW
        assert _served(w, start, end)
        first = w.reader().execute("SELECT min(ts) FROM gpu_samples_1h").fetchall()[0][0]
        w.write(lambda con: con.execute(
            "INSERT INTO gpu_samples_1h (ts, node, gpu_index, covered_s, util_pct_avg, "
            "samples) SELECT ts, node, gpu_index + 100, 3600, 50, 240 FROM gpu_samples_1h "
            "WHERE ts = $ts", {"ts": first + 2 * H})).result()
        assert not _served(w, start, end)
        got = weekly.fleet_hours(w.reader(), start=start, end=end)
        assert {k: got[k] for k in KEYS} == pytest.approx(_former(w.reader(), start, end),
                                                          rel=1e-12)
        # the refresh, run with a recheck window that no longer covers that hour, does not
        # see it; so the reader's check is what keeps the answer right
        w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=0.5, idle_pct=5.0)).result()
        assert not _served(w, start, end)
        # an allocation's end learnt late, and a lost row
        w.write(lambda con: con.execute("DELETE FROM fleet_hours_1h WHERE ts = $ts",
                                        {"ts": first + 2 * H})).result()
        w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=0.5, idle_pct=5.0)).result()
        assert _served(w, start, end)
        edit_allocations(
            w, "UPDATE allocations SET end_ts = start_ts + INTERVAL 10 MINUTE "
            "WHERE rowid = (SELECT min(rowid) FROM allocations WHERE start_ts >= $ts "
            "AND end_ts > start_ts + INTERVAL 1 HOUR)", {"ts": first})
        assert not _served(w, start, end)
        got = weekly.fleet_hours(w.reader(), start=start, end=end)
        assert {k: got[k] for k in KEYS} == pytest.approx(_former(w.reader(), start, end),
                                                          rel=1e-12)
        w.write(lambda con: con.execute("DELETE FROM fleet_hours_1h WHERE ts = $ts",
                                        {"ts": NOW - 5 * H})).result()
        assert not _served(w, start, end)
    finally:
        w.close()


def test_refresh_takes_the_newest_hours_first_and_keeps_retention():
    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        first = w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=2, idle_pct=5.0,
                                                            max_hours=10)).result()
        assert first["fleet_hours"] == 10 and first["fleet_pending"] > 0
        newest = w.reader().execute("SELECT min(ts), max(ts) FROM fleet_hours_1h"
                                    ).fetchall()[0]
        assert newest == (NOW - 10 * H, NOW - H)
        cut = NOW - 24 * H
        w.write(lambda con: con.execute("DELETE FROM gpu_samples_1h WHERE ts < $c",
                                        {"c": cut})).result()
        w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=2, idle_pct=5.0,
                                                       max_hours=0)
                ).result()
        lo, hi, n = w.reader().execute("SELECT min(ts), max(ts), count(*) FROM fleet_hours_1h"
                                       ).fetchall()[0]
        assert (lo, hi, n) == (cut, NOW - H, 24)
    finally:
        w.close()


def test_a_reader_without_the_tables_computes_live():
    """A lake's reader or a copy made before migration 16 has no fleet_hours_1h: the
    figures are computed live, and a table of that name in another attached database is
    not taken for it."""
    from warehouse.queries import energy as qe

    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        w.write(lambda con: con.execute("DROP TABLE fleet_hours_1h")).result()
        cur = w.reader()
        cur.execute("ATTACH ':memory:' AS other")
        cur.execute("CREATE TABLE other.fleet_hours_1h AS SELECT TIMESTAMP '2026-11-01' AS ts")
        start, end = NOW - 24 * H, NOW
        got = weekly.fleet_hours(cur, start=start, end=end)
        assert {k: got[k] for k in KEYS} == pytest.approx(_former(cur, start, end), rel=1e-12)
        assert len(qe.run_energy(cur, start=start, end=end, resolution=None)) > 0
    finally:
        w.close()

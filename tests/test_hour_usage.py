"""The 1-hour tier's job and idle energy kept per hour (``gpu_usage_from_1h``,
warehouse/hour_usage.py, issue 17): over whole hours the energy queries read it and give
the live 1-hour tier path's answers; a stale hour, another idle threshold or a ragged
range is computed live."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from tests.support.allocations import edit_allocations
from tests.support.dash_seed import NOW, seed_dashboard
from warehouse import Warehouse, hour_usage, usage
from warehouse import fleet_hours as fh
from warehouse.analytics import Options
from warehouse.queries import energy as qe

H = timedelta(hours=1)
IDLE = Options().idle_util_pct


def _refresh(w, idle_pct=IDLE):
    while w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=2,
                                                     idle_pct=idle_pct)).result()[
            "fleet_pending"]:
        pass


def _hour_only() -> Warehouse:
    """tests/support/dash_seed.py's cluster with its 1-minute tier gone (history older
    than the minute tier's retention): energy takes the 1-hour tier's path."""
    w = Warehouse(":memory:")
    seed_dashboard(w)
    w.write(lambda con: con.execute("DELETE FROM gpu_samples_1m")).result()
    _refresh(w)
    return w


@pytest.fixture(scope="module")
def hour_only():
    w = _hour_only()
    yield w
    w.close()


@pytest.fixture
def kept():
    """A warehouse of its own (the test changes it) and the last day's window, which
    the kept tables serve."""
    w = _hour_only()
    window = {"start": NOW - 24 * H, "end": NOW}
    assert _paths(w, **window) == [hour_usage.PATH]
    yield w, window
    w.close()


def _same_as_live(w, window) -> None:
    got = qe.run_energy(w.reader(), **window).sort_values(["job_id", "run_index"],
                                                          ignore_index=True)
    want = qe.run_energy(w.reader(), resolution="hour", **window).sort_values(
        ["job_id", "run_index"], ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)


def _paths(w, start, end, idle_pct=IDLE):
    return [p.path for p in qe._parts(w.reader(), start, end, None, idle_pct, idle_pct)]


def test_the_seed_has_every_kind_of_row(hour_only):
    kinds = dict(hour_only.reader().execute(
        "SELECT kind, count(*) FROM gpu_usage_from_1h GROUP BY kind").fetchall())
    # partly held GPU-hours (jobs starting and ending inside hours) and idle ones
    assert set(kinds) == {"held", "free", "idle_power", "part", "part_run"}
    assert kinds["part_run"] > 0 and kinds["idle_power"] > 10


@pytest.mark.parametrize("start,end", [(NOW - 48 * H, NOW), (NOW - 30 * H, NOW - 3 * H)])
def test_whole_hours_read_the_table_with_the_live_answers(hour_only, start, end):
    w = {"start": start, "end": end}
    assert _paths(hour_only, **w) == [hour_usage.PATH]
    got = qe.run_energy(hour_only.reader(), **w).sort_values(["job_id", "run_index"],
                                                             ignore_index=True)
    want = qe.run_energy(hour_only.reader(), resolution="hour", **w).sort_values(
        ["job_id", "run_index"], ignore_index=True)
    assert len(want) > 5 and want["facility_kwh"].sum() > 0
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)
    got = qe.idle_energy(hour_only.reader(), **w)
    want = qe.idle_energy(hour_only.reader(), resolution="hour", **w)
    assert set(want["state"]) == {"unallocated", "allocated_idle", "busy"}
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)
    for by in ("user_name", "job_id"):
        got = qe.job_energy(hour_only.reader(), by=by, **w).sort_values(by, ignore_index=True)
        want = qe.job_energy(hour_only.reader(), by=by, resolution="hour", **w).sort_values(
            by, ignore_index=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)
    # some runs only (energy of failures): the same rows of the same runs
    keys = [(j, int(r)) for j, r in qe.run_energy(hour_only.reader(), **w)[
        ["job_id", "run_index"]].head(4).itertuples(index=False)]
    got = qe.run_energy(hour_only.reader(), runs=keys, **w).sort_values(
        ["job_id", "run_index"], ignore_index=True)
    want = qe.run_energy(hour_only.reader(), runs=keys, resolution="hour", **w).sort_values(
        ["job_id", "run_index"], ignore_index=True)
    assert len(got) == 4
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)


def test_ragged_ranges_another_threshold_and_stale_hours_are_live(hour_only):
    # a range not on whole hours
    assert _paths(hour_only, NOW - 20 * H - timedelta(minutes=10), NOW) == ["hour"]
    # another idle threshold than the rows were computed with
    assert _paths(hour_only, NOW - 20 * H, NOW, idle_pct=IDLE + 10) == ["hour"]
    got = qe.idle_energy(hour_only.reader(), start=NOW - 20 * H, end=NOW,
                         idle_util_pct=IDLE + 10)
    want = qe.idle_energy(hour_only.reader(), start=NOW - 20 * H, end=NOW,
                          idle_util_pct=IDLE + 10, resolution="hour")
    pd.testing.assert_frame_equal(got, want)


def test_a_changed_hour_is_live_until_the_refresh_recomputes_it(kept):
    w, window = kept
    edit_allocations(w, "UPDATE allocations SET end_ts = end_ts - INTERVAL 20 MINUTE "
                     "WHERE rowid = (SELECT min(rowid) FROM allocations "
                     "WHERE end_ts > $start + INTERVAL 2 HOUR AND end_ts < $end)", window)
    assert _paths(w, **window) == ["hour"]
    _refresh(w)  # within recheck_days: the hour's allocations changed
    assert _paths(w, **window) == [hour_usage.PATH]
    _same_as_live(w, window)


def test_hours_the_usage_table_holds_get_no_rows():
    """Where gpu_usage_1h holds an hour (the 1-minute tier reached it), the refresh keeps
    only the fleet's GPU-hours for it: the energy queries read gpu_usage_1h."""
    from warehouse.analytics import refresh

    w = Warehouse(":memory:")
    try:
        seed_dashboard(w)
        while w.write(lambda con: refresh(con, NOW, None)).result()["usage_pending"]:
            pass
        _refresh(w)
        n, held = w.reader().execute(
            "SELECT (SELECT count(*) FROM gpu_usage_from_1h), (SELECT count(*) FROM "
            "fleet_hours_1h WHERE energy_idle_pct IS NOT NULL)").fetchall()[0]
        usage_hours = w.reader().execute("SELECT count(*) FROM gpu_usage_hours").fetchall()
        assert usage_hours[0][0] >= 40
        hours = w.reader().execute("SELECT count(*) FROM fleet_hours_1h").fetchall()[0][0]
        assert held == hours - usage_hours[0][0] and n < 200
        assert [p.path for p in usage.plan(w.reader(), NOW - 24 * H, NOW)] == ["table"]
    finally:
        w.close()


def test_a_changed_share_is_live_until_the_refresh_recomputes_it(kept):
    """Review of issue 17: a share learnt after the hour was kept (a shard/MPS job first
    delivered whole) changes the hour's energy split but not its allocated
    microseconds; the kept rows served the old split (a run's GPU-hours 40 -> 64)."""
    w, window = kept
    edit_allocations(w, "UPDATE allocations SET share = 0.25 WHERE rowid IN (SELECT rowid "
                     "FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > "
                     "$start ORDER BY rowid LIMIT 20)", window)
    _same_as_live(w, window)
    assert _paths(w, **window) == ["hour"]
    _refresh(w)  # within recheck_days: the hours' allocation signatures changed
    assert _paths(w, **window) == [hour_usage.PATH]
    _same_as_live(w, window)

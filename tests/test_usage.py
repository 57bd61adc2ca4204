"""The precomputed usage table (warehouse/usage.py) against the live 1-minute path.

The seeded cluster is tests/support/dash_seed.py's (32 GPUs, 48 h of 1-minute telemetry,
an hourly carbon-intensity series) plus two jobs whose allocations start and end inside
a minute and overlap each other on one GPU. Each comparison computes a query live (the
usage tables emptied), runs the analytics refresh, and computes it again from the table:
the results must agree within 1e-6.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

from tests.support.dash_seed import NOW, seed_dashboard
from tests.support.frames import samples
from warehouse import Retention, Warehouse, analytics, usage
from warehouse.analytics import Options
from warehouse.queries import energy as qe
from warehouse.queries import utilisation as qu

H, M, S = timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1)
OPTS = Options(node_overhead_w=600.0, pue=1.3, fallback_g_per_kwh=400.0)
#: 24 h starting and ending inside an hour and inside a minute: a live head and tail
DAY = {"start": NOW - 24 * H - 25 * M - 10 * S, "end": NOW - 25 * M - 10 * S}
RUN_COLS = ["gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg"]


def _odd_jobs(wh: Warehouse) -> None:
    """Jobs 2001 and 2002 on the free GPU n08/3, bounds inside minutes, overlapping."""
    runs = [("2001", 0, NOW - 15 * H + 20.5 * S, NOW - 3 * H - 10 * S, "COMPLETED"),
            ("2002", 0, NOW - 5 * H + 30 * S, NOW - 4 * H, "COMPLETED")]
    frame = pd.DataFrame(runs, columns=["job_id", "run_index", "start_ts", "end_ts", "state"])
    wh.ingest("jobs", frame[["job_id", "state"]].assign(user_name="erin", gpus=1)).result()
    wh.ingest("runs", frame.assign(gpus=1)).result()
    wh.ingest("allocations", frame.drop(columns="state").assign(node="n08", gpu_index=3)
              ).result()


def _clear(con) -> None:
    con.execute("DELETE FROM gpu_usage_1h")
    con.execute("DELETE FROM gpu_usage_hours")


def refresh(wh: Warehouse, now: datetime = NOW, opts: Options = OPTS) -> dict:
    return wh.write(lambda con: analytics.refresh(con, now, opts)).result()


def table(wh: Warehouse) -> pd.DataFrame:
    return wh.reader().execute("SELECT * FROM gpu_usage_1h ORDER BY ALL").df()


def ledger(wh: Warehouse) -> pd.DataFrame:
    return wh.reader().execute("SELECT * FROM gpu_usage_hours ORDER BY ts").df()


def live_and_table(wh: Warehouse, fn) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``fn(cur)`` computed live (no usage rows), then after a refresh from the table."""
    wh.write(_clear).result()
    live = fn(wh.reader())
    refresh(wh)
    return live, fn(wh.reader())


def assert_same(live: pd.DataFrame, fast: pd.DataFrame, key: str | list[str],
                cols: list[str]) -> None:
    live, fast = live.set_index(key).sort_index(), fast.set_index(key).sort_index()
    assert list(fast.index) == list(live.index) and len(live) > 0
    np.testing.assert_allclose(fast[cols].to_numpy(float), live[cols].to_numpy(float),
                               rtol=1e-6, atol=1e-9)


@pytest.fixture(scope="module")
def wh():
    with Warehouse(":memory:") as w:
        seed_dashboard(w)
        _odd_jobs(w)
        yield w


# ------------------------------------------------------------------ the range's parts

def test_parts_of_a_range():
    t = datetime(2026, 11, 18, 10, 20)
    got = usage.split(t, t + 5 * H, table=(t + 40 * M, t + 4 * H + 40 * M), reach=t - 9 * H)
    assert got == [usage.Part("minute", t, t + 40 * M),
                   usage.Part("table", t + 40 * M, t + 4 * H + 40 * M),
                   usage.Part("minute", t + 4 * H + 40 * M, t + 5 * H)]
    # before the minute tier's reach the 1-hour tier; a long live part too
    assert usage.split(t - 3 * H, t, table=None, reach=t - H) == [
        usage.Part("hour", t - 3 * H, t - H), usage.Part("minute", t - H, t)]
    assert usage.split(t - 30 * H * 24, t, table=None, reach=t - 30 * H * 24) == [
        usage.Part("hour", t - 30 * H * 24, t)]
    assert usage.split(t, t + H, table=None, reach=None) == [usage.Part("hour", t, t + H)]


def test_the_table_serves_whole_hours_between_live_minutes(wh):
    refresh(wh)
    parts = usage.plan(wh.reader(), **DAY)
    assert [p.path for p in parts] == ["minute", "table", "minute"]
    assert parts[1].start == datetime(2026, 11, 17, 12) and parts[1].end == NOW - H
    assert usage.plan(wh.reader(), **DAY, resolution="minute") == [
        usage.Part("minute", DAY["start"], DAY["end"])]
    # idle energy uses only hours computed with its threshold
    assert [p.path for p in usage.plan(wh.reader(), **DAY, idle_pct=7.5)] == ["minute"]


# --------------------------------------------------------- equal to the minute path

def test_run_energy_equals_the_minute_path(wh):
    live, fast = live_and_table(wh, lambda cur: qe.run_energy(cur, opts=OPTS, **DAY))
    exact = qe.run_energy(wh.reader(), opts=OPTS, resolution="minute", **DAY)
    assert_same(live, fast, ["job_id", "run_index"], RUN_COLS)
    assert_same(exact, fast, ["job_id", "run_index"], RUN_COLS)
    assert {"2001", "2002"} <= set(fast["job_id"])


def test_job_energy_and_failure_carbon_follow(wh):
    live, fast = live_and_table(
        wh, lambda cur: qe.job_energy(cur, by="user_name", opts=OPTS, **DAY))
    assert_same(live, fast, "user_name", RUN_COLS)
    live, fast = live_and_table(wh, lambda cur: qe.failure_carbon(cur, opts=OPTS, **DAY))
    assert_same(live, fast, ["job_id", "run_index"], ["lost_kwh", "lost_carbon_kg"])


def test_job_energy_keeps_a_run_whose_job_has_no_row(wh):
    """A run whose job has no ``jobs`` row (not yet polled, or purged) keeps its energy:
    per job under its id with no name, per user under no user, as run_energy gives it
    (job_energy joins the usage rows with the jobs, issue 17)."""
    gone = wh.reader().execute("SELECT * FROM jobs WHERE job_id = '2002'").df()
    wh.write(lambda con: con.execute("DELETE FROM jobs WHERE job_id = '2002'")).result()
    try:
        runs = qe.run_energy(wh.reader(), opts=OPTS, **DAY).set_index("job_id")
        assert runs.loc["2002", "carbon_kg"] > 0
        per_job = qe.job_energy(wh.reader(), opts=OPTS, **DAY).set_index("job_id")
        assert per_job.loc["2002", "carbon_kg"] == pytest.approx(runs.loc["2002", "carbon_kg"])
        assert per_job.loc["2002", ["name", "user_name"]].isna().all()
        per_user = qe.job_energy(wh.reader(), by="user_name", opts=OPTS, **DAY)
        nobody = per_user[per_user["user_name"].isna()]
        assert nobody["carbon_kg"].tolist() == pytest.approx([runs.loc["2002", "carbon_kg"]])
    finally:
        wh.ingest("jobs", gone).result()


def test_idle_energy_equals_the_minute_path(wh):
    live, fast = live_and_table(wh, lambda cur: qe.idle_energy(cur, **DAY))
    assert list(fast["state"]) == ["allocated_idle", "busy", "unallocated"]
    assert_same(live, fast, "state", ["gpu_hours", "gpu_kwh", "mean_power_w"])
    # in whole minutes every covered GPU-second is in one state, and the hour (less 30 s)
    # in which 2001 and 2002 overlap on n08/3 counts for both
    whole = {"start": NOW - 24 * H - 25 * M, "end": NOW - 25 * M}
    covered = wh.reader().execute(
        "SELECT sum(covered_s) / 3600 FROM gpu_samples_1m WHERE ts >= $start AND ts < $end",
        whole).fetchone()[0]
    states = qe.idle_energy(wh.reader(), **whole)
    assert states["gpu_hours"].sum() == pytest.approx(covered + (3600 - 30) / 3600, rel=1e-9)


@pytest.mark.parametrize("by", ["user", "rack"])
def test_utilisation_by_equals_the_minute_path(wh, by):
    live, fast = live_and_table(wh, lambda cur: qu.utilisation_by(cur, by=by, **DAY))
    assert_same(live, fast, "group", ["allocated_gpu_h", "utilised_gpu_h", "util_pct"])
    scoped = lambda cur: qu.utilisation_by(cur, by=by, rack="r04", **DAY)  # noqa: E731
    live, fast = live_and_table(wh, scoped)
    assert_same(live, fast, "group", ["allocated_gpu_h", "utilised_gpu_h", "util_pct"])


def test_job_utilisation_equals_the_minute_path(wh):
    live, fast = live_and_table(wh, lambda cur: qu.job_utilisation(cur, **DAY))
    assert_same(live, fast, "job_id", ["allocated_gpu_h", "util_pct"])
    assert fast.set_index("job_id").loc["2002", "allocated_gpu_h"] == pytest.approx(
        1 - 30 / 3600)


def _usage_parts_before(cur, sqls, keys, start, end, limit, partition=None, rack=None):
    """warehouse/queries/utilisation.py's parts before issue 17's eleventh round: each
    part's every row to pandas, summed, sorted and cut there."""
    params = qu.scope_params(start, end, partition, rack, runs=None, idle_pct=0.0)
    frames = [cur.execute(*usage.bind(sqls[p.path], **{**params, "start": p.start,
                                                        "end": p.end})).df()
              for p in usage.plan(cur, start, end)]
    df = usage.combine(frames, keys, ["allocated_gpu_h", "utilised_gpu_h"])
    df = df.sort_values(["allocated_gpu_h", *keys], ascending=[False, True],
                        na_position="last", ignore_index=True).head(limit)
    df["util_pct"] = 100.0 * df["utilised_gpu_h"] / df["allocated_gpu_h"].where(
        df["allocated_gpu_h"] != 0)
    return df


@pytest.mark.parametrize("limit", [1, 3, 2000])
@pytest.mark.parametrize("scope", [(None, None), ("train", None), (None, "r02"),
                                   ("train", "r01"), ("nope", None)])
def test_the_largest_groups_are_cut_in_sql_as_pandas_cut_them(wh, limit, scope):
    """The parts are summed, sorted (ties by key) and cut in SQL: the rows, their order
    and sums are those every part's rows gave in pandas, over a range read from the
    table between live minutes (three parts) and from live minutes alone, in every
    scope (each part's parameters renamed apart)."""
    refresh(wh)
    cur = wh.reader()
    part, rack = scope
    assert len(usage.plan(cur, DAY["start"], DAY["end"])) == 3
    cols = ["allocated_gpu_h", "utilised_gpu_h", "util_pct"]
    for start, end in ((DAY["start"], DAY["end"]), (NOW - 20 * M - 5 * S, NOW - 5 * M)):
        w = {"start": start, "end": end, "partition": part, "rack": rack, "limit": limit}
        for sqls, keys, got in (
                (qu._JOBS, ["job_id"], qu.job_utilisation(cur, **w)),
                *((qu._BY[by], ["group"], qu.utilisation_by(cur, by=by, **w))
                  for by in ("user", "rack", "job_type"))):
            want = _usage_parts_before(cur, sqls, keys, start, end, limit, part, rack)
            assert len(got) == len(want) <= limit and (len(want) > 0) == (part != "nope")
            assert list(got[keys[0]]) == list(want[keys[0]])
            shown = [c for c in cols if c in got]  # a job's row: no utilised_gpu_h
            np.testing.assert_allclose(got[shown].to_numpy(float),
                                       want[shown].to_numpy(float), rtol=1e-12)


def test_a_range_longer_than_the_minute_tier_stays_minute_exact(wh):
    """60 h: the 1-hour tier before the data (nothing there), the table after."""
    span = {"start": NOW - 60 * H, "end": NOW}
    refresh(wh)
    assert [p.path for p in usage.plan(wh.reader(), **span)] == ["hour", "table"]
    exact = qe.run_energy(wh.reader(), opts=OPTS, resolution="minute", **span)
    assert_same(exact, qe.run_energy(wh.reader(), opts=OPTS, **span),
                ["job_id", "run_index"], RUN_COLS)
    exact = qe.idle_energy(wh.reader(), resolution="minute", **span)
    assert_same(exact, qe.idle_energy(wh.reader(), **span), "state",
                ["gpu_hours", "gpu_kwh"])


# ------------------------------------------------------------ incremental and idempotent

def test_a_backfill_goes_newest_first_a_bounded_number_of_hours_per_refresh(wh):
    wh.write(_clear).result()
    step = lambda: wh.write(lambda con: usage.refresh_usage(  # noqa: E731
        con, NOW, recheck_days=2.0, idle_pct=OPTS.idle_util_pct, max_hours=20)).result()
    first = step()
    assert (first["usage_hours"], first["usage_pending"]) == (20, 28)
    assert ledger(wh)["ts"].min() == NOW - 20 * H  # the newest 20 complete hours
    # half-computed, the pages still give the live answer (the gap is read live)
    live = qe.job_energy(wh.reader(), resolution="minute", opts=OPTS, **DAY)
    assert_same(live, qe.job_energy(wh.reader(), opts=OPTS, **DAY), "job_id", RUN_COLS)
    assert [step()["usage_pending"], step()["usage_pending"]] == [8, 0]
    assert len(ledger(wh)) == 48


def test_refresh_twice_changes_nothing(wh):
    wh.write(_clear).result()
    assert refresh(wh)["usage_hours"] == 48
    before, marks = table(wh), ledger(wh)
    assert refresh(wh)["usage_hours"] == 0
    pd.testing.assert_frame_equal(table(wh), before)
    pd.testing.assert_frame_equal(ledger(wh), marks)


def test_a_late_job_end_recomputes_only_its_hour(wh):
    refresh(wh)
    # job 1004 (n08, GPUs 0-1, running since NOW - 3 h) ended at 11:30; sacct says so late
    end = NOW - 30 * M
    wh.ingest("allocations", pd.DataFrame({
        "job_id": "1004", "run_index": 0, "node": "n08", "gpu_index": [0, 1],
        "start_ts": NOW - 3 * H, "end_ts": end})).result()
    assert refresh(wh)["usage_hours"] == 1
    got = wh.reader().execute("SELECT ts, sum(gpu_s) FROM gpu_usage_1h WHERE job_id = '1004'"
                              " GROUP BY ts ORDER BY ts").fetchall()
    assert got == [(NOW - 3 * H, 7200.0), (NOW - 2 * H, 7200.0), (NOW - H, 3600.0)]
    live, fast = live_and_table(wh, lambda cur: qu.job_utilisation(cur, **DAY))
    assert_same(live, fast, "job_id", ["allocated_gpu_h", "util_pct"])


def test_a_late_sample_batch_recomputes_its_hour(wh):
    refresh(wh)
    hour = NOW - 5 * H
    late = pd.DataFrame({"ts": pd.date_range(hour + 10 * S, hour + 20 * M, freq="60s"),
                         "node": "n01", "gpu_index": 0, "interval_s": 15.0,
                         "util_pct": 99.0, "power_w": 650.0})
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert refresh(wh)["usage_hours"] == 1
    live, fast = live_and_table(wh, lambda cur: qe.idle_energy(cur, **DAY))
    assert_same(live, fast, "state", ["gpu_hours", "gpu_kwh"])


def test_history_older_than_the_recheck_window_is_picked_up(wh):
    """An import of old jobs (or the service's history, written while the refresh runs):
    outside recheck_days the allocated GPU-seconds per day give it away."""
    opts = Options(recheck_days=0.25)
    refresh(wh, opts=opts)
    start = NOW - 30 * H - 15 * M  # 06:00 yesterday and after: no job on n08/3 then
    old = pd.DataFrame({"job_id": "2003", "run_index": 0, "node": "n08", "gpu_index": [3],
                        "start_ts": start, "end_ts": start + 2 * H})
    wh.ingest("allocations", old).result()
    wh.ingest("jobs", old[["job_id"]].assign(user_name="frank", gpus=1)).result()
    due = refresh(wh, opts=opts)["usage_hours"]
    assert due == 24  # every hour of that day (2026-11-17)
    fast = qu.job_utilisation(wh.reader(), start=NOW - 40 * H, end=NOW).set_index("job_id")
    assert fast.loc["2003", "allocated_gpu_h"] == pytest.approx(2.0)
    assert refresh(wh, opts=opts)["usage_hours"] == 0


def test_another_idle_threshold_recomputes_every_hour(wh):
    refresh(wh)
    assert refresh(wh, opts=Options(idle_util_pct=10.0))["usage_hours"] == 48
    live, fast = live_and_table(wh, lambda cur: qe.idle_energy(cur, **DAY))  # 5 %: live
    assert_same(live, fast, "state", ["gpu_hours", "gpu_kwh"])
    assert "table" in [p.path for p in usage.plan(wh.reader(), **DAY, idle_pct=5.0)]


# ------------------------------------------------------------------ retention, empty

def test_retention_deletes_old_usage_rows():
    with Warehouse(":memory:") as w:
        seed_dashboard(w, hours=6)
        assert refresh(w)["usage_hours"] == 6
        deleted = w.apply_retention(NOW, Retention(raw_days=14, minute_days=90,
                                                   hour_days=2 / 24)).result()
        assert deleted["gpu_usage_hours"] == 4
        assert deleted["gpu_usage_1h"] > 0
        rows = w.reader().execute("SELECT min(ts), count(DISTINCT ts) FROM gpu_usage_1h"
                                  ).fetchone()
        assert rows == (NOW - 2 * H, 2)


def test_an_empty_warehouse_works():
    with Warehouse(":memory:") as w:
        assert refresh(w)["usage_hours"] == 0
        cur = w.reader()
        assert qe.run_energy(cur, opts=OPTS, **DAY).empty
        assert qe.job_energy(cur, opts=OPTS, by="user_name", **DAY).empty
        assert qe.idle_energy(cur, **DAY).empty
        assert qe.failure_carbon(cur, opts=OPTS, **DAY).empty
        assert list(qu.utilisation_by(cur, by="user", **DAY).columns) == [
            "group", "allocated_gpu_h", "utilised_gpu_h", "util_pct"]
        assert qu.job_utilisation(cur, **DAY).empty


def test_minute_reach_ignores_a_backfill_older_than_the_minute_tier():
    """A backfill older than minute_days leaves minute rows of its own GPUs only (until
    the next retention): the minute tier still counts as complete only from retention's
    cutoff, so no hour is recomputed from those few rows (issue 17 review)."""
    t = datetime(2026, 11, 2)
    wh = Warehouse(":memory:")
    try:
        wh.ingest("samples", samples(start=t + 2 * H, ticks=8, gpus=1)).result()
        wh.rollup().result()
        wh.apply_retention(t + H + timedelta(days=90),
                           Retention(raw_days=100, minute_days=90, hour_days=730)).result()
        assert usage.minute_reach(wh.reader()) == t + 2 * H
        late = samples(start=t, ticks=8, gpus=1, nodes=2).filter(
            pc.field("node") == "node001")
        wh.ingest("samples", late).result()
        wh.rollup().result()
        assert wh.reader().execute("SELECT min(ts) FROM gpu_samples_1m").fetchone()[0] == t
        assert usage.minute_reach(wh.reader()) == t + H
    finally:
        wh.close()

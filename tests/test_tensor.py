"""Tensor-core activity per job and user (warehouse/queries/tensor.py), from raw samples
rolled up as the service does; numbers worked out by hand."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS, edit_allocations, rebuild_derived
from tests.support.runs import H, M, T, add_job
from warehouse import fleet_hours
from warehouse.analytics import Options
from warehouse.clock import ceil_hour, floor_hour
from warehouse.db import fill
from warehouse.queries import tensor
from warehouse.schema import ALLOC_KEY_SQL


def _samples(wh, gpu, minutes, tensor_pct, dram_pct):
    wh.ingest("samples", pd.DataFrame({
        "ts": [T + i * M for i in minutes], "node": "n0", "gpu_index": gpu,
        "interval_s": 60.0, "util_pct": 100.0, "sm_active_pct": 80.0,
        "tensor_active_pct": [tensor_pct(i) for i in minutes],
        "dram_active_pct": dram_pct})).result()


def test_tensor_activity_per_job_and_user(wh):
    # GPU 0: tensor 40 % in the first hour, 60 % in the second, DRAM 30 %
    _samples(wh, 0, range(120), lambda i: 40.0 if i < 60 else 60.0, 30.0)
    # GPU 1: tensor 10 % for the first hour, no DRAM field (NULL)
    _samples(wh, 1, range(60), lambda i: 10.0, None)
    wh.rollup().result()
    add_job(wh, "A", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1, user="ann")
    add_job(wh, "B", [{"start": T + 30 * M, "end": T + H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [1]}], gpus=1, user="bob")
    jobs = tensor.tensor_activity(wh.reader(), start=T, end=T + 2 * H).set_index("job_id")
    # A: one GPU-hour at 40 % and one at 60 %; B: half an hour of GPU 1's first hour
    assert jobs.loc["A", "gpu_h"] == pytest.approx(2.0)
    assert jobs.loc["A", "tensor_active_pct"] == pytest.approx(50.0)
    assert jobs.loc["A", "dram_active_pct"] == pytest.approx(30.0)
    assert jobs.loc["A", "sm_active_pct"] == pytest.approx(80.0)
    assert jobs.loc["B", "gpu_h"] == pytest.approx(0.5)
    assert jobs.loc["B", "tensor_active_pct"] == pytest.approx(10.0)
    assert pd.isna(jobs.loc["B", "dram_active_pct"]) and jobs.loc["B", "tensor_gpu_h"] == 0.5
    users = tensor.tensor_activity(wh.reader(), start=T, end=T + 2 * H, by="user")
    assert users.set_index("user_name")["tensor_active_pct"].to_dict() == pytest.approx(
        {"ann": 50.0, "bob": 10.0})


def test_a_job_without_profiling_fields_has_null_activity(wh):
    wh.ingest("samples", pd.DataFrame({"ts": [T + i * M for i in range(60)], "node": "n0",
                                       "gpu_index": 0, "interval_s": 60.0,
                                       "util_pct": 97.0})).result()
    wh.rollup().result()
    add_job(wh, "C", [{"start": T, "end": T + H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    row = tensor.tensor_activity(wh.reader(), start=T, end=T + H).iloc[0]
    assert row["util_pct"] == pytest.approx(97.0)
    assert pd.isna(row["tensor_active_pct"]) and row["tensor_gpu_h"] == 0.0


def test_unknown_grouping_is_refused(wh):
    with pytest.raises(ValueError, match="by must be one of"):
        tensor.tensor_activity(wh.reader(), start=T, end=T + H, by="rack; DROP TABLE jobs")


def test_the_page_table_follows_the_filters(wh):
    _samples(wh, 0, range(60), lambda i: 40.0, 30.0)
    wh.rollup().result()
    add_job(wh, "A", [{"start": T, "end": T + H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    cur = wh.reader()
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, rack="r0")) == 1  # n0 in r0
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, rack="r1")) == 0
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, partition="eval")) == 0


_KEYS = {"job": "a.job_id", "user": "coalesce(j.user_name, '(unknown)')"}

#: The query before issue 17 (every allocation of a GPU joined with every hour row of it,
#: the overlapping pairs kept): the reference the hour-cut join must agree with.
_EVERY_PAIR_SQL = """
WITH parts AS (
    SELECT {key} AS key, any_value(j.name) OVER (PARTITION BY a.job_id) AS name,
           (epoch_us(least(h.ts + INTERVAL 1 HOUR, coalesce(a.end_ts, $end), $end))
            - epoch_us(greatest(h.ts, a.start_ts, $start))) / 3.6e9 AS w,
           h.util_pct_avg AS util, h.sm_active_pct_avg AS sm,
           h.tensor_active_pct_avg AS tensor, h.dram_active_pct_avg AS dram
    FROM allocations a
    JOIN gpu_samples_1h h ON h.node = a.node AND h.gpu_index = a.gpu_index
     AND h.ts < coalesce(a.end_ts, $end) AND h.ts + INTERVAL 1 HOUR > a.start_ts
    LEFT JOIN jobs j ON j.job_id = a.job_id
    WHERE h.ts >= $start - INTERVAL 1 HOUR AND h.ts < $end AND a.start_ts < $end
      AND ($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL
           OR a.node IN (SELECT node FROM nodes
                         WHERE ($partition::VARCHAR IS NULL OR partition = $partition)
                           AND ($rack::VARCHAR IS NULL OR rack = $rack)))
)
SELECT key AS {by}, sum(w) AS gpu_h,
       sum(w * util) / nullif(sum(w) FILTER (WHERE util IS NOT NULL), 0) AS util_pct,
       sum(w * sm) / nullif(sum(w) FILTER (WHERE sm IS NOT NULL), 0) AS sm_active_pct,
       sum(w * tensor) / nullif(sum(w) FILTER (WHERE tensor IS NOT NULL), 0)
           AS tensor_active_pct,
       sum(w * dram) / nullif(sum(w) FILTER (WHERE dram IS NOT NULL), 0) AS dram_active_pct,
       coalesce(sum(w) FILTER (WHERE tensor IS NOT NULL), 0) AS tensor_gpu_h
FROM parts WHERE w > 0
GROUP BY key
"""


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(allocs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 1),
                                 st.integers(-90, 400), st.one_of(st.none(),
                                                                  st.integers(-5, 300))),
                       min_size=1, max_size=12),
       lo=st.integers(-60, 200), span=st.integers(1, 400), by=st.sampled_from(["job", "user"]),
       scope=st.sampled_from([(None, None), ("p0", None), ("p1", None), (None, "r1"),
                              ("p0", "r1")]),
       gaps=st.sets(st.integers(0, 15), max_size=6), kept=st.booleans())
def test_hours_cut_join_answers_as_every_pair(wh, allocs, lo, span, by, scope, gaps, kept):
    """Issue 17: the allocations are cut into hours before they meet the hour rows, and
    (``kept``) the analytics refresh keeps each whole hour's sums per job; every figure is
    the one the join of every allocation with every hour of its GPU gave, for windows and
    allocations on and off the hour, open, empty and reversed ones, hours without rows, a
    node outside the topology, and partition and rack filters."""

    wh.write(lambda con: con.execute(
        CLEAR_ALLOCATIONS + "; DELETE FROM jobs; DELETE FROM gpu_samples_1h;"
        " DELETE FROM nodes; DELETE FROM meta WHERE key LIKE 'fleet_hours%'; "
        + "".join(f"DELETE FROM {t};" for t in fleet_hours.KEPT_TABLES))).result()
    wh.ingest("nodes", pd.DataFrame({"node": ["n0", "n1"], "rack": ["r0", "r1"],
                                     "partition": ["p0", "p1"], "gpus": 2})).result()
    hours = pd.date_range(T - 3 * H, T + 12 * H, freq="1h")
    rows = pd.DataFrame([
        {"ts": h, "node": n, "gpu_index": g, "samples": 60,
         "util_pct_avg": None if (k + g) % 4 == 0 else 10.0 * k + g,  # a job's GPUs may
         "tensor_active_pct_avg": None if (k + g) % 3 == 0 else 5.0 * k}  # differ
        for k, h in enumerate(hours) if k not in gaps for n in ("n0", "n1", "n2")
        for g in (0, 1)])
    wh.write(lambda con: con.register("hour_rows", rows).execute(
        "INSERT INTO gpu_samples_1h BY NAME SELECT * FROM hour_rows")).result()
    wh.ingest("jobs", pd.DataFrame({"job_id": [f"J{j}" for j in range(6)],
                                    "user_name": ["ann", "bob", "cy"] * 2,
                                    "name": "train"})).result()
    wh.ingest("allocations", pd.DataFrame([  # n2 is in no topology
        {"job_id": f"J{j}", "run_index": i, "node": f"n{node}", "gpu_index": g,
         "start_ts": T + start * M, "end_ts": None if dur is None else T + (start + dur) * M}
        for i, (j, node, g, start, dur) in enumerate(allocs)])).result()
    if kept:
        _refresh(wh, T + 13 * H)
    start, end = T + lo * M, T + (lo + span) * M
    partition, rack = scope
    params = {"start": start, "end": end, "partition": partition, "rack": rack}
    col = "job_id" if by == "job" else "user_name"
    want = wh.reader().execute(fill(_EVERY_PAIR_SQL, key=_KEYS[by], by=col),
                               params).df()
    got = tensor.tensor_activity(wh.reader(), start=start, end=end, by=by,
                                 partition=partition, rack=rack, limit=100)
    if by == "job":  # a job's name (a user's is any of their jobs', before as now)
        assert (got["name"] == "train").all()
    cur = wh.reader()
    whole = ceil_hour(start) < floor_hour(end)
    if kept and whole and fleet_hours.held_span(cur, ceil_hour(start), floor_hour(end)):
        assert tensor.kept_span(cur, start, end) is not None  # the kept hours are read
    pd.testing.assert_frame_equal(  # the kept means are REAL, as the tier's
        got.drop(columns="name").sort_values(col, ignore_index=True),
        want.sort_values(col, ignore_index=True), check_dtype=False, rtol=1e-6)
    top = tensor.tensor_activity(cur, start=start, end=end, by=by, partition=partition,
                                 rack=rack, limit=2)  # the most GPU-hours, most first
    assert list(top["gpu_h"]) == pytest.approx(
        list(want["gpu_h"].sort_values(ascending=False).head(2)), rel=1e-9)


def _refresh(wh, now):
    """The analytics refresh's kept hours (warehouse/fleet_hours.py) up to ``now``."""
    while wh.write(lambda con: fleet_hours.refresh_fleet_hours(
            con, now, recheck_days=1, idle_pct=Options().idle_util_pct)).result()[
            "fleet_pending"]:
        pass


def _kept_week(wh):
    """Two jobs over six hours of two GPUs, kept by the refresh: A with every field,
    B without the profiling ones."""
    _samples(wh, 0, range(360), lambda i: 40.0 + i // 60, 30.0)
    wh.ingest("samples", pd.DataFrame({"ts": [T + i * M for i in range(360)], "node": "n0",
                                       "gpu_index": 1, "interval_s": 60.0,
                                       "util_pct": 50.0})).result()
    wh.rollup().result()
    add_job(wh, "A", [{"start": T + 10 * M, "end": T + 5 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1, user="ann")
    add_job(wh, "B", [{"start": T, "end": T + 6 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [1]}], gpus=1, user="bob")
    _refresh(wh, T + 7 * H)


def _live(wh, **kw):
    """The answer with the kept hours left unread (a rack filter that holds every GPU
    takes the live path)."""
    return tensor.tensor_activity(wh.reader(), rack="r0", **kw).set_index("job_id")


def test_whole_hours_are_read_from_the_kept_table_and_the_ends_live(wh):
    _kept_week(wh)
    window = {"start": T + 25 * M, "end": T + 5 * H + 50 * M}  # ragged at both ends
    assert tensor.kept_span(wh.reader(), **window) == (T + H, T + 5 * H)
    got = tensor.tensor_activity(wh.reader(), **window).set_index("job_id")
    want = _live(wh, **window)
    pd.testing.assert_frame_equal(got, want, rtol=1e-6)
    assert got.loc["A", "gpu_h"] == pytest.approx(5 - 25 / 60)
    assert got.loc["A", "tensor_active_pct"] == pytest.approx(  # 40 % + 1 an hour
        (35 / 60 * 40 + 41 + 42 + 43 + 44) / (5 - 25 / 60))
    assert pd.isna(got.loc["B", "tensor_active_pct"]) and got.loc["B", "tensor_gpu_h"] == 0
    for by, key, most in (("job", "job_id", "B"), ("user", "user_name", "bob")):
        assert list(tensor.tensor_activity(wh.reader(), by=by, limit=1, **window)[key]
                    ) == [most]  # the most GPU-hours (B: 5.4 h against A's 4.6 h)
    # the kept rows are what is read: a changed one shows
    wh.write(lambda con: con.execute("UPDATE tensor_hours_1h SET util_pct = 0 "
                                     "WHERE job_id = 'B' AND ts = $ts",
                                     {"ts": T + 2 * H})).result()
    assert tensor.tensor_activity(wh.reader(), **window).set_index("job_id").loc[
        "B", "util_pct"] == pytest.approx(50 * (5 + 50 / 60 - 25 / 60 - 1) / (5 + 25 / 60))


def test_a_changed_allocation_or_an_old_row_is_read_live(wh):
    _kept_week(wh)
    window = {"start": T, "end": T + 6 * H}
    wh.write(lambda con: con.execute("UPDATE tensor_hours_1h SET tensor_active_pct = 99"
                                     )).result()  # marks what the kept rows would say
    assert tensor.tensor_activity(wh.reader(), **window).set_index("job_id").loc[
        "A", "tensor_active_pct"] == pytest.approx(99)
    # A's end learnt later: its hours' allocations are not those the rows were kept from
    edit_allocations(wh, "UPDATE allocations SET end_ts = $e WHERE job_id = 'A'",
                     {"e": T + 4 * H})
    assert tensor.kept_span(wh.reader(), **window) is None
    got = tensor.tensor_activity(wh.reader(), **window).set_index("job_id")
    assert got.loc["A", "gpu_h"] == pytest.approx(4 - 10 / 60)
    assert got.loc["A", "tensor_active_pct"] == pytest.approx(
        (50 / 60 * 40 + 41 + 42 + 43) / (4 - 10 / 60))
    # the refresh keeps them again; a row kept before migration 25 (no tensor_kept) is
    # not read (the hours from it are read live), and is due
    _refresh(wh, T + 7 * H)
    assert tensor.kept_span(wh.reader(), **window) == (T, T + 6 * H)
    wh.write(lambda con: con.execute("UPDATE fleet_hours_1h SET tensor_kept = NULL "
                                     "WHERE ts = $ts", {"ts": T + 3 * H})).result()
    assert tensor.kept_span(wh.reader(), **window) == (T, T + 3 * H)
    pd.testing.assert_series_equal(  # (the kept means still carry the marks above)
        tensor.tensor_activity(wh.reader(), **window).set_index("job_id")["gpu_h"],
        _live(wh, **window)["gpu_h"])
    due = wh.write(lambda con: fleet_hours.due_hours(
        con, T + 7 * H, recheck_days=0, idle_pct=Options().idle_util_pct)).result()
    assert due == [T + 3 * H]
    _refresh(wh, T + 7 * H)
    assert tensor.kept_span(wh.reader(), **window) == (T, T + 6 * H)


def test_a_filtered_range_is_read_live(wh):
    _kept_week(wh)
    wh.write(lambda con: con.execute("UPDATE tensor_hours_1h SET tensor_active_pct = 99"
                                     )).result()
    window = {"start": T, "end": T + 6 * H}
    assert tensor.tensor_activity(wh.reader(), **window).set_index("job_id").loc[
        "A", "tensor_active_pct"] == pytest.approx(99)
    for scope in ({"rack": "r0"}, {"partition": "train"}):
        got = tensor.tensor_activity(wh.reader(), **window, **scope).set_index("job_id")
        assert got.loc["A", "tensor_active_pct"] == pytest.approx(
            (50 / 60 * 40 + 41 + 42 + 43 + 44) / (5 - 10 / 60))


def test_a_job_on_gpus_with_and_without_the_profiling_fields(wh):
    """One job's hour on a GPU with every field and one without the profiling fields
    (another exporter): the kept means weigh only the GPU-hours that have each field."""
    _samples(wh, 2, range(120), lambda i: 40.0, 30.0)  # util 100, SM 80
    wh.ingest("samples", pd.DataFrame({"ts": [T + i * M for i in range(120)], "node": "n0",
                                       "gpu_index": 3, "interval_s": 60.0,
                                       "util_pct": 50.0})).result()
    wh.rollup().result()
    add_job(wh, "C", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [2, 3]}], gpus=2)
    _refresh(wh, T + 3 * H)
    window = {"start": T, "end": T + 2 * H}
    assert tensor.kept_span(wh.reader(), **window) == (window["start"], window["end"])
    (row,) = tensor.tensor_activity(wh.reader(), **window).to_dict("records")
    assert row["gpu_h"] == pytest.approx(4.0) and row["tensor_gpu_h"] == pytest.approx(2.0)
    assert row["util_pct"] == pytest.approx(75.0)
    assert row["tensor_active_pct"] == pytest.approx(40.0)
    assert row["sm_active_pct"] == pytest.approx(80.0)
    assert row["dram_active_pct"] == pytest.approx(30.0)


def test_the_newest_hours_not_kept_yet_are_read_live(wh):
    """The refresh keeps an hour once it is complete, every few minutes, and samples are
    rolled up into an hour after it was kept: the range's whole hours are read from the
    table up to the first such hour, the rest live (not the whole range)."""
    _kept_week(wh)  # kept up to T + 6 h, and the hour to T + 7 h without samples
    wh.write(lambda con: con.execute("UPDATE tensor_hours_1h SET tensor_active_pct = 99"
                                     )).result()  # marks what the kept rows say
    _samples(wh, 0, range(360, 430), lambda i: 60.0, 30.0)  # that hour's, and 10 minutes
    wh.rollup().result()
    add_job(wh, "D", [{"start": T + 6 * H, "end": T + 8 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1)
    window = {"start": T + 3 * H, "end": T + 7 * H + 5 * M}
    assert tensor.kept_span(wh.reader(), **window) == (T + 3 * H, T + 6 * H)
    got = tensor.tensor_activity(wh.reader(), **window).set_index("job_id")
    assert got.loc["A", "tensor_active_pct"] == pytest.approx(99)  # hours 3 and 4, kept
    assert got.loc["D", "gpu_h"] == pytest.approx(65 / 60)  # live: the hour and 5 minutes
    assert got.loc["D", "tensor_active_pct"] == pytest.approx(60)
    # a kept hour's row gone (dropped by fill_rows, computed again later): the hours
    # before it are read from the table
    wh.write(lambda con: con.execute("DELETE FROM fleet_hours_1h WHERE ts = $ts",
                                     {"ts": T + 5 * H})).result()
    assert tensor.kept_span(wh.reader(), **window) == (T + 3 * H, T + 5 * H)
    # a kept hour's allocations changed in the middle of the range: all of it is live
    edit_allocations(wh, "UPDATE allocations SET end_ts = $e WHERE job_id = 'A'",
                     {"e": T + 4 * H})
    assert tensor.kept_span(wh.reader(), **window) is None


def test_a_job_given_the_gpu_time_of_another_is_seen_after_a_duckdb_upgrade(wh):
    """After another DuckDB the kept rows are signed again where the allocations' exact
    moments are unchanged: GPU time given to another job at the same node, GPU and times
    keeps all but the key moment equal, and that one (over stored keys) outlives the
    upgrade, so the hours are computed again: tensor rows and energy rows per run."""
    _kept_week(wh)

    def give(con):  # a writer that changes a row's key derives its key again
        con.execute("UPDATE allocations SET job_id = 'Z' WHERE job_id = 'A'")
        con.execute(fill("UPDATE allocations SET alloc_key = {key} WHERE job_id = 'Z'",
                         key=ALLOC_KEY_SQL))
        rebuild_derived(con)
    wh.write(give).result()
    window = {"start": T, "end": T + 6 * H}
    assert tensor.kept_span(wh.reader(), **window) is None
    wh.write(lambda con: con.execute("UPDATE meta SET value = 'another' "
                                     "WHERE key = $k", {"k": fleet_hours.HASH_KEY})).result()
    _refresh(wh, T + 7 * H)
    assert tensor.kept_span(wh.reader(), **window) == (T, T + 6 * H)
    got = tensor.tensor_activity(wh.reader(), **window)
    pd.testing.assert_frame_equal(got.set_index("job_id").drop(columns="name"),
                                  _live(wh, **window).drop(columns="name"), rtol=1e-6)
    assert sorted(got["job_id"]) == ["B", "Z"]
    # the hours' energy rows per run name the job too: the key moments outlive the
    # upgrade (stored keys, migration 26), so the hours were computed again
    runs = wh.reader().execute(
        "SELECT DISTINCT job_id FROM gpu_usage_from_1h WHERE ts >= $start AND ts < $end "
        "AND job_id IS NOT NULL ORDER BY 1", window).fetchall()
    assert [r[0] for r in runs] == ["B", "Z"]


def test_ties_are_ordered_by_job_and_user(wh):
    """Jobs with the same GPU-hours: the first by id make the cut (the table shows the
    same ones on every call), kept or live; users likewise by name."""
    _samples(wh, 0, range(120), lambda i: 40.0, 30.0)
    wh.rollup().result()
    for k, job in enumerate(["J5", "J2", "J9", "J1", "J7", "J3"]):
        add_job(wh, job, [{"start": T + k * M, "end": T + k * M + 50 * M,
                           "state": "COMPLETED", "nodes": ["n0"], "gpu_indices": [0]}],
                gpus=1, user=f"u{9 - k}")
    for kept in (False, True):
        if kept:
            _refresh(wh, T + 3 * H)
        window = {"start": T, "end": T + 2 * H}
        assert (tensor.kept_span(wh.reader(), **window) is not None) == kept
        assert list(tensor.tensor_activity(wh.reader(), limit=3, **window)["job_id"]) == [
            "J1", "J2", "J3"]
        assert list(tensor.tensor_activity(wh.reader(), by="user", limit=2, **window)[
            "user_name"]) == ["u4", "u5"]

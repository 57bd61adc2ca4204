"""Issue 17 (speed): the faster queries give the answers the former ones gave.

Each rewrite is checked against the implementation it replaced, kept here as the
reference (a per-job loop, a correlated subquery), on hand-built and generated inputs.
Placement's rewrites are in tests/test_speed_answers_placement.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.allocations import CLEAR_ALLOCATIONS, clear_allocations

T0 = datetime(2026, 11, 9)
H = timedelta(hours=1)


def test_failure_rate_node_days_by_hand(wh):
    """The exposure behind r_f, now one grouped pass over the allocations: within
    [T, T+10h) J1's first run holds n0 and n1 for 4 h (8 node-hours), its second n2 from
    T+5h, clipped at T+10h (5); J2 has no allocations and 12 GPUs, so ceil(12 / 8) = 2
    nodes for 1 h (2); J3 is still running on n3 from T+8h (2); J4 ended before the
    window (0). 17 node-hours; J1's first run failed on infrastructure (1 failure)."""
    from tests.support.runs import T, add_job, run_refresh
    from warehouse.queries import failures as fq

    add_job(wh, "J1", [
        {"start": T, "end": T + 4 * H, "state": "NODE_FAIL", "nodes": ["n0", "n1"],
         "failed_node": "n1"},
        {"start": T + 5 * H, "end": T + 12 * H, "state": "COMPLETED", "nodes": ["n2"]}],
        gpus=16)
    add_job(wh, "J2", [{"start": T + 2 * H, "end": T + 3 * H, "state": "COMPLETED"}],
            gpus=12)
    add_job(wh, "J3", [{"start": T + 8 * H, "end": None, "state": "RUNNING",
                        "nodes": ["n3"], "gpu_indices": [0, 1]}], gpus=2)
    add_job(wh, "J4", [{"start": T - 5 * H, "end": T - H, "state": "COMPLETED",
                        "nodes": ["n0"]}])
    run_refresh(wh, T + 10 * H)
    rate = fq.failure_rate(wh.reader(), start=T, end=T + 10 * H)
    assert rate["node_days"] == pytest.approx(17 / 24, rel=1e-12)
    assert rate["failures"] == 1
    assert rate["r_f_per_1000_node_days"] == pytest.approx(1000 * 24 / 17, rel=1e-12)


@pytest.fixture(scope="module")
def seeded(seeded_usage):
    """The seeded cluster with its usage table complete (conftest's ``seeded_usage``)."""
    return seeded_usage


@pytest.mark.parametrize("hours,resolution", [(48, None), (7.25, None), (7.25, "minute"),
                                              (30, "hour")])
@pytest.mark.parametrize("by", ["job_id", "user_name", "partition"])
def test_job_energy_is_run_energy_per_job(seeded, hours, resolution, by):
    """job_energy now sums per key in SQL: the same as run_energy merged with the jobs
    and summed in pandas, as it was computed before, over table hours, live minutes and
    the hour tier."""
    from warehouse.queries import energy as qe

    wh, now = seeded
    window = {"start": now - timedelta(hours=hours), "end": now - timedelta(minutes=5),
              "resolution": resolution}
    runs = qe.run_energy(wh.reader(), **window)
    jobs = wh.reader().execute("SELECT job_id, name, user_name, partition, job_type FROM jobs"
                               ).df()
    keys = qe.JOB_KEYS[by]
    cols = ["gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg", "embodied_kg"]
    want = (runs.merge(jobs, on="job_id", how="left").groupby(keys, dropna=False)[cols].sum()
            .reset_index().sort_values(keys, ignore_index=True))
    got = qe.job_energy(wh.reader(), by=by, **window).sort_values(keys, ignore_index=True)
    assert len(want) > 0 and want["carbon_kg"].sum() > 0
    pd.testing.assert_frame_equal(got[keys + cols], want[keys + cols], check_dtype=False,
                                  rtol=1e-12)


def _gamma_quantile_200(a: float, p: float) -> float:
    """The fixed 200-step bisection warehouse.reliability._gamma_quantile replaced."""
    from warehouse.reliability import _gamma_p

    lo, hi = 0.0, max(1.0, a)
    while _gamma_p(a, hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _gamma_p(a, mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@given(st.integers(min_value=0, max_value=20_000),
       st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_rate_interval_bounds_are_the_200_step_bisection(count, confidence):
    """The bisection now stops when its midpoint rounds to an end: the same float."""
    from warehouse import reliability

    alpha = 1.0 - confidence
    low, high = reliability.rate_interval(count, 1.0, confidence)
    assert low == (0.0 if count == 0 else _gamma_quantile_200(float(count), alpha / 2))
    assert high == _gamma_quantile_200(count + 1.0, 1.0 - alpha / 2)


@pytest.mark.parametrize("hours,resolution", [(48, None), (7.25, None), (7.25, "minute"),
                                              (30, "hour")])
def test_window_method_seconds_are_the_runs_summed(seeded, hours, resolution):
    """The Energy page's method card sums GPU-seconds per GPU-hour in SQL now: the same
    seconds per method as every run's (run_methods) summed, as it was computed before."""
    from warehouse.queries import energy_method as em

    wh, now = seeded
    window = {"start": now - timedelta(hours=hours), "end": now - timedelta(minutes=5),
              "resolution": resolution}
    runs = em.run_methods(wh.reader(), **window)
    want = [float(runs[m].sum()) for m in em.METHODS]
    got = em.window_seconds(wh.reader(), **window)
    assert sum(want) > 0
    assert got == pytest.approx(want, rel=1e-12, abs=1e-9)
    assert em.window_method(wh.reader(), **window) == em.label(*want)


def test_report_energy_totals_are_the_fleets(seeded):
    """The weekly report sums its days' energy for the week's totals (one query instead of
    two): the fleet grouping's figures."""
    from warehouse.queries import energy as qe
    from warehouse.queries import weekly

    wh, now = seeded
    window = {"start": now - timedelta(hours=40), "end": now}
    nums = weekly.week_numbers(wh.reader, now=now, **window)["energy"]
    fleet = qe.energy_by(wh.reader(), by="fleet", **window).iloc[0]
    assert len(nums["by_day"]) >= 2 and fleet["carbon_kg"] > 0
    for k in ("gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg"):
        assert nums[k] == pytest.approx(float(fleet[k]), rel=1e-12)


@pytest.mark.parametrize("hours", [4, 40])  # the 1-minute and the 1-hour tier
def test_rack_temperatures_one_quantile_call_as_five(seeded, hours):
    """rack_temperatures asks the five quantiles in one call: the values of five calls."""
    from warehouse.queries import thermal as qt

    wh, now = seeded
    start, end = now - timedelta(hours=hours), now
    tier = "gpu_samples_1m" if end - start <= qt.DISTRIBUTION_MINUTES_MAX else "gpu_samples_1h"
    five = ", ".join(f"quantile_cont(t.temp_c_max, {q}) AS p{int(q * 100)}_c"
                     for q in (0.05, 0.25, 0.50, 0.75, 0.95))
    want = wh.reader().execute(
        f"SELECT n.rack, {five}, max(t.temp_c_max) AS max_c, count(*) AS samples "
        f"FROM {tier} t JOIN nodes n USING (node) WHERE t.ts >= $start AND t.ts < $end "
        "AND t.temp_c_max IS NOT NULL GROUP BY n.rack ORDER BY n.rack",
        {"start": start, "end": end}).df()
    got = qt.rack_temperatures(wh.reader(), start=start, end=end)
    assert len(want) >= 2
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


#: The allocated GPUs per bucket as allocated_vs_used summed them before issue 17: every
#: allocation row in scope range-joined with every bucket it overlaps, in seconds.
_ALLOCATED_PER_ROW = """
WITH buckets AS (SELECT unnest(range(time_bucket(to_seconds($b), $start::TIMESTAMP),
                                     $end::TIMESTAMP, to_seconds($b))) AS ts),
a AS (SELECT greatest(start_ts, $start::TIMESTAMP) AS lo,
             least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS hi
      FROM allocations JOIN nodes n USING (node)
      WHERE start_ts < $end AND (end_ts IS NULL OR end_ts > $start)
        AND ($partition::VARCHAR IS NULL OR n.partition = $partition)
        AND ($rack::VARCHAR IS NULL OR n.rack = $rack))
SELECT b.ts, sum(epoch(least(a.hi, b.ts + to_seconds($b)))
                 - epoch(greatest(a.lo, b.ts))) / $b AS allocated_gpus
FROM buckets b JOIN a ON a.lo < b.ts + to_seconds($b) AND a.hi > b.ts
WHERE b.ts >= time_bucket(to_seconds($b), $start::TIMESTAMP)
GROUP BY b.ts ORDER BY b.ts"""


def _allocated_as_per_row(cur, start, end, partition=None, rack=None) -> pd.DataFrame:
    from warehouse.queries import utilisation as qu

    return cur.execute(_ALLOCATED_PER_ROW, {"start": start, "end": end, "partition": partition,
                                            "rack": rack, "b": qu.bucket_s(start, end)}).df()


@pytest.mark.parametrize("hours", [4, 40])
def test_allocated_over_time_as_the_per_row_join(seeded, hours):
    """allocated_vs_used sums each bucket's GPU-time from its spans' ends (issue 17): the
    allocated GPUs per bucket of the per-row join it replaced."""
    from warehouse.queries import utilisation as qu

    wh, now = seeded
    start, end = now - timedelta(hours=hours), now
    want = _allocated_as_per_row(wh.reader(), start, end)
    got = qu.allocated_vs_used(wh.reader(), start=start, end=end)
    got = got[got["allocated_gpus"] > 0].reset_index(drop=True)
    assert len(want) > 3 and want["allocated_gpus"].max() > 1
    pd.testing.assert_frame_equal(got[["ts", "allocated_gpus"]], want, check_dtype=False,
                                  rtol=1e-12)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5 * 3600, max_value=30 * 3600),
                        st.integers(min_value=60, max_value=40 * 3600),
                        st.integers(min_value=0, max_value=999_999)),
       scope=st.sampled_from([(None, None), ("a", None), (None, "r1"), ("b", "r0")]))
def test_allocated_over_time_as_the_per_row_join_on_random_spans(empty_wh, seed, window,
                                                                 scope):
    """The same on random allocations: microsecond starts and ends, open ends, spans
    crossing either end of the range or a bucket's edge, ending on one, equal spans,
    nodes of other partitions and racks and a node outside the tree (not counted);
    ranges of a minute to 40 hours starting at any microsecond (the 1-minute and
    1-hour tiers' buckets). Buckets the join has no row for hold 0. To 1e-6 GPUs: the
    join's seconds are doubles (an epoch's microseconds are ~2e-7 s apart), the new sums
    exact integers of microseconds."""
    from warehouse.queries import utilisation as qu

    rng = np.random.default_rng(seed)
    nodes = pd.DataFrame({"node": ["n0", "n1", "n2", "n3"], "rack": ["r0", "r0", "r1", "r1"],
                          "partition": ["a", "b", "a", "b"], "gpus": 4})
    rows = []
    for k in range(int(rng.integers(0, 50))):
        start = T0 + timedelta(microseconds=int(rng.choice(
            [0, 1, int(rng.integers(0, 10**6))])), seconds=int(rng.choice(
                [0, 59, 60, 1800, 3599, int(rng.integers(0, 3600))])) + 3600 * int(
            rng.integers(-6, 36)))
        end = None if rng.random() < 0.15 else start + timedelta(
            microseconds=int(rng.integers(1, 20 * 3600 * 10**6)))
        node = f"n{int(rng.integers(0, 5))}"  # n4: outside the tree
        for g in rng.choice(4, size=int(rng.integers(1, 4)), replace=False):
            rows.append({"job_id": f"s{k}", "run_index": 0, "node": node, "gpu_index": int(g),
                         "start_ts": start, "end_ts": end})
    w = empty_wh
    try:
        w.ingest("nodes", nodes).result()
        if rows:
            w.ingest("allocations", pd.DataFrame(rows)).result()
        start = T0 + timedelta(seconds=window[0], microseconds=window[2])
        end = start + timedelta(seconds=window[1])
        want = _allocated_as_per_row(w.reader(), start, end, *scope)
        got = qu.allocated_vs_used(w.reader(), start=start, end=end, partition=scope[0],
                                   rack=scope[1])
        assert got["ts"].is_monotonic_increasing and got["allocated_gpus"].min() > -1e-9
        merged = got.merge(want, on="ts", how="left", suffixes=("", "_want"),
                           validate="one_to_one")
        assert len(merged) == len(got) and set(want["ts"]) <= set(got["ts"])
        np.testing.assert_allclose(merged["allocated_gpus"],
                                   merged["allocated_gpus_want"].fillna(0.0),
                                   rtol=1e-9, atol=1e-6)
    finally:
        w.write(lambda con: (clear_allocations(con),
                             con.execute("DELETE FROM nodes"))).result()


#: The GPU-hours some allocation held as the weekly report queried them before issue 17:
#: a window over every allocation row, in SQL.
_SCHEDULED_WINDOW = """
WITH a AS (
    SELECT node, gpu_index, greatest(start_ts, $start::TIMESTAMP) AS s,
           least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS e
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
b AS (
    SELECT s, e, max(e) OVER (PARTITION BY node, gpu_index ORDER BY s, e
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_e
    FROM a
)
SELECT coalesce(sum(greatest(0, epoch(e) - epoch(greatest(s, coalesce(before_e, s))))), 0)
       / 3600 FROM b
"""


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5, max_value=20),
                        st.integers(min_value=1, max_value=30)),
       batch=st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_scheduled_gpu_hours_as_the_window_in_sql(empty_wh, seed, window, batch):
    """scheduled_gpu_hours unions each GPU's allocations in numpy (issue 17): the GPU-hours
    of the SQL window it replaced, on random allocations sharing GPUs (several jobs on one
    GPU at once, equal starts, nested and open intervals, intervals crossing the range's
    ends), to the rounding of the former sum of seconds; the same whether the sorted rows
    come in one batch or a few at a time (a GPU's intervals cut between batches)."""
    from warehouse.queries import weekly

    rng = np.random.default_rng(seed)
    rows = []
    for k in range(int(rng.integers(0, 60))):
        start = T0 + timedelta(seconds=int(rng.choice([0, 1, 1800, 3599])) + 3600 * int(
            rng.integers(-3, 24)))
        end = None if rng.random() < 0.1 else start + timedelta(
            seconds=int(rng.integers(1, 12 * 3600)))
        for g in rng.choice(4, size=int(rng.integers(1, 4)), replace=False):
            rows.append({"job_id": f"s{k}", "run_index": 0,
                         "node": f"n{int(rng.integers(0, 3))}", "gpu_index": int(g),
                         "start_ts": start, "end_ts": end})
    w = empty_wh
    try:
        if rows:
            w.ingest("allocations", pd.DataFrame(rows)).result()
        p = {"start": T0 + window[0] * H, "end": T0 + (window[0] + window[1]) * H}
        want = w.reader().execute(_SCHEDULED_WINDOW, p).fetchone()[0]
        kept, weekly.HELD_BATCH_ROWS = weekly.HELD_BATCH_ROWS, batch
        try:
            got = weekly.scheduled_gpu_hours(w.reader(), **p)
        finally:
            weekly.HELD_BATCH_ROWS = kept
        assert got == pytest.approx(float(want), rel=1e-12, abs=1e-9)
    finally:
        w.write(clear_allocations).result()


def test_scheduled_gpu_hours_over_centuries_on_a_thousand_gpus(empty_wh):
    """The running latest end per GPU lifts each GPU's ends by its rank times the
    window's span; a 300-year window (9.5e15 us) over 1,200 GPUs would pass 2**63 in one
    batch, so the batch is cut (issue 17): the union is still the SQL window's."""
    from warehouse.queries import weekly

    rows = [{"job_id": f"j{g}", "run_index": 0, "node": f"n{g // 8:04d}",
             "gpu_index": g % 8, "start_ts": T0 + (g % 7) * H,
             "end_ts": None if g % 5 == 0 else T0 + (g % 7 + 1 + g % 3) * H}
            for g in range(1200)]
    rows += [{**r, "job_id": r["job_id"] + "b", "start_ts": r["start_ts"] + H / 2}
             for r in rows[::3]]  # shared GPUs: intervals that overlap
    w = empty_wh
    try:
        w.ingest("allocations", pd.DataFrame(rows)).result()
        p = {"start": datetime(1900, 1, 1), "end": datetime(2200, 1, 1)}
        want = w.reader().execute(_SCHEDULED_WINDOW, p).fetchone()[0]
        assert weekly.scheduled_gpu_hours(w.reader(), **p) == pytest.approx(
            float(want), rel=1e-12)
    finally:
        w.write(clear_allocations).result()


def _loss_sql_correlated(where: str) -> str:
    """warehouse.goodput.loss_sql as it was before issue 17: the allocated GPUs of a run
    counted by a correlated subquery for every failed run (DuckDB counted every run's
    allocations, though almost every run names its GPUs)."""
    from warehouse import goodput

    new = goodput.loss_sql(where)
    head, rest = new.split("failed0 AS (", 1)
    tail = rest.split("\n),\nnxt AS (", 1)[1]
    return head + """failed AS (
    SELECT r.job_id, r.run_index, r.start_ts, r.end_ts, r.state, r.exit_code, r.signal,
           r.reason, r.failed_node,
           coalesce(r.gpus, j.gpus, (SELECT count(*) FROM allocations a
                                     WHERE a.job_id = r.job_id
                                       AND a.run_index = r.run_index), 0) AS gpus,
           greatest(0, """ + goodput._h("greatest(coalesce(r.start_ts, r.end_ts), h.start_ts)",
                                        "r.end_ts") + """) AS run_h
    FROM job_runs r LEFT JOIN jobs j USING (job_id), history h
    WHERE r.end_ts IS NOT NULL AND """ + goodput.FAILED_RUN + " AND " + where + """
      AND (h.start_ts IS NULL OR r.end_ts > h.start_ts)
),
nxt AS (""" + tail


@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_loss_counts_allocations_only_where_no_gpus_are_named(empty_wh, seed):
    """loss_sql counts a failed run's allocations only where neither the run nor its job
    names its GPUs (issue 17): the rows of the correlated count it replaced, on random
    jobs (GPUs named or not, runs with and without allocations, requeues, failures and
    successes)."""
    from warehouse import goodput

    rng = np.random.default_rng(seed)
    gpus = [None, None, 0, 4, 8]
    jobs, runs, allocs = [], [], []
    for k in range(int(rng.integers(1, 25))):
        t = T0 + int(rng.integers(0, 20)) * H
        jobs.append({"job_id": f"j{k}", "submit_ts": t, "gpus": rng.choice(gpus)})
        for r in range(int(rng.integers(1, 4))):
            end = t + int(rng.integers(1, 5)) * H
            runs.append({"job_id": f"j{k}", "run_index": r, "start_ts": t, "end_ts": end,
                         "state": rng.choice(["FAILED", "NODE_FAIL", "REQUEUED", "COMPLETED",
                                              "TIMEOUT"]),
                         "exit_code": int(rng.integers(0, 2)), "gpus": rng.choice(gpus)})
            for g in range(int(rng.integers(0, 4))):
                allocs.append({"job_id": f"j{k}", "run_index": r, "node": "n0",
                               "gpu_index": g, "start_ts": t, "end_ts": end})
            t = end + int(rng.integers(0, 2)) * H
    w = empty_wh
    try:
        w.ingest("jobs", pd.DataFrame(jobs).astype({"gpus": "Int32"})).result()
        w.ingest("runs", pd.DataFrame(runs).astype({"gpus": "Int32"})).result()
        if allocs:
            w.ingest("allocations", pd.DataFrame(allocs)).result()
        p = goodput.loss_params(now=T0 + 40 * H, interval_h=3.0, warmup_h=0.25,
                                start=T0, end=T0 + 30 * H)
        key = ["job_id", "run_index"]
        want = w.reader().execute(_loss_sql_correlated(goodput.BY_END_RANGE), p).df()
        got = w.reader().execute(goodput.loss_sql(goodput.BY_END_RANGE), p).df()
        pd.testing.assert_frame_equal(got.sort_values(key, ignore_index=True),
                                      want.sort_values(key, ignore_index=True),
                                      check_dtype=False)
    finally:
        w.write(lambda con: con.execute(
            CLEAR_ALLOCATIONS + "; DELETE FROM job_runs; DELETE FROM jobs")).result()

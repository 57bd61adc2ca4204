"""gpu_nodes_1m, the 1-minute tier summed per node (issue 17, warehouse/node_minutes.py).

The rollup keeps it equal to the minute tier's per node sums, whatever reaches the minute
tier: on-time, late (the guarded path before the raw tier's retention cutoff) and
re-delivered batches, and retention deletes the same minutes from both. The charts that
read it (throttling and utilisation over time, a job's telemetry) give the figures of the
queries they replaced, kept here verbatim as the reference, on the seeded cluster and on
random minute rows and allocations (partial nodes, two runs on a GPU in one minute, open
allocations, GPU indices beyond 63, NULL readings, nodes missing from ``nodes``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.frames import T0, samples
from tests.support.migrations import migrated_before
from warehouse import Retention, Warehouse, meta, node_minutes
from warehouse.db import fill
from warehouse.migrate import available, migrate
from warehouse.queries import jobs, stragglers, thermal, utilisation
from warehouse.queries.job_minutes import job_allocations
from warehouse.schema import derived_columns
from warehouse.usage import SCOPE

# -- the queries these replaced (tree 07-a38bbff), the reference ------------------------

OLD_THROTTLE = fill("""
SELECT time_bucket(to_seconds($bucket_s), t.ts) AS ts,
       100.0 * sum(t.throttle_thermal_s) / nullif(sum(t.covered_s), 0) AS thermal_pct,
       100.0 * sum(t.throttle_power_s) / nullif(sum(t.covered_s), 0) AS power_pct,
       max(t.temp_c_max) AS hottest_c,
       sum(t.temp_c_avg * t.samples) / nullif(sum(t.samples), 0) AS mean_c
FROM {tier} t JOIN nodes n USING (node)
WHERE t.ts >= $start AND t.ts < $end AND {scope}
GROUP BY 1 ORDER BY 1
""", scope=SCOPE, tier="gpu_samples_1m")

OLD_OVER_TIME = fill("""
WITH buckets AS (
    SELECT unnest(range(time_bucket(to_seconds($bucket_s), $start::TIMESTAMP),
                        $end::TIMESTAMP, to_seconds($bucket_s))) AS ts
),
installed AS (
    SELECT count(*) AS gpus FROM gpus g JOIN nodes n USING (node) WHERE {scope}
),
alloc AS (  -- GPUs held over the same interval counted once (issue 17: a whole-node
            -- job's GPUs are one row for the range join with the buckets)
    SELECT greatest(a.start_ts, $start::TIMESTAMP) AS lo,
           least(coalesce(a.end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS hi, count(*) AS n
    FROM allocations a JOIN nodes n USING (node)
    WHERE a.start_ts < $end AND (a.end_ts IS NULL OR a.end_ts > $start) AND {scope}
    GROUP BY ALL
),
allocated AS (
    SELECT b.ts, sum(a.n * (epoch(least(a.hi, b.ts + to_seconds($bucket_s)))
                            - epoch(greatest(a.lo, b.ts)))) / $bucket_s AS allocated_gpus
    FROM buckets b JOIN alloc a ON a.lo < b.ts + to_seconds($bucket_s) AND a.hi > b.ts
    GROUP BY b.ts
),
per_ts AS (  -- first per rollup timestamp, then the mean over the display bucket
    SELECT t.ts, count(*) AS gpus, sum(t.util_pct_avg) / 100.0 AS busy,
           sum(t.power_w_avg) / 1000.0 AS kw
    FROM {tier} t
    WHERE t.ts >= $start AND t.ts < $end
      AND ($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL
           OR t.node IN (SELECT node FROM nodes n WHERE {scope}))
    GROUP BY t.ts
),
used AS (
    SELECT time_bucket(to_seconds($bucket_s), ts) AS ts, avg(gpus) AS gpus_reporting,
           avg(busy) AS utilised_gpus, avg(kw) AS power_kw
    FROM per_ts GROUP BY 1
)
SELECT b.ts, (SELECT gpus FROM installed) AS gpus_installed,
       u.gpus_reporting, coalesce(a.allocated_gpus, 0) AS allocated_gpus,
       u.utilised_gpus, u.power_kw
FROM buckets b LEFT JOIN allocated a USING (ts) LEFT JOIN used u USING (ts)
WHERE b.ts >= time_bucket(to_seconds($bucket_s), $start::TIMESTAMP)
ORDER BY b.ts
""", scope=SCOPE, tier="gpu_samples_1m")

OLD_ON_JOB_GPUS = """
al AS (
    SELECT node, gpu_index, run_index, start_ts, coalesce(end_ts, $end::TIMESTAMP) AS end_ts
    FROM allocations WHERE job_id = $job_id
),
s AS (
    SELECT t.*, al.run_index,
           (epoch(least(al.end_ts, t.ts + to_seconds($step_s)))
            - epoch(greatest(al.start_ts, t.ts))) / $step_s AS share
    FROM {tier} t JOIN al ON t.node = al.node AND t.gpu_index = al.gpu_index
        AND t.ts < al.end_ts AND t.ts + to_seconds($step_s) > al.start_ts
    WHERE t.ts >= $start - to_seconds($step_s) AND t.ts < $end
)"""

OLD_TELEMETRY = fill("""
WITH {on_job_gpus}
SELECT time_bucket(to_seconds($bucket_s), ts) AS ts,
       count(DISTINCT (node, gpu_index)) AS gpus,
       avg(util_pct_avg) AS util_mean_pct, min(util_pct_avg) AS util_min_pct,
       avg(temp_c_avg) AS temp_mean_c, max(temp_c_max) AS temp_max_c,
       sum(power_w_avg) / 1000.0 / count(DISTINCT s.ts) AS power_kw,
       sum(throttle_thermal_s) AS throttle_thermal_s
FROM s GROUP BY 1 ORDER BY 1
""", on_job_gpus=fill(OLD_ON_JOB_GPUS, tier="gpu_samples_1m"))

#: A job's straggler heat map as it read every GPU minute row of the job (before issue 17's
#: per-node clock and power count, migration 027)
OLD_HEATMAP = """
SELECT time_bucket(to_seconds($bucket_s::BIGINT), m.ts) AS ts, m.node,
       min(m.sm_clock_mhz_avg) AS clock_mhz, avg(m.power_w_avg) AS power_w,
       sum(coalesce(m.throttle_thermal_s, 0) + coalesce(m.throttle_power_s, 0))
           AS throttle_s
FROM allocations a
JOIN gpu_samples_1m m ON m.node = a.node AND m.gpu_index = a.gpu_index
 AND m.ts >= date_trunc('minute', a.start_ts) AND m.ts < coalesce(a.end_ts, $now)
WHERE a.job_id = $job_id AND m.ts >= $start AND m.ts < $now
GROUP BY ALL ORDER BY ts, node
"""

ALL_TIME = (datetime(1970, 1, 1), datetime(2200, 1, 1))
M = timedelta(minutes=1)


def _sums(cur) -> pd.DataFrame:
    """The minute tier summed per node now (what the table must hold)."""
    return cur.execute(node_minutes.SELECT_SQL, list(ALL_TIME)).df()


def _kept(cur) -> pd.DataFrame:
    return cur.execute("SELECT * FROM gpu_nodes_1m ORDER BY ts, node").df()


def _block_sums(cur) -> pd.DataFrame:
    """gpu_nodes_1m summed per node and 5-minute block now (what gpu_nodes_5m must hold)."""
    return cur.execute(node_minutes.BLOCK_SELECT_SQL, list(ALL_TIME)).df().rename(
        columns={"block": "ts"})


def _blocks(cur) -> pd.DataFrame:
    return cur.execute("SELECT * FROM gpu_nodes_5m ORDER BY ts, node").df()


def assert_kept(wh) -> None:
    cur = wh.reader()
    pd.testing.assert_frame_equal(_kept(cur), _sums(cur), check_dtype=False, rtol=1e-12)
    pd.testing.assert_frame_equal(_blocks(cur), _block_sums(cur), check_dtype=False,
                                  rtol=1e-12)


# -- the rollup keeps it -----------------------------------------------------------------

@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    yield w
    w.close()


def test_rollup_writes_each_node_minutes_sums(wh):
    wh.ingest("samples", samples(ticks=8, gpus=3, nodes=2)).result()  # two minutes
    wh.rollup().result()
    got = _kept(wh.reader())
    assert len(got) == 4 and set(got["gpus"]) == {3} and set(got["gpu_mask"]) == {0b111}
    assert set(got["samples"]) == {12} and set(got["covered_s"]) == {180.0}
    assert_kept(wh)


def test_late_and_redelivered_batches_beyond_raw_retention_update_it_as_the_minutes(wh):
    """The guarded paths of warehouse/rollups.py: node 0's minutes stay, node 1's arrive
    late, a partial re-delivery keeps the complete minute; the sums follow each step."""
    old = T0 - timedelta(days=3)
    wh.ingest("samples", samples(start=old, ticks=40, gpus=2, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    both = samples(start=old, ticks=40, gpus=2, nodes=2, power_w=300.0)
    late = both.filter((pc.field("node") == "node001") | (pc.field("ts") < old + M))
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert_kept(wh)
    wh.ingest("samples", samples(start=old, ticks=4, gpus=2, power_w=100.0).slice(2)).result()
    wh.rollup().result()
    assert_kept(wh)
    got = _kept(wh.reader())
    # node 0's first minute came again whole (at 300 W) and was recomputed; the partial
    # re-delivery (at 100 W) left it so
    assert got[got.node == "node000"]["power_w_sum"].tolist() == [600.0] + [200.0] * 9
    assert got[got.node == "node001"]["power_w_sum"].tolist() == [600.0] * 10


def test_retention_deletes_it_with_the_minute_tier(wh):
    wh.ingest("samples", samples(start=T0 - timedelta(days=2), ticks=8, gpus=2)).result()
    wh.ingest("samples", samples(start=T0, ticks=8, gpus=2)).result()
    wh.rollup().result()
    deleted = wh.apply_retention(T0 + timedelta(hours=1), Retention(
        raw_days=1, minute_days=1, hour_days=730)).result()
    assert deleted["gpu_nodes_1m"] == 2 and deleted["gpu_samples_1m"] == 4
    assert_kept(wh)
    assert wh.reader().execute("SELECT min(ts) FROM gpu_nodes_1m").fetchone()[0] == T0


def test_retention_recomputes_the_block_its_cutoff_cuts(wh):
    """A cutoff inside a 5-minute block deletes the block's first minutes: the block's
    sums become those of the minutes left, not of all five."""
    wh.ingest("samples", samples(start=T0, ticks=40, gpus=2)).result()  # 10 minutes
    wh.rollup().result()
    assert len(_blocks(wh.reader())) == 2
    wh.apply_retention(T0 + timedelta(days=1, minutes=2), Retention(
        raw_days=1, minute_days=1, hour_days=730)).result()
    got = _blocks(wh.reader())
    assert got["minutes"].tolist() == [0b11100, 0b11111] and got["gpus"].tolist() == [6, 10]
    assert_kept(wh)


@st.composite
def _deliveries(draw):
    """Batches of 15-s samples over a few minutes of three nodes, some older than the
    raw tier's retention, some again (re-delivered whole or in part), with rollups and
    retention between them."""
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        days_old = draw(st.sampled_from([0, 3]))
        start = T0 - timedelta(days=days_old) + draw(st.integers(0, 12)) * timedelta(seconds=15)
        batch = samples(start=start, ticks=draw(st.integers(1, 8)), gpus=draw(st.integers(1, 3)),
                        nodes=3, seed=draw(st.integers(0, 2)))
        keep = draw(st.lists(st.sampled_from(["node000", "node001", "node002"]), min_size=1,
                             unique=True))
        steps.append(("batch", batch.filter(pc.is_in(pc.field("node"),
                                                      pa_array(keep)))))
        if draw(st.booleans()):
            steps.append(("rollup", None))
        if draw(st.integers(0, 3)) == 0:
            steps.append(("retention", None))
    return steps


def pa_array(values):
    import pyarrow as pa

    return pa.array(values)


@pytest.fixture(scope="module")
def blank():
    """One warehouse for the examples: each starts by emptying what they write."""
    w = Warehouse(":memory:")
    yield w
    w.close()


def _empty(con):
    for table in ("gpu_samples", "gpu_latest", "rollup_pending", "gpu_samples_1m",
                  "gpu_samples_1h", "gpu_nodes_1m", "gpu_nodes_5m", "allocations", "nodes"):
        con.execute(f"DELETE FROM {table}")
    con.execute("DELETE FROM meta WHERE key LIKE 'retention.%' OR key LIKE '%latest%' "
                "OR key = $1", [node_minutes.BLOCKS_FROM_KEY])


@settings(max_examples=max(10, settings().max_examples // 3))  # ~10 writes an example
@given(_deliveries())
def test_any_delivery_order_keeps_the_minute_tiers_sums(blank, steps):
    w = blank
    w.write(_empty).result()
    for kind, batch in steps:
        if kind == "batch":
            w.ingest("samples", batch).result()
        elif kind == "rollup":
            w.rollup().result()
        else:
            w.apply_retention(T0 + timedelta(hours=1), Retention(
                raw_days=1, minute_days=90, hour_days=730)).result()
    w.rollup().result()
    assert len(_kept(w.reader())) > 0
    assert_kept(w)


def test_migration_fills_it_from_an_existing_minute_tier(tmp_path):
    """A warehouse written before the table: the migration sums its minute rows as the
    rollup would (an index beyond 63 leaves the mask NULL), but for migration 027's power
    count and lowest clock, NULL in rows written before it; a refresh fills them."""
    import duckdb

    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    mine = migrated_before(con, "node_minutes")
    con.execute("""INSERT INTO gpu_samples_1m (ts, node, gpu_index, samples, covered_s,
                   util_pct_avg, power_w_avg, temp_c_avg, temp_c_max, throttle_thermal_s,
                   throttle_power_s, sm_clock_mhz_avg) VALUES
                   ('2026-11-02 00:00', 'a', 0, 4, 60, 50, 300, 60, 70, 15, 0, 1980),
                   ('2026-11-02 00:00', 'a', 1, 3, 45, NULL, 200, 61, 72, 0, 30, 1410),
                   ('2026-11-02 00:00', 'b', 70, 4, 60, 10, NULL, NULL, NULL, 0, 0, NULL),
                   ('2026-11-02 00:01', 'a', 1, 4, 60, 20, 100, 50, 55, 0, 0, 1755)""")
    assert migrate(con) == [m.version for m in available() if m.version >= mine]
    # migration 028 sums no block: they are read from the minutes before the one after
    # the last minute written then; a refresh sums the blocks it touches
    assert _blocks(con).empty
    assert con.execute("SELECT value FROM meta WHERE key = $1",
                       [node_minutes.BLOCKS_FROM_KEY]).fetchone()[0] == "2026-11-02 00:05:00"
    got, want = _kept(con), _sums(con)
    new = ["power_n", "sm_clock_mhz_min"]
    assert list(got.columns) == list(want.columns) and got[new].isna().all().all()
    pd.testing.assert_frame_equal(got.drop(columns=new), want.drop(columns=new),
                                  check_dtype=False, rtol=1e-12)
    node_minutes.refresh(con, *ALL_TIME)
    got = _kept(con)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)
    first = [(int(n), None if pd.isna(c) else float(c)) for n, c in got[new].values[:2]]
    assert first == [(2, 1410.0), (0, None)]  # a's two GPUs at 00:00; b: no power, no clock
    a = got[(got.node == "a") & (got.ts == datetime(2026, 11, 2))].iloc[0]
    assert (a.gpus, a.gpu_mask, a.samples, a.util_n, a.util_pct_sum, a.power_w_sum) == (
        2, 3, 7, 1, 50.0, 500.0)
    assert a.temp_c_wsum == 60 * 4 + 61 * 3 and a.throttle_power_s == 30.0
    assert pd.isna(got[got.node == "b"].iloc[0].gpu_mask)
    pd.testing.assert_frame_equal(_blocks(con), _block_sums(con), check_dtype=False)
    con.close()


# -- the charts give the replaced queries' figures ---------------------------------------

def _old_telemetry(cur, job_id, now):
    span = jobs.span(cur, job_id=job_id, now=now)
    if span is None:
        return None
    start, end = span
    params = {"job_id": job_id, "start": start, "end": end, "step_s": 60,
              "bucket_s": utilisation.bucket_s(start, end)}
    return cur.execute(OLD_TELEMETRY, params).df()


def _cells(cur, sql, now, start, bucket_s, job_id="j"):
    """The heat map query ``sql`` (stragglers' minute or block form) over job ``j``."""
    with job_allocations(cur, job_id) as own:
        return own.execute(sql, {"end": now, "start": start, "bucket_s": bucket_s}).df()


def _same(got, want):
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False, rtol=1e-12, atol=1e-9)


def _assert_charts(cur, start, end, partition=None, rack=None):
    params = utilisation.scope_params(start, end, partition, rack,
                                      bucket_s=utilisation.bucket_s(start, end))
    _same(thermal.throttling(cur, start=start, end=end, partition=partition, rack=rack),
          cur.execute(OLD_THROTTLE, params).df())
    _same(utilisation.allocated_vs_used(cur, start=start, end=end, partition=partition,
                                        rack=rack),
          cur.execute(OLD_OVER_TIME, params).df())


@pytest.fixture(scope="module")
def seeded():
    from tests.support.dash_seed import NOW, seed_dashboard

    w = Warehouse(":memory:")
    seed_dashboard(w)
    yield w, NOW
    w.close()


@pytest.mark.parametrize("hours", [1, 4, 24, 40])
@pytest.mark.parametrize("scope", [{}, {"rack": "r03"}, {"partition": "eval"}])
def test_throttling_and_utilisation_over_time_as_before_on_the_seeded_cluster(
        seeded, hours, scope):
    wh, now = seeded
    cur = wh.reader()
    got = thermal.throttling(cur, start=now - timedelta(hours=hours), end=now, **scope)
    assert len(got) > 0 and got["mean_c"].notna().all()
    _assert_charts(cur, now - timedelta(hours=hours), now, **scope)


def _old_heatmap(cur, job_id, now, window=None):
    start, bucket_s = window or stragglers.heatmap_window(cur, job_id=job_id, now=now)
    return cur.execute(OLD_HEATMAP, {"job_id": job_id, "now": now, "start": start,
                                     "bucket_s": bucket_s}).df()


def test_straggler_heat_map_as_before_on_the_seeded_cluster(seeded):
    wh, now = seeded
    cur = wh.reader()
    job_ids = [r[0] for r in cur.execute("SELECT DISTINCT job_id FROM allocations").fetchall()]
    for job_id in job_ids:
        got = stragglers.heatmap(cur, job_id=job_id, now=now)
        assert len(got) > 0 and got["clock_mhz"].notna().any(), job_id
        _same(got.drop(columns="clock_rel"), _old_heatmap(cur, job_id, now))


def test_job_telemetry_as_before_on_the_seeded_cluster(seeded):
    wh, now = seeded
    cur = wh.reader()
    job_ids = [r[0] for r in cur.execute("SELECT DISTINCT job_id FROM allocations").fetchall()]
    assert len(job_ids) >= 5
    for job_id in job_ids:
        got = jobs.telemetry(cur, job_id=job_id, now=now)
        assert len(got) > 0, job_id
        _same(got, _old_telemetry(cur, job_id, now))


# random minute rows and allocations

NODES = ["n0", "n1", "n2"]
W0 = datetime(2026, 11, 2, 6)


def test_job_telemetry_takes_no_allocation_without_a_start():
    """``allocations.start_ts`` may be NULL (a run known without its start): the former
    query held nothing with it; the node sums must not count its GPU as held (then the
    node-minute would be served whole: 2 GPUs instead of 1). A second reader's case."""
    w0 = datetime(2026, 11, 2, 6)
    with Warehouse(":memory:") as w:
        def load(con):
            con.execute("""INSERT INTO gpu_samples_1m (ts, node, gpu_index, samples,
                           covered_s, util_pct_avg, power_w_avg) VALUES
                           ($t, 'n0', 0, 4, 60, 10, 100), ($t, 'n0', 1, 4, 60, 90, 300)""",
                        {"t": w0 + timedelta(minutes=5)})
            con.execute(fill("""INSERT INTO allocations BY NAME
                           SELECT *{key} FROM (VALUES ('j', 0, 'n0', 0::SMALLINT, $s, $e),
                                                      ('j', 1, 'n0', 1, NULL, NULL))
                           AS a(job_id, run_index, node, gpu_index, start_ts, end_ts)""",
                             key=derived_columns("allocations")),
                        {"s": w0, "e": w0 + timedelta(minutes=10)})
            node_minutes.refresh(con, w0, w0 + timedelta(hours=1))
        w.write(load).result()
        cur, now = w.reader(), w0 + timedelta(minutes=20)
        want = _old_telemetry(cur, "j", now)
        assert want["gpus"].tolist() == [1]
        _same(jobs.telemetry(cur, job_id="j", now=now), want)
        # a job that never held a GPU has no span (not the 31 days before now)
        assert jobs.span(cur, job_id="unknown", now=now) is None
        assert jobs.telemetry(cur, job_id="unknown", now=now).empty


@st.composite
def _cluster(draw):
    keys = draw(st.lists(st.tuples(st.integers(0, 179), st.sampled_from(NODES),
                                   st.sampled_from([0, 1, 2, 3, 70])),
                         min_size=1, max_size=120, unique=True))
    value = st.one_of(st.none(), st.floats(0, 100, width=32))
    rows = [{"ts": W0 + m * M, "node": n, "gpu_index": g,
             "samples": draw(st.integers(1, 4)), "covered_s": draw(st.sampled_from([15.0, 60.0])),
             "util_pct_avg": draw(value), "power_w_avg": draw(value),
             "temp_c_avg": draw(value), "temp_c_max": draw(value),
             "throttle_thermal_s": draw(st.sampled_from([0.0, 15.0])),
             "throttle_power_s": draw(st.sampled_from([0.0, 30.0])),
             "sm_clock_mhz_avg": draw(st.one_of(st.none(), st.floats(200, 2000, width=32)))}
            for m, n, g in keys]
    allocs = []
    for run in range(draw(st.integers(1, 3))):
        lo = W0 + draw(st.integers(-30, 170)) * timedelta(seconds=30)
        hi = None if draw(st.integers(0, 4)) == 0 else lo + draw(st.integers(0, 200)) * \
            timedelta(seconds=30)
        for node, gpu in draw(st.lists(st.tuples(st.sampled_from(NODES),
                                                 st.sampled_from([0, 1, 2, 3, 70])),
                                       min_size=1, max_size=10, unique=True)):
            allocs.append({"job_id": "j", "run_index": run, "node": node, "gpu_index": gpu,
                           "start_ts": lo, "end_ts": hi})
    nodes = draw(st.lists(st.sampled_from(NODES), min_size=0, max_size=3, unique=True))
    racks = {n: draw(st.sampled_from(["r0", "r1"])) for n in nodes}
    return rows, allocs, racks


def _load(con, rows, allocs, racks):
    _empty(con)
    frames = {"gpu_samples_1m": pd.DataFrame(rows), "allocations": pd.DataFrame(allocs),
              "nodes": pd.DataFrame({"node": list(racks), "rack": list(racks.values()),
                                     "partition": "train", "gpus": 8})}
    for table, frame in frames.items():
        if len(frame):
            con.register("f", frame)
            con.execute(f"INSERT INTO {table} BY NAME SELECT *{derived_columns(table)} FROM f")
            con.unregister("f")
    node_minutes.refresh(con, *ALL_TIME)


@given(_cluster(), st.integers(0, 170), st.integers(1, 200), st.sampled_from([None, "r0"]))
def test_charts_as_before_on_random_minutes(blank, cluster, lo, width, rack):
    blank.write(lambda con: _load(con, *cluster)).result()
    cur = blank.reader()
    start = W0 + lo * timedelta(seconds=61)
    _assert_charts(cur, start, start + width * M, rack=rack)
    now = W0 + timedelta(hours=3)
    want = _old_telemetry(cur, "j", now)
    got = jobs.telemetry(cur, job_id="j", now=now)
    if want is None:
        assert got.empty
    else:
        _same(got, want)


@given(_cluster(), st.integers(0, 170), st.sampled_from([60, 120, 300]), st.integers(0, 3))
def test_straggler_heat_map_as_before_on_random_minutes(blank, cluster, lo, bucket_s, stale):
    """The heat map from the node sums where a node-minute is whole, from its GPU rows
    elsewhere: the cells of the query over every GPU row, on random minutes (partial
    nodes, two runs on a GPU in a minute, open allocations, indices beyond 63, NULL
    clocks and power), from any minute, in 1-5 minute buckets, with the node-minutes of
    every ``stale + 1``-th minute as written before migration 027 (no clock, no power
    count: read from their GPU rows)."""
    blank.write(lambda con: _load(con, *cluster)).result()
    if stale:
        blank.write(lambda con: con.execute(
            "UPDATE gpu_nodes_1m SET power_n = NULL, sm_clock_mhz_min = NULL "
            "WHERE minute(ts) % $k = 0", {"k": stale + 1})).result()
    cur = blank.reader()
    now = W0 + timedelta(hours=3)
    window = (W0 + lo * timedelta(seconds=61), bucket_s)
    want = _old_heatmap(cur, "j", now, window)
    got = _cells(cur, stragglers._HEATMAP_SQL, now, *window)
    _same(got, want)
    if stragglers.heatmap_window(cur, job_id="j", now=now) is not None:
        _same(stragglers.heatmap(cur, job_id="j", now=now).drop(columns="clock_rel"),
              _old_heatmap(cur, "j", now))


@given(_cluster(), st.integers(0, 170), st.sampled_from([300, 600, 900]),
       st.one_of(st.none(), st.integers(0, 38)), st.booleans(), st.integers(0, 3))
def test_telemetry_and_heat_map_from_blocks_as_before_on_random_minutes(
        blank, cluster, lo, bucket_s, mark, drop, stale):
    """Buckets of whole 5-minute blocks read a block's sums where the job held the node
    all of it, the minute rows elsewhere (a group's first and last minutes, overlapping
    groups, the blocks before meta's first block): the figures of the queries over every
    GPU row, on random minutes, with meta's first block anywhere (the blocks before it
    deleted or not, as after migration 028) and stale node-minutes (before 027)."""
    def load(con):
        _load(con, *cluster)
        if stale:
            con.execute("UPDATE gpu_nodes_1m SET power_n = NULL, sm_clock_mhz_min = NULL "
                        "WHERE minute(ts) % $k = 0", {"k": stale + 1})
            node_minutes.refresh_blocks(con, *ALL_TIME)
        if mark is not None:
            first = W0 + 5 * mark * M
            meta.put(con, node_minutes.BLOCKS_FROM_KEY, first.isoformat(sep=" "))
            if drop:
                con.execute("DELETE FROM gpu_nodes_5m WHERE ts < $1", [first])
    blank.write(load).result()
    cur = blank.reader()
    now = W0 + timedelta(hours=3)
    span = jobs.span(cur, job_id="j", now=now)
    if span is not None:
        want = cur.execute(OLD_TELEMETRY, {"job_id": "j", "start": span[0], "end": span[1],
                                           "step_s": 60, "bucket_s": bucket_s}).df()
        _same(jobs.minute_telemetry(cur, job_id="j", start=span[0], end=span[1],
                                    bucket_s=bucket_s), want)
    window = (W0 + lo * timedelta(seconds=61), bucket_s)
    got = _cells(cur, stragglers._HEATMAP_BLOCKS_SQL, now, *window)
    _same(got, _old_heatmap(cur, "j", now, window))


def test_a_minute_at_another_nodes_edge_is_read_once(blank):
    """A group's edge minutes are read from the minute rows by their times: a minute
    inside another node's block (n0's 06:07, n1's first minute) comes from that block
    alone, not from its minute row too."""
    rows = [{"ts": W0 + m * M, "node": n, "gpu_index": g, "samples": 4, "covered_s": 60.0,
             "util_pct_avg": 10.0 + m, "power_w_avg": 100.0 + g, "temp_c_avg": 50.0,
             "temp_c_max": 55.0, "throttle_thermal_s": 0.0, "throttle_power_s": 0.0,
             "sm_clock_mhz_avg": 1500.0 + m}
            for m in range(30) for n, gpus in (("n0", (0, 1)), ("n1", (0,))) for g in gpus]
    allocs = [{"job_id": "j", "run_index": 0, "node": "n0", "gpu_index": g, "start_ts": W0,
               "end_ts": W0 + 30 * M} for g in (0, 1)]
    allocs.append({"job_id": "j", "run_index": 1, "node": "n1", "gpu_index": 0,
                   "start_ts": W0 + 7 * M, "end_ts": W0 + 20 * M})
    blank.write(lambda con: _load(con, rows, allocs, {})).result()
    cur, now = blank.reader(), W0 + timedelta(hours=1)
    want = cur.execute(OLD_TELEMETRY, {"job_id": "j", "start": W0, "end": W0 + 30 * M,
                                       "step_s": 60, "bucket_s": 300}).df()
    assert want["gpus"].tolist() == [2, 3, 3, 3, 2, 2]
    _same(jobs.minute_telemetry(cur, job_id="j", start=W0, end=W0 + 30 * M, bucket_s=300),
          want)
    got = _cells(cur, stragglers._HEATMAP_BLOCKS_SQL, now, W0, 300)
    _same(got, _old_heatmap(cur, "j", now, (W0, 300)))

from datetime import datetime, timedelta

import pyarrow.compute as pc
import pytest

from tests.support.frames import T0, samples
from warehouse import Retention, Warehouse, meta
from warehouse.rollups import MINUTE, merge_ranges


@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    yield w
    w.close()


def q(wh, sql):
    return wh.reader().execute(sql).fetchall()


def test_minute_rollup_matches_raw_aggregates(wh):
    wh.ingest("samples", samples(ticks=8, gpus=2)).result()  # two minutes of 15-s samples
    wh.rollup().result()
    raw = q(wh, """SELECT date_trunc('minute', ts), gpu_index, count(*), avg(power_w), max(temp_c),
                   min(temp_c), sum(power_w * 15), sum(CASE WHEN throttle_thermal THEN 15 ELSE 0 END)
                   FROM gpu_samples GROUP BY ALL ORDER BY 1, 2""")
    rolled = q(wh, """SELECT ts, gpu_index, samples, power_w_avg, temp_c_max, temp_c_min, energy_j,
                      throttle_thermal_s FROM gpu_samples_1m ORDER BY 1, 2""")
    assert len(rolled) == 4
    for r, e in zip(rolled, raw, strict=True):
        assert r[:3] == e[:3]
        assert r[3:] == pytest.approx(e[3:], rel=1e-5)


def test_hour_rollup_weights_averages_by_samples(wh):
    # minute 0 has 4 samples at 100 W, minute 1 has 1 sample at 600 W
    wh.ingest("samples", samples(ticks=4, gpus=1, power_w=100.0)).result()
    wh.ingest("samples", samples(start=T0 + MINUTE, ticks=1, gpus=1, power_w=600.0)).result()
    wh.rollup().result()
    (avg, n, energy, mx), = q(wh, "SELECT power_w_avg, samples, energy_j, power_w_max FROM gpu_samples_1h")
    assert n == 5
    assert avg == pytest.approx((4 * 100 + 600) / 5)
    assert energy == pytest.approx((4 * 100 + 600) * 15)
    assert mx == pytest.approx(600)


def test_late_samples_update_their_buckets(wh):
    wh.ingest("samples", samples(ticks=2, gpus=1, power_w=100.0)).result()
    wh.rollup().result()
    late = samples(start=T0 + timedelta(seconds=30), ticks=2, gpus=1, power_w=300.0)
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert q(wh, "SELECT samples, power_w_avg FROM gpu_samples_1m") == [(4, pytest.approx(200.0))]
    assert q(wh, "SELECT samples FROM gpu_samples_1h") == [(4,)]
    assert q(wh, "SELECT count(*) FROM rollup_pending") == [(0,)]


def test_rollup_is_incremental(wh):
    wh.ingest("samples", samples(ticks=4)).result()
    first = wh.rollup().result()
    assert first.minute_rows == 8
    assert wh.rollup().result().minute_rows == 0
    wh.ingest("samples", samples(start=T0 + timedelta(hours=3), ticks=4)).result()
    third = wh.rollup().result()
    assert third.minute_rows == 8 and third.hour_rows == 8
    assert q(wh, "SELECT count(*) FROM gpu_samples_1h") == [(16,)]


def test_merge_ranges_widens_to_buckets_and_merges():
    t = datetime(2026, 1, 1, 10, 0, 20)
    spans = merge_ranges([(t, t), (t + timedelta(seconds=50), t + timedelta(seconds=70)),
                          (t + timedelta(hours=1), t + timedelta(hours=1))], MINUTE)
    assert spans == [
        (datetime(2026, 1, 1, 10, 0), datetime(2026, 1, 1, 10, 2)),
        (datetime(2026, 1, 1, 11, 0), datetime(2026, 1, 1, 11, 1)),
    ]


def test_retention_drops_each_tier_at_its_own_age(wh):
    old = T0 - timedelta(days=20)
    wh.ingest("samples", samples(start=old, ticks=4)).result()
    wh.ingest("samples", samples(ticks=4)).result()
    wh.rollup().result()
    deleted = wh.apply_retention(T0 + timedelta(hours=1),
                                 Retention(raw_days=14, minute_days=30, hour_days=365)).result()
    assert deleted["gpu_samples"] == 32
    assert deleted["gpu_samples_1m"] == 0
    assert q(wh, "SELECT count(*) FROM gpu_samples") == [(32,)]
    assert q(wh, "SELECT count(DISTINCT ts) FROM gpu_samples_1m") == [(2,)]
    wh.apply_retention(T0 + timedelta(hours=1), Retention(raw_days=14, minute_days=10,
                                                          hour_days=365)).result()
    assert q(wh, "SELECT count(DISTINCT ts) FROM gpu_samples_1m") == [(1,)]
    assert q(wh, "SELECT count(DISTINCT ts) FROM gpu_samples_1h") == [(2,)]


def test_retention_keeps_raw_samples_the_rollup_still_needs(wh):
    """A backfill older than raw_days stays until its minutes are rolled up (issue 17)."""
    old = T0 - timedelta(days=5)
    wh.ingest("samples", samples(start=old, ticks=4, gpus=2)).result()
    keep = Retention(raw_days=1, minute_days=90, hour_days=730)
    assert wh.apply_retention(T0, keep).result()["gpu_samples"] == 0
    wh.rollup().result()
    assert q(wh, "SELECT count(*), sum(samples) FROM gpu_samples_1m") == [(2, 8)]
    assert wh.apply_retention(T0, keep).result()["gpu_samples"] == 8


def test_late_gpu_beyond_raw_retention_keeps_the_other_gpus_minutes(wh):
    """Node 0's raw rows are gone (retention); node 1's samples of the same minute arrive
    late: the minute tier gains node 1's row and keeps node 0's (issue 17)."""
    old = T0 - timedelta(days=3)
    wh.ingest("samples", samples(start=old, ticks=4, gpus=2, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    assert q(wh, "SELECT count(*) FROM gpu_samples") == [(0,)]
    late = samples(start=old, ticks=4, gpus=2, nodes=2, power_w=300.0).filter(
        pc.equal(pc.field("node"), "node001"))
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert q(wh, "SELECT node, gpu_index, samples, power_w_avg FROM gpu_samples_1m "
                 "ORDER BY ALL") == [("node000", 0, 4, 100.0), ("node000", 1, 4, 100.0),
                                     ("node001", 0, 4, 300.0), ("node001", 1, 4, 300.0)]
    assert q(wh, "SELECT count(*), sum(samples) FROM gpu_samples_1h") == [(4, 16)]


def test_newest_sample_survives_raw_retention(wh):
    """Where a source resumes (meta.latest_sample_ts) outlives the raw tier (issue 17)."""
    wh.ingest("samples", samples(ticks=4, gpus=2)).result()
    wh.rollup().result()
    wh.apply_retention(T0 + timedelta(days=3), Retention(raw_days=1, minute_days=90,
                                                         hour_days=730)).result()
    assert q(wh, "SELECT count(*) FROM gpu_samples") == [(0,)]
    assert meta.latest_sample_ts(wh.reader()) == T0 + timedelta(seconds=45)


def test_mig_instance_samples_outlive_the_raw_tier_for_the_recheck(wh):
    """A MIG job's energy is recomputed from the instances' samples for
    analytics.recheck_days (2): they are kept retention.mig_days (3), not raw_days."""
    import pandas as pd

    for age_days in (0.5, 2.5, 3.5):
        ts = T0 - timedelta(days=age_days)
        wh.ingest("samples", samples(start=ts, ticks=1, gpus=1)).result()
        wh.ingest("mig_samples", pd.DataFrame([{"ts": ts, "node": "node000", "gpu_index": 0,
                                                "gpu_i_id": 1, "gpu_i_profile": "1g.10gb"}])
                  ).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1.25, minute_days=90, hour_days=730)).result()
    assert q(wh, "SELECT count(*) FROM gpu_samples") == [(1,)]
    assert q(wh, "SELECT count(*) FROM gpu_mig_samples") == [(2,)]


def test_late_batch_beyond_raw_retention_keeps_each_gpus_other_minutes(wh):
    """Node 0's ten minutes are rolled up and their raw rows gone; one late batch
    re-delivers node 0's first minute with node 1's ten new minutes: node 0 keeps its
    other nine minutes (its raw rows in the 6-hour slice must not cost them)."""
    old = T0 - timedelta(days=3)
    wh.ingest("samples", samples(start=old, ticks=40, gpus=1, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    both = samples(start=old, ticks=40, gpus=1, nodes=2, power_w=100.0)
    late = both.filter((pc.field("node") == "node001") | (pc.field("ts") < old + MINUTE))
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert q(wh, "SELECT node, count(*), sum(samples) FROM gpu_samples_1m GROUP BY ALL "
                 "ORDER BY ALL") == [("node000", 10, 40), ("node001", 10, 40)]
    assert q(wh, "SELECT node, samples FROM gpu_samples_1h ORDER BY ALL") == [
        ("node000", 40), ("node001", 40)]


def test_partial_redelivery_beyond_raw_retention_keeps_the_complete_minute(wh):
    """Two of a rolled-up minute's four samples delivered again after retention deleted
    the raw rows (a backfill re-run from mid-minute): the raw tier no longer finds them
    stored, and the minute keeps its four samples rather than becoming the two."""
    old = T0 - timedelta(days=3)
    wh.ingest("samples", samples(start=old, ticks=4, gpus=1, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    again = samples(start=old, ticks=4, gpus=1, power_w=100.0).slice(2)
    wh.ingest("samples", again).result()
    wh.rollup().result()
    assert q(wh, "SELECT samples, covered_s FROM gpu_samples_1m") == [(4, 60.0)]
    assert q(wh, "SELECT samples FROM gpu_samples_1h") == [(4,)]


def test_late_batch_beyond_minute_retention_keeps_the_other_gpus_hour(wh):
    """Node 0's hour is older than minute_days (its minute rows are gone); node 1's
    samples of that hour arrive late (a backfill): node 0's hour row stays."""
    old = T0 - timedelta(days=120)
    wh.ingest("samples", samples(start=old, ticks=8, gpus=1, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    assert q(wh, "SELECT count(*) FROM gpu_samples_1m") == [(0,)]
    late = samples(start=old, ticks=8, gpus=1, nodes=2, power_w=300.0).filter(
        pc.field("node") == "node001")
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert q(wh, "SELECT node, samples, power_w_avg FROM gpu_samples_1h ORDER BY ALL") == [
        ("node000", 8, 100.0), ("node001", 8, 300.0)]


def test_late_batch_is_guarded_before_retention_records_its_cutoff(wh):
    """A warehouse whose retention ran before the cutoff was recorded (no meta key): a
    late batch still keeps the other GPUs' minutes."""
    old = T0 - timedelta(days=3)
    wh.ingest("samples", samples(start=old, ticks=4, gpus=1, power_w=100.0)).result()
    wh.rollup().result()
    wh.apply_retention(T0, Retention(raw_days=1, minute_days=90, hour_days=730)).result()
    wh._writer.submit(lambda con: con.execute(
        "DELETE FROM meta WHERE key LIKE 'retention.%'")).result()
    late = samples(start=old, ticks=4, gpus=1, nodes=2, power_w=300.0).filter(
        pc.field("node") == "node001")
    wh.ingest("samples", late).result()
    wh.rollup().result()
    assert q(wh, "SELECT node, samples FROM gpu_samples_1m ORDER BY ALL") == [
        ("node000", 4), ("node001", 4)]

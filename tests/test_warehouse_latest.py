"""The writer's latest-sample table ``gpu_latest`` (issue 17): one row per GPU, kept in the
ingest transaction, answering every "now" question exactly as a scan of the raw tier does,
whatever order, lateness or repetition the batches arrive in."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import questions as bq
from tests.support.dash_seed import NOW, seed_dashboard
from tests.support.frames import T0, samples
from tests.support.migrations import migrated_before
from warehouse import Warehouse
from warehouse.migrate import migrate
from warehouse.queries import fleet, overview, topology, utilisation

COLUMNS = "SELECT column_name, data_type FROM information_schema.columns " \
          "WHERE table_name = $t ORDER BY ordinal_position"


@pytest.fixture
def wh():
    w = Warehouse(":memory:")
    yield w
    w.close()


def table_rows(cur) -> pd.DataFrame:
    return cur.execute("SELECT * FROM gpu_latest ORDER BY node, gpu_index").df()


def raw_newest(cur) -> pd.DataFrame:
    return cur.execute(
        "SELECT * FROM gpu_samples QUALIFY row_number() OVER "
        "(PARTITION BY node, gpu_index ORDER BY ts DESC) = 1 ORDER BY node, gpu_index").df()


def window_answers(cur, now) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The latest rows at ``now`` (2-minute window) from the source
    :func:`fleet.latest_source` picks, and from the raw tier."""
    params = {"now": now, "since": now - timedelta(seconds=fleet.STALE_AFTER_S)}
    return tuple(
        cur.execute(f"SELECT * FROM {fleet.LATEST_ROWS[k]} ORDER BY node, gpu_index",
                    params).df() for k in (fleet.latest_source(cur, now), "raw"))


def test_columns_are_those_of_the_raw_tier(wh):
    cur = wh.reader()
    # a migration adding a column to gpu_samples must add it to gpu_latest too
    assert cur.execute(COLUMNS, {"t": "gpu_latest"}).fetchall() == \
        cur.execute(COLUMNS, {"t": "gpu_samples"}).fetchall()


def batch(start, ticks, seed, nodes=2, gpus=4) -> pa.Table:
    return samples(start=start, ticks=ticks, gpus=gpus, nodes=nodes, seed=seed)


def test_late_out_of_order_retried_and_backfilled_batches(wh):
    step = timedelta(seconds=15)
    wh.ingest("samples", batch(T0 + 10 * step, 4, seed=1)).result()  # ticks 10..13
    wh.ingest("samples", batch(T0 + 4 * step, 4, seed=2)).result()  # late: 4..7
    # a retry of the newest batch with other values: the first delivery stays, as in raw
    wh.ingest("samples", batch(T0 + 10 * step, 4, seed=3)).result()
    # one node's newer scrape only
    newer = batch(T0 + 14 * step, 1, seed=4)
    wh.ingest("samples", newer.filter(pa.compute.equal(newer["node"], "node001"))).result()
    wh.ingest("samples", batch(T0 - timedelta(days=2), 40, seed=5)).result()  # backfill
    cur = wh.reader()
    latest = table_rows(cur)
    pd.testing.assert_frame_equal(latest, raw_newest(cur))
    assert len(latest) == 8
    assert set(latest.groupby("node")["ts"].max()) == {T0 + 13 * step, T0 + 14 * step}
    assert fleet.latest_source(cur, T0 + 13 * step) == "raw"  # node001 is ahead of it
    for now in (T0 + 13 * step, T0 + 14 * step, T0 + timedelta(minutes=3),
                T0 + timedelta(minutes=10)):
        picked, raw = window_answers(cur, now)
        pd.testing.assert_frame_equal(picked, raw)
    assert len(window_answers(cur, T0 + 14 * step)[0]) == 8


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.sampled_from(range(6)), min_size=1, max_size=6))
def test_any_delivery_order_gives_the_raw_tiers_newest_rows(wh, order):
    """Batches of ticks 3k..3k+3 (overlapping by one tick, values differing by batch),
    delivered in any order, any number of times: the table always holds the raw tier's
    newest row per GPU."""
    wh.write(lambda con: con.execute("DELETE FROM gpu_samples; DELETE FROM gpu_latest")
             ).result()  # one warehouse for every example
    for k in order:
        wh.ingest("samples", batch(T0 + timedelta(seconds=45 * k), 4, seed=k, nodes=1,
                                   gpus=2)).result()
    cur = wh.reader()
    pd.testing.assert_frame_equal(table_rows(cur), raw_newest(cur))


def test_dashboard_now_queries_answer_as_the_raw_tier(wh, monkeypatch):
    seed_dashboard(wh, NOW, hours=3)
    cur = wh.reader()
    assert fleet.latest_source(cur, NOW) == "table"
    calls = {
        "headline": lambda: pd.DataFrame([overview.headline(cur, now=NOW,
                                                            week_start=NOW - timedelta(days=2))]),
        "floor": lambda: overview.rack_floor(cur, now=NOW),
        "gpus_now": lambda: topology.gpus_now(cur, now=NOW),
        "idle_now": lambda: utilisation.idle_allocated_now(cur, now=NOW, idle_pct=50.0),
        "hottest": lambda: bq.hottest_gpus(cur, now=NOW, limit=10),
    }
    from_table = {name: f() for name, f in calls.items()}
    assert from_table["gpus_now"]["sample_ts"].notna().sum() > 0  # the checks compare data
    assert len(from_table["hottest"]) == 10
    monkeypatch.setattr(fleet, "latest_source", lambda cur, now: "raw")
    for name, f in calls.items():
        pd.testing.assert_frame_equal(from_table[name], f(), obj=name)


def test_a_now_in_the_past_reads_the_raw_tier(wh):
    wh.ingest("samples", batch(T0, 20, seed=1)).result()  # 0 .. 285 s
    cur = wh.reader()
    past = T0 + timedelta(seconds=100)
    assert fleet.latest_source(cur, past) == "raw"
    assert fleet.latest_source(cur, T0 + timedelta(seconds=285)) == "table"
    hot = bq.hottest_gpus(cur, now=past, limit=3)
    assert (hot["ts"] == T0 + timedelta(seconds=90)).all()  # not the table's 285-s rows


def test_the_migration_fills_the_table_from_an_older_warehouse():
    con = duckdb.connect()
    ours = migrated_before(con, "gpu_latest")  # written before gpu_latest existed
    con.register("b", batch(T0, 5, seed=1))
    con.execute("INSERT INTO gpu_samples BY NAME SELECT * FROM b")
    assert ours in migrate(con)
    pd.testing.assert_frame_equal(table_rows(con), raw_newest(con))
    assert len(table_rows(con)) == 8

"""The kept hours' allocation moments (``fleet_hours_1h.alloc_m2``, ``alloc_gpu_us``,
migration 21, issue 17 review): an allocation moved in time with its length kept (a
jobcomp log re-imported with a corrected time zone) or moved to another GPU at the same
times is not served stale, by the fleet's GPU-hours or the Energy page's method card,
and the refresh recomputes such hours even before its recheck window; rows kept before
the migration (or hashed by another DuckDB) are filled, not recomputed, where their
allocations are unchanged, and recomputed where not."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from tests.support.allocations import edit_allocations
from tests.support.dash_seed import NOW, seed_dashboard
from tests.support.frames import T0, samples
from warehouse import Warehouse, kept_hours, meta, usage
from warehouse import fleet_hours as fh
from warehouse.analytics import refresh
from warehouse.queries import energy_method as em
from warehouse.schema import SCHEMAS

H = timedelta(hours=1)
SENTINEL = datetime(2000, 1, 1)


def _alloc(start, end, gpu=0):
    return pa.Table.from_pylist([{"job_id": "a", "run_index": 0, "node": "node000",
                                  "gpu_index": gpu, "start_ts": start, "end_ts": end}],
                                schema=SCHEMAS["allocations"])


def _live_card(cur, start, end):
    df = cur.execute(em._WINDOW_SQL, {"start": start, "end": end}).df()
    df = em._by_method(cur, df, start=start, end=end, resolution=None)
    return [float(df[m].sum()) for m in em.METHODS]


def _served(cur, start, end) -> bool:
    return fh.table_serves(cur, start, end)


def _counter_then_power(w, *, counter_gpus=(0, 1)):
    """Four hours of two GPUs at 300 W: the energy counter in hours 0-1 on
    ``counter_gpus``, none elsewhere (the power integral there)."""
    batch = samples(start=T0, ticks=4 * 60, gpus=2, interval_s=60.0, power_w=300.0)
    ts = batch.column("ts").to_numpy()
    gpu = batch.column("gpu_index").to_numpy()
    counter = np.where((ts < np.datetime64(T0 + 2 * H)) & np.isin(gpu, counter_gpus),
                       (ts - np.datetime64(T0)).astype("timedelta64[s]").astype(float)
                       * 300.0, np.nan)
    batch = batch.append_column("energy_j", pa.array(counter, mask=np.isnan(counter)))
    w.ingest("samples", batch).result()
    w.rollup().result()


def _kept_20_days(w) -> datetime:
    """The counter-then-power hours with one run (T0 + 1 h to + 2 h), refreshed until
    every hour is kept at ``now`` = T0 + 20 days, which it returns."""
    _counter_then_power(w)
    w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
    now = T0 + 20 * timedelta(days=1)
    while w.write(lambda con: refresh(con, now, None)).result()["fleet_pending"]:
        pass
    return now


def _check(w, start, end):
    """The kept answers equal the live ones (the method card's seconds, the fleet's
    GPU-hours)."""
    cur = w.reader()
    assert list(em.window_seconds(cur, start=start, end=end)) == pytest.approx(
        _live_card(cur, start, end), rel=1e-12)
    assert list(fh.fleet_hours(cur, start=start, end=end).values()) == pytest.approx(
        fh._live(cur, start, end), rel=1e-12)


@pytest.mark.parametrize("later", [timedelta(0), timedelta(days=5)])
def test_an_allocation_moved_with_its_length_is_not_served_stale(later):
    """The reviewer's case: the run re-delivered an hour later (the same microseconds in
    the window) moves its seconds from counter hours to power-integral hours. Read at
    once it is computed live; after the next refresh (its hours inside the recheck
    window, or 5 days before it) the table serves it again, recomputed."""
    with Warehouse(":memory:") as w:
        _counter_then_power(w)
        w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()
        now = T0 + 5 * H + later
        w.write(lambda con: refresh(con, now, None)).result()
        start, end = T0, T0 + 4 * H
        assert _served(w.reader(), start, end)
        assert em.window_seconds(w.reader(), start=start, end=end)[0] == pytest.approx(3600)
        w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result()  # upsert: moved
        assert _live_card(w.reader(), start, end)[2] == pytest.approx(3600)
        assert not _served(w.reader(), start, end)
        _check(w, start, end)
        out = w.write(lambda con: refresh(con, now + timedelta(minutes=5), None)).result()
        assert out["fleet_hours"] >= 2  # the two hours the run left and entered
        assert _served(w.reader(), start, end)
        assert em.kept_hours(w.reader(), start, end) is not None
        _check(w, start, end)


def test_an_allocation_moved_to_another_gpu_is_not_served_stale():
    """Same times, GPU 0 (energy counter) -> GPU 1 (none): the microseconds and time
    moment stay, the GPU-weighted microseconds do not."""
    with Warehouse(":memory:") as w:
        _counter_then_power(w, counter_gpus=(0,))
        w.ingest("allocations", _alloc(T0, T0 + 2 * H, gpu=0)).result()
        now = T0 + 5 * H + timedelta(days=5)
        w.write(lambda con: refresh(con, now, None)).result()
        start, end = T0, T0 + 4 * H
        assert em.window_seconds(w.reader(), start=start, end=end)[0] == pytest.approx(7200, abs=60)
        edit_allocations(w, "UPDATE allocations SET gpu_index = 1")
        assert _live_card(w.reader(), start, end)[2] == pytest.approx(7200, abs=60)
        assert not _served(w.reader(), start, end)
        _check(w, start, end)
        w.write(lambda con: refresh(con, now, None)).result()
        assert em.kept_hours(w.reader(), start, end) is not None
        _check(w, start, end)


def test_gpu_time_moved_to_another_node_at_the_same_gpu_index_is_not_served_stale():
    """A run's end learnt late and the next run started then on another node at the same
    GPU index: the microseconds, time moment and GPU-weighted microseconds of the hours
    stay, the allocation key moment (migration 23) does not. The two nodes' utilisation
    differs, so the fleet's utilised GPU-hours change."""
    with Warehouse(":memory:") as w:
        w.ingest("samples", samples(start=T0, ticks=4 * 60, gpus=1, nodes=2,
                                    interval_s=60.0)).result()
        w.rollup().result()
        w.ingest("allocations", _alloc(T0 + H, T0 + 3 * H)).result()
        now = T0 + 5 * H + timedelta(days=5)  # the hours long before the recheck window
        w.write(lambda con: refresh(con, now, None)).result()
        start, end = T0, T0 + 4 * H
        assert _served(w.reader(), start, end)
        kept = fh._live(w.reader(), start, end)
        w.ingest("allocations", _alloc(T0 + H, T0 + 2 * H)).result()  # its end, learnt
        w.ingest("allocations", pa.Table.from_pylist(
            [{"job_id": "a", "run_index": 1, "node": "node001", "gpu_index": 0,
              "start_ts": T0 + 2 * H, "end_ts": T0 + 3 * H}],
            schema=SCHEMAS["allocations"])).result()
        assert fh._live(w.reader(), start, end) != pytest.approx(kept, rel=1e-9)
        assert not _served(w.reader(), start, end)
        _check(w, start, end)
        out = w.write(lambda con: refresh(con, now, None)).result()
        assert out["fleet_hours"] == 24  # the day's hours, found by the heal chunk
        assert _served(w.reader(), start, end)
        _check(w, start, end)


@pytest.fixture()
def refreshed():
    w = Warehouse(":memory:")
    seed_dashboard(w)
    while w.write(lambda con: refresh(con, NOW, None)).result()["fleet_pending"]:
        pass
    w.write(lambda con: con.execute("UPDATE fleet_hours_1h SET computed_at = $s",
                                    {"s": SENTINEL})).result()
    yield w
    w.close()


def _recomputed(w) -> list[datetime]:
    return [r[0] for r in w.reader().execute(
        "SELECT ts FROM fleet_hours_1h WHERE computed_at <> $s ORDER BY ts",
        {"s": SENTINEL}).fetchall()]


def test_rows_kept_before_the_migration_are_filled_not_recomputed(refreshed):
    """Rows of the former code (no moments, no method card seconds): not read until
    filled; the refresh fills them without recomputing, except the hour whose allocation
    moved (its length kept) since it was kept, which it recomputes."""
    w = refreshed
    n = w.reader().execute("SELECT count(*) FROM fleet_hours_1h").fetchall()[0][0]
    old = NOW - 30 * H  # before a 1-day recheck window
    w.write(lambda con: con.execute(
        "UPDATE fleet_hours_1h SET alloc_m2 = NULL, alloc_gpu_us = NULL, "
        "energy_sig = NULL, held_s = NULL, counter_s = NULL")).result()
    aid = w.reader().execute(  # a run of two whole hours before the window
        "SELECT min(rowid) FROM allocations WHERE start_ts = $lo AND end_ts = $hi",
        {"lo": old, "hi": old + 2 * H}).fetchall()[0][0]
    edit_allocations(w, "UPDATE allocations SET start_ts = start_ts + INTERVAL 1 HOUR, "
                     "end_ts = end_ts + INTERVAL 1 HOUR WHERE rowid = $id", {"id": aid})
    start, end = NOW - 48 * H, NOW
    assert not _served(w.reader(), start, end)
    _check(w, start, end)
    out = w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=1.0,
                                                      idle_pct=5.0)).result()
    assert out["fleet_dropped"] == 2 and out["fleet_filled"] == n - 2, out
    assert _recomputed(w) == [old, old + 2 * H]  # the hours the run left and entered
    assert _served(w.reader(), start, end)
    assert em.kept_hours(w.reader(), start, end) is not None
    _check(w, start, end)


def test_a_duckdb_whose_hash_differs_re_signs_the_rows(refreshed):
    """Another DuckDB (meta's version differs, every hash changed): the method card is
    not read until the refresh signs the rows again, which recomputes none of them."""
    w = refreshed
    start, end = NOW - 48 * H, NOW
    w.write(lambda con: con.execute(
        "UPDATE fleet_hours_1h SET energy_sig = energy_sig + 1, alloc_sig = alloc_sig + 1"
    )).result()
    w.write(lambda con: con.execute("UPDATE meta SET value = 'v0.0.0' WHERE key = $k",
                                    {"k": fh.HASH_KEY})).result()
    assert em.kept_hours(w.reader(), start, end) is None
    out = w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=1.0,
                                                      idle_pct=5.0)).result()
    assert out["fleet_dropped"] == 0 and out["fleet_filled"] > 0 and out["fleet_hours"] == 0
    assert _recomputed(w) == []
    assert em.kept_hours(w.reader(), start, end) is not None
    _check(w, start, end)
    # the allocation key moments stay: they weight the stored keys (migration 26), which
    # no upgrade changes; the usage ledger's too, and its refresh recomputes no hour
    cur = w.reader()
    assert cur.execute("SELECT count(*) - count(alloc_key_us) FROM fleet_hours_1h"
                       ).fetchall()[0][0] == 0
    ledger = "SELECT count(alloc_key_us), count(*) FROM gpu_usage_hours"
    keyed, rows = cur.execute(ledger).fetchall()[0]
    assert keyed == rows > 0
    out = w.write(lambda con: usage.refresh_usage(con, NOW, recheck_days=1.0,
                                                  idle_pct=5.0)).result()
    assert out["usage_hours"] == 0


@pytest.mark.parametrize("migrated_on", ["v-signed", "v-other"])
def test_key_moments_of_another_duckdb_than_the_migrations_are_signed_again(refreshed,
                                                                           migrated_on):
    """Key moments kept before migration 26 were summed with the keys the signing DuckDB
    hashed; the migration stored the keys its own DuckDB hashed. The same DuckDB: they
    stay. Another: both tables' key moments are set aside and signed again, no hour
    computed again; either way the migration's mark goes."""
    w = refreshed
    ledger = "SELECT count(alloc_key_us), count(*) FROM gpu_usage_hours"
    fleet = "SELECT count(alloc_key_us), count(*) FROM fleet_hours_1h"
    rows = w.reader().execute(ledger).fetchall()[0][1]
    w.write(lambda con: (meta.put(con, fh.HASH_KEY, "v-signed"),
                         meta.put(con, fh.KEYS_KEY, migrated_on))).result()
    assert w.write(fh.resign_after_upgrade).result()  # the version differs: signed again
    cur = w.reader()
    assert meta.get(cur, fh.KEYS_KEY) is None
    again = migrated_on != "v-signed"
    assert cur.execute(ledger).fetchall()[0][0] == (0 if again else rows)
    assert (cur.execute(fleet).fetchall()[0][0] == 0) == again
    out = w.write(lambda con: fh.refresh_fleet_hours(con, NOW, recheck_days=1.0,
                                                      idle_pct=5.0)).result()
    assert out["fleet_dropped"] == 0 and out["fleet_filled"] > 0 and out["fleet_hours"] == 0
    assert _recomputed(w) == []
    out = w.write(lambda con: usage.refresh_usage(con, NOW, recheck_days=1.0,
                                                  idle_pct=5.0)).result()
    assert out["usage_hours"] == 0
    cur = w.reader()
    assert cur.execute(ledger).fetchall()[0] == (rows, rows)
    assert cur.execute(fleet).fetchall()[0][0] == cur.execute(fleet).fetchall()[0][1]
    assert not w.write(fh.resign_after_upgrade).result()  # once only


def test_days_long_before_the_window_are_compared_a_chunk_per_refresh(monkeypatch):
    """An allocation moved 20 days before the refresh: the chunk of days each refresh
    compares (fleet_hours.HEAL_DAYS, here 7, going back from the recheck window)
    reaches it within a few refreshes; until then the read check computes it live."""
    monkeypatch.setattr(fh, "HEAL_DAYS", 7)
    with Warehouse(":memory:") as w:
        now = _kept_20_days(w)
        w.write(lambda con: con.execute("DELETE FROM meta WHERE key = $k",
                                        {"k": fh.HEAL_KEY})).result()  # from the window
        start, end = T0, T0 + 4 * H
        assert _served(w.reader(), start, end)
        w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result()
        windows, computed = [], []
        for _ in range(4):
            windows.append(w.reader().execute(
                "SELECT value FROM meta WHERE key = $k", {"k": fh.HEAL_KEY}).fetchall())
            computed.append(w.write(lambda con: refresh(con, now, None)).result()[
                "fleet_hours"])
            _check(w, start, end)
        # 18 days before the window: the third chunk of 7 days finds its day changed
        # and computes the day's hours again
        assert computed == [0, 0, 24, 0], (computed, windows)
        assert _served(w.reader(), start, end)


def test_the_chunk_goes_back_and_starts_again(monkeypatch):
    monkeypatch.setattr(fh, "HEAL_DAYS", 7)
    with Warehouse(":memory:") as w:
        _counter_then_power(w)
        now = T0 + 20 * timedelta(days=1)
        def chunk(con):
            lo, hi, nxt = fh._heal_window(con, now, 2.0)
            kept_hours.move_heal_cursor(con, fh.HEAL_KEY, nxt, (lo, hi), [])
            return lo, hi

        got = [w.write(chunk).result() for _ in range(4)]
        top = now - timedelta(days=2)
        assert got == [(top - timedelta(days=7), top),
                       (top - timedelta(days=14), top - timedelta(days=7)),
                       (T0, top - timedelta(days=14)),
                       (top - timedelta(days=7), top)]


def test_a_stale_day_left_due_is_compared_again_by_the_next_refresh(monkeypatch):
    """More hours due than a refresh computes (a new run over the whole recheck window
    takes 48 of its 50): the chunk with the stale day stays the next refresh's, until
    its hours are computed, instead of waiting for the chunks' next rotation (issue 17
    review, R4)."""
    monkeypatch.setattr(fh, "HEAL_DAYS", 7)
    with Warehouse(":memory:") as w:
        now = _kept_20_days(w)
        top = now - timedelta(days=2)
        w.write(lambda con: kept_hours.move_heal_cursor(con, fh.HEAL_KEY, top - timedelta(days=14),
                                                    (now, now), [])).result()
        w.ingest("allocations", _alloc(T0 + 2 * H, T0 + 3 * H)).result()  # moved
        w.ingest("allocations", pa.Table.from_pylist(
            [{"job_id": "w", "run_index": 0, "node": "node000", "gpu_index": 1,
              "start_ts": top, "end_ts": now}], schema=SCHEMAS["allocations"])).result()
        start, end = T0, T0 + 4 * H
        computed = []
        for _ in range(2):
            out = w.write(lambda con: fh.refresh_fleet_hours(
                con, now, recheck_days=2.0, idle_pct=5.0, max_hours=50)).result()
            computed.append(out["fleet_hours"])
        assert computed == [50, 24], computed  # the window's 48 + 2 of the day, its 24
        assert _served(w.reader(), start, end)
        _check(w, start, end)


def test_rows_kept_before_the_key_are_filled_without_the_method_card_again(refreshed):
    """Rows of migration 22 (all but the allocation key moment): the fill signs their key
    and leaves the method card's seconds, still those of their energy rows, as they are
    (they were ~60 % of the fill's cost), recomputing no hour."""
    w = refreshed
    n = w.reader().execute("SELECT count(*) FROM fleet_hours_1h").fetchall()[0][0]
    w.write(lambda con: con.execute(
        "UPDATE fleet_hours_1h SET alloc_key_us = NULL, held_s = -1")).result()
    out = w.write(lambda con: fh.fill_rows(con)).result()
    assert out == {"fleet_filled": n, "fleet_dropped": 0}
    assert w.reader().execute(
        "SELECT count(alloc_key_us), count(*) FILTER (held_s = -1) FROM fleet_hours_1h"
    ).fetchall()[0] == (n, n)

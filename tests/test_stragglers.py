"""Stragglers in multi-node jobs (issue 15): the simulator's ground truth, detection and
its cost worked by hand, and the alert rule on simulated data."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.simulator import Cluster, SimConfig
from tests.support.stragglers import ANCHOR, LIVE, MIN, forget_stragglers, seed, store_run
from warehouse.db import streamed_frame as stragglers_frame
from warehouse.stragglers import Params, episodes, flag_minutes, refresh_stragglers


@pytest.fixture(scope="module")
def sim() -> Cluster:
    from tests.support.stragglers import cluster

    return cluster()


# --- the simulator's ground truth ----------------------------------------------------------
def test_the_first_straggler_starts_minutes_after_live_start_in_a_multi_node_job(sim):
    truth = sim.stragglers(LIVE + timedelta(hours=1))
    live = [s for s in truth if s.start >= LIVE]
    assert len(live) == 1 and live[0].start - LIVE == 2 * MIN
    assert {s.kind for s in truth} == {"slow_gpu", "slow_node"}
    jobs = sim.scheduler(LIVE + 10 * MIN)["jobs"].to_pandas().set_index("job_id")
    for s in truth:
        assert jobs.loc[s.job_id, "nodes"] >= 2 and s.end - s.start >= timedelta(minutes=15)
        assert 0.2 <= s.magnitude <= 0.35
        assert (s.gpu_index is None) == (s.kind == "slow_node")


def test_the_straggler_clocks_down_and_its_peers_wait_at_lower_power(sim):
    s = sim.stragglers(LIVE + timedelta(hours=1))[-1]
    alloc = sim.scheduler(s.start + MIN)["allocations"].to_pandas()
    mine = alloc[(alloc.job_id == s.job_id) & alloc.end_ts.isna()][["node", "gpu_index"]]

    def job_rows(a, b):
        t = sim.samples(s.start + a * MIN, s.start + b * MIN).to_pandas()
        t = t.merge(mine, on=["node", "gpu_index"])
        slow = (t.node == s.node) & ((t.gpu_index == s.gpu_index) if s.gpu_index is not None
                                     else True)
        return t[slow], t[~slow]

    slow0, peers0 = job_rows(-3, 0)
    slow1, peers1 = job_rows(1, 4)
    ratio = slow1.sm_clock_mhz.median() / peers1.sm_clock_mhz.median()
    assert ratio == pytest.approx(1 - s.magnitude, abs=0.03)
    # before: within the power brake's 4 % of its peers
    assert slow0.sm_clock_mhz.median() == pytest.approx(peers0.sm_clock_mhz.median(), rel=0.05)
    flag = "throttle_thermal" if s.kind == "slow_gpu" else "throttle_power"
    assert slow1[flag].all() and not slow0[flag].all()
    assert peers1.power_w.median() < 0.85 * peers0.power_w.median()
    assert peers1.util_pct.median() > 90  # GPU_UTIL still reads busy


def test_the_energy_counter_integrates_the_straggler_power_across_the_episode(sim):
    s = sim.stragglers(LIVE + timedelta(hours=1))[-1]
    fresh = Cluster(SimConfig(), ANCHOR, LIVE)  # its counters are computed from scratch
    t = fresh.samples(s.end - 2 * MIN, s.end + 2 * MIN).to_pandas()
    on = t[t.node == s.node].sort_values(["gpu_uuid", "ts"])
    for _, g in on.groupby("gpu_uuid"):
        step = np.diff(g.energy_j.to_numpy()) - g.power_w.to_numpy()[:-1] * 15.0
        assert np.abs(step).max() < 0.01
    later = s.end + 3 * MIN
    assert (fresh.samples(later, later + MIN).column("energy_j")
            == sim.samples(later, later + MIN).column("energy_j"))


# --- detection and cost, worked by hand ------------------------------------------------------
def minute_rows(ts, clocks, *, job_gpus=8, power=None, active=None, job="7", nodes=("a", "b")):
    """One run's GPU rows of one minute: GPUs split evenly over ``nodes``."""
    n = len(clocks)
    per = n // len(nodes)
    return pd.DataFrame({
        "job_id": job, "run_index": 0, "job_gpus": job_gpus, "ts": ts,
        "node": [nodes[i // per] for i in range(n)], "gpu_index": [i % per for i in range(n)],
        "clock": clocks, "power": power or [600.0] * n, "active": active or [80.0] * n,
        "thermal_s": [0.0] * (n - 1) + [60.0], "power_brake_s": 0.0})


T0 = datetime(2026, 11, 20, 12)


def test_a_gpu_a_quarter_below_its_peers_clock_lags_and_one_4_percent_below_does_not():
    # sorted clocks 1485, 1900, 1980 x 6: median 1980, deviations 0 x 6, 80, 495: MAD 0;
    # 1900 is 4 % below (under min_lag 5 %), 1485 is 25 % below
    df = minute_rows(T0, [1980.0] * 6 + [1900.0, 1485.0])
    f = flag_minutes(df, Params(min_lag=0.05, z=3.5, hold_min=5))
    assert list(zip(f.node, f.gpu_index, strict=True)) == [("b", 3)]
    assert f.lag.iloc[0] == pytest.approx(0.25) and f.peer_clock.iloc[0] == 1980.0


def test_noise_within_the_mad_is_not_a_lag():
    # clocks spread +-120 MHz: median 1920, deviations 0,0,30,30,90,90,120,120: MAD 60,
    # x 1.4826 = 89 MHz; 1800 is 6.25 % below the median (over min_lag) but only 1.35
    # robust deviations (under z = 3.5): not a straggler
    df = minute_rows(T0, [1800.0, 1830.0, 1890.0, 1920.0, 1920.0, 1950.0, 2010.0, 2040.0])
    assert flag_minutes(df, Params(min_lag=0.05, z=3.5, hold_min=5)).empty


def test_a_gpu_that_draws_less_and_works_less_than_its_peers_lags_by_the_smaller_drop():
    # clock as its peers'; power 420 W against 600 W (30 %), SM activity 60 % against 80 %
    # (25 %): lag min(0.30, 0.25) = 0.25
    df = minute_rows(T0, [1980.0] * 8, power=[600.0] * 7 + [420.0],
                     active=[80.0] * 7 + [60.0])
    f = flag_minutes(df, Params(min_lag=0.05, z=3.5, hold_min=5))
    assert len(f) == 1 and f.lag.iloc[0] == pytest.approx(0.25)
    only_power = minute_rows(T0, [1980.0] * 8, power=[600.0] * 7 + [420.0])
    assert flag_minutes(only_power, Params(min_lag=0.05, z=3.5, hold_min=5)).empty


def test_an_episode_needs_the_hold_time_and_costs_job_gpus_x_slowdown_x_duration():
    p = Params(min_lag=0.05, z=3.5, hold_min=5, gap_min=2)
    # node b's GPU 3 at 25 % below for 10 minutes of a 64-GPU run; node a's GPU 0 at 10 %
    # below for 4 minutes (under the hold time), in a gap of node b
    rows = []
    for m in range(10):
        clocks = [1980.0] * 7 + [1485.0]
        rows.append(minute_rows(T0 + m * MIN, clocks, job_gpus=64))
    for m in range(20, 24):
        rows.append(minute_rows(T0 + m * MIN, [1782.0] + [1980.0] * 7, job_gpus=64))
    e = episodes(flag_minutes(pd.concat(rows, ignore_index=True), p), p)
    assert len(e) == 1
    row = e.iloc[0]
    assert (row.node, row.start_ts, row.end_ts, row.minutes) == ("b", T0, T0 + 10 * MIN, 10)
    assert list(row.gpu_indices) == [3] and row.thermal_s == 600.0
    # 64 GPUs x 0.25 x 10 min / 60 = 2.667 GPU-hours
    assert row.gpu_hours_lost == pytest.approx(64 * 0.25 * 10 / 60)
    assert row.slowdown_frac == pytest.approx(0.25)


def test_two_slow_nodes_at_once_cost_the_slowest_lag_once():
    p = Params(min_lag=0.05, z=3.5, hold_min=5, gap_min=2)
    # 4 nodes of 2 GPUs: node a's GPU 0 at 10 % below, node d's GPU 1 at 25 % below, 6 min
    rows = [minute_rows(T0 + m * MIN, [1782.0] + [1980.0] * 6 + [1485.0], job_gpus=8,
                        nodes=("a", "b", "c", "d")) for m in range(6)]
    e = episodes(flag_minutes(pd.concat(rows, ignore_index=True), p), p).set_index("node")
    assert sorted(e.index) == ["a", "d"]
    assert e.loc["d", "gpu_hours_lost"] == pytest.approx(8 * 0.25 * 6 / 60)  # 0.2
    assert e.loc["a", "gpu_hours_lost"] == 0.0
    assert e.loc["a", "slowdown_frac"] == pytest.approx(0.10)


# --- detection on the simulator's warehouse --------------------------------------------------
@pytest.fixture(scope="module")
def sim_db(sim, tmp_path_factory):
    """The stragglers' test warehouse (tests/support/stragglers.py), once per module."""
    return seed(tmp_path_factory.mktemp("stragglers") / "sim.duckdb", sim)


@pytest.fixture
def sim_wh(sim_db, tmp_path):
    """A copy of ``sim_db`` for one test."""
    from warehouse import Warehouse

    shutil.copy(sim_db, tmp_path / "w.duckdb")
    w = Warehouse(str(tmp_path / "w.duckdb"))
    yield w
    w.close()


def test_the_refresh_finds_the_simulated_straggler_and_a_second_refresh_changes_nothing(
        sim, sim_wh):
    now = LIVE + 40 * MIN
    truth = [s for s in sim.stragglers(now) if s.start >= LIVE][0]
    n = sim_wh.write(lambda con: refresh_stragglers(con, now)).result()
    table = sim_wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    assert n == len(table) >= 1
    found = table[(table.job_id == truth.job_id) & (table.node == truth.node)]
    assert len(found) == 1
    row = found.iloc[0]
    assert abs(row.start_ts - truth.start) <= MIN and row.end_ts == min(now, truth.end)
    assert row.slowdown_frac == pytest.approx(truth.magnitude, abs=0.03)
    if truth.gpu_index is not None:
        assert list(row.gpu_indices) == [truth.gpu_index]
    minutes = (row.end_ts - row.start_ts).total_seconds() / 60
    assert row.gpu_hours_lost == pytest.approx(
        row.job_gpus * row.slowdown_frac * minutes / 60, rel=0.05)
    sim_wh.write(lambda con: refresh_stragglers(con, now)).result()
    again = sim_wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    pd.testing.assert_frame_equal(table, again)


# --- read back: the window's share of each episode ------------------------------------------
def episode(node, start, minutes, lost, job="7"):
    return {"job_id": job, "run_index": 0, "node": node, "start_ts": start,
            "end_ts": start + minutes * MIN, "minutes": minutes, "gpu_indices": [3],
            "job_gpus": 64, "slowdown_frac": 0.25, "gpu_hours_lost": lost,
            "clock_mhz": 1485.0, "peer_clock_mhz": 1980.0, "power_w": 500.0,
            "peer_power_w": 600.0, "thermal_s": 60.0, "power_brake_s": 0.0}


def test_a_window_counts_its_share_of_each_episode(wh):
    from warehouse import stragglers
    from warehouse.queries import stragglers as sq

    # 12:00-13:00 costing 16 GPU-hours (64 x 0.25 x 1 h) and 13:30-13:40 costing 2
    eps = pd.DataFrame([episode("a", T0, 60, 16.0), episode("b", T0 + 90 * MIN, 10, 2.0)])
    wh.write(lambda con: stragglers.write(con, eps)).result()
    cur = wh.reader()
    # 12:30-14:00 holds half of the first (8) and all of the second (2)
    total = sq.lost_total(cur, start=T0 + 30 * MIN, end=T0 + 120 * MIN)
    assert total == {"episodes": 2, "gpu_hours_lost": pytest.approx(10.0)}
    listed = sq.episodes(cur, start=T0 + 30 * MIN, end=T0 + 120 * MIN)
    assert list(listed.node) == ["a", "b"]
    assert list(listed.gpu_hours_lost) == pytest.approx([8.0, 2.0])
    assert list(listed.gpu_hours_per_hour) == pytest.approx([16.0, 12.0])
    assert sq.lost_total(cur, start=T0 + 60 * MIN, end=T0 + 90 * MIN)["episodes"] == 0


def test_the_heat_map_has_a_row_per_node_and_outlines_the_straggler():
    from dashboard.figures.job import straggler_heatmap

    cells = pd.DataFrame({"ts": [T0, T0, T0 + MIN, T0 + MIN],
                          "node": ["b", "a", "b", "a"], "clock_mhz": [1980, 1485, 1980, 1980],
                          "power_w": 600.0, "throttle_s": [0, 60, 0, 0],
                          "clock_rel": [1.0, 0.75, 1.0, 1.0]})
    fig = straggler_heatmap(cells, pd.DataFrame([episode("a", T0, 1, 0.27)]))
    heat = fig.data[0]
    assert list(heat.y) == ["a", "b"] and heat.z[0][0] == 0.75 and heat.z[1][0] == 1.0
    (box,) = fig.layout.shapes
    assert (box.y0, box.y1) == (-0.5, 0.5)  # the row of node a
    empty = straggler_heatmap(cells.iloc[:0], None)
    assert "No telemetry" in empty.layout.annotations[0].text


@given(st.floats(min_value=0, max_value=3 * 86400, allow_nan=False))
def test_the_heat_maps_buckets_are_the_narrowest_within_its_columns(span_s):
    """At most HEATMAP_COLUMNS buckets over any window (widths floored to the minute gave
    up to twice as many), whole minutes, and beyond 5 minutes whole 5-minute blocks (the
    ones gpu_nodes_5m serves): the narrowest such width."""
    from warehouse.queries import stragglers as sq

    width = sq.heatmap_bucket_s(span_s)
    step = 60 if width <= 300 else 300
    assert width >= 60 and width % step == 0
    assert max(span_s, 60) <= width * sq.HEATMAP_COLUMNS
    assert width == 60 or (width - step) * sq.HEATMAP_COLUMNS < span_s


def test_the_heat_maps_bucket_for_some_windows():
    from warehouse.queries import stragglers as sq

    h = 3600
    assert [sq.heatmap_bucket_s(s) for s in (0, 4 * h, 8 * h, 20 * h, 22 * h, 48 * h)] == [
        60, 60, 120, 300, 600, 900]


def test_the_heat_map_leaves_out_buckets_without_a_clock_and_keeps_nodes_without_one():
    """The cells placed on one grid (issue 17): a bucket with no clock on any node is left
    out (as pivot_table left it), a node without a clock keeps its row, and a missing cell
    is a gap; the throttled seconds follow the clock's grid; a cell given twice is refused
    (as the pivot refused it)."""
    from dashboard.figures.job import straggler_heatmap

    nan = float("nan")
    cells = pd.DataFrame({"ts": [T0, T0, T0 + MIN, T0 + MIN, T0 + 2 * MIN, T0 + 2 * MIN],
                          "node": ["a", "c", "a", "c", "a", "b"],
                          "clock_rel": [0.8, nan, nan, nan, 1.0, nan],
                          "throttle_s": [10.0, 0.0, 20.0, 30.0, 0.0, 5.0]})
    heat = straggler_heatmap(cells, None).data[0]
    assert list(heat.x) == [T0, T0 + 2 * MIN] and list(heat.y) == ["a", "b", "c"]
    assert [[None if v != v else v for v in row] for row in heat.z] == [
        [0.8, 1.0], [None, None], [None, None]]
    assert [[None if v != v else v for v in row] for row in heat.customdata] == [
        [10.0, 0.0], [None, 5.0], [0.0, None]]
    with pytest.raises(ValueError, match="twice"):
        straggler_heatmap(pd.concat([cells, cells.iloc[:1]]), None)


def test_the_weekly_report_shows_the_goodput_pages_straggler_cost(report, report_wh):
    from warehouse.queries import stragglers as sq

    slow = sq.lost_total(report_wh.reader(), start=report.start, end=report.end)
    assert slow["episodes"] >= 1  # the simulated days hold stragglers
    assert report.value("reliability.slow_gpu_hours_lost") == pytest.approx(
        slow["gpu_hours_lost"])
    labels = [row["label"] for row in report.rows["reliability"]]
    assert "GPU-hours lost to slow members (stragglers)" in labels
    assert any("stragglers" in line and "episodes" in line for line in report.summary)



# --- the alert rule -----------------------------------------------------------------------------
def test_the_straggler_rule_fires_once_and_resolves_once_naming_job_size_node_and_cost(
        sim, sim_wh):
    from alerts.engine import evaluate
    from alerts.rules import DEFAULTS
    from alerts.window import Window
    from warehouse.queries import stragglers as sq

    rule = next(r for r in DEFAULTS if r.name == "straggler")
    truth = [s for s in sim.stragglers(LIVE + 100 * MIN) if s.start >= LIVE][0]
    state, sent = None, []
    for m in range(0, 100, 5):  # the analytics refresh every 5 minutes, evaluations between
        t = LIVE + m * MIN
        sim_wh.write(lambda con, t=t: refresh_stragglers(con, t)).result()
        for e in range(5):
            now = t + e * MIN
            win = Window(end=now, step_s=15.0, node=np.array([], object),
                         gpu_index=np.array([], int), rack=np.array([], object),
                         model=np.array([], object), series={"temp_c": np.zeros((0, 1))},
                         stragglers=sq.recent(sim_wh.reader(), now=now))
            res = evaluate([rule], win, now, state)
            state = res.state
            sent += [(now, n) for n in res.notifications]
    mine = [(now, n) for now, n in sent if truth.node in n.group or any(
        a.node == truth.node for a in n.alerts)]
    assert [n.kind for _, n in mine] == ["firing", "resolved"]
    (fired_at, fired), (resolved_at, _) = mine
    # fires when the straggler has lasted 15 minutes (the table lags by up to 5 minutes)
    assert timedelta(minutes=15) <= fired_at - truth.start <= timedelta(minutes=21)
    # resolves within open_s (10 min) and a refresh after its end
    assert timedelta(0) < resolved_at - truth.end <= timedelta(minutes=17)
    alert = next(a for a in fired.alerts if a.node == truth.node)
    assert alert.context["job_id"] == truth.job_id and alert.context["job_gpus"] >= 64
    assert alert.context["gpu_hours_per_hour"] == pytest.approx(
        alert.context["job_gpus"] * truth.magnitude, rel=0.15)


def test_a_refresh_extends_an_open_episode_as_one_pass_would_have_found_it():
    p = Params(min_lag=0.05, z=3.5, hold_min=5, gap_min=2)
    # node b's GPU 3 lags 25 % for minutes 0-5 and 20 % for minutes 6-9
    rows = [minute_rows(T0 + m * MIN, [1980.0] * 7 + [1485.0 if m < 6 else 1584.0],
                        job_gpus=64) for m in range(10)]
    flagged = flag_minutes(pd.concat(rows, ignore_index=True), p)
    whole = episodes(flagged, p).iloc[0]
    first = episodes(flagged[flagged.ts < T0 + 6 * MIN], p)
    # the next refresh reads from minute 3 on (hold + gap before the last end)
    later = episodes(flagged[flagged.ts >= T0 + 3 * MIN], p, seeds=first).iloc[0]
    assert (later.start_ts, later.end_ts, later.minutes) == (T0, T0 + 10 * MIN, 10)
    # 64 x (6 min x 0.25 + 4 min x 0.20) / 60 = 2.453 GPU-hours; mean lag 0.23
    assert later.gpu_hours_lost == pytest.approx(64 * (6 * 0.25 + 4 * 0.20) / 60)
    for col in ("gpu_hours_lost", "slowdown_frac", "clock_mhz", "thermal_s"):
        assert later[col] == pytest.approx(whole[col])
    assert later.slowdown_frac == pytest.approx(0.23)


def test_a_minute_covered_by_any_earlier_episode_of_a_member_is_charged_only_the_rest():
    """Node a lagged 10 % in two episodes found before, minutes 10-15 and 20-25; a read
    from minute 12 finds node b 30 % slow in minutes 12-17. Minutes 12-15 were charged
    a's lag in the first of a's episodes (not its last), so b adds 0.3 - 0.1 there and
    the whole 0.3 in minutes 16-17: 8 x (4 x 0.2 + 2 x 0.3) / 60 GPU-hours."""
    p = Params(min_lag=0.05, z=3.5, hold_min=5, gap_min=2)
    rows = []
    for m in range(12, 26):
        clocks = [1980.0] * 8
        if 12 <= m <= 15 or 20 <= m <= 25:
            clocks[0] = 1782.0
        if m <= 17:
            clocks[7] = 1386.0
        rows.append(minute_rows(T0 + m * MIN, clocks, job_gpus=8))
    seeds = pd.DataFrame([episode("a", T0 + 10 * MIN, 6, 8 * 6 * 0.1 / 60),
                          episode("a", T0 + 20 * MIN, 6, 8 * 6 * 0.1 / 60)])
    e = episodes(flag_minutes(pd.concat(rows, ignore_index=True), p), p, seeds)
    assert list(zip(e.node, e.start_ts, e.minutes, strict=True)) == [("b", T0 + 12 * MIN, 6)]
    assert e.gpu_hours_lost.iloc[0] == pytest.approx(8 * (4 * 0.2 + 2 * 0.3) / 60)


# the former 6 hours; slices cutting episodes; slices shorter than hold_min (every piece
# before a boundary would be noise to its slice: a second reader's case)
@pytest.mark.parametrize("slice_min", [360, 7, 3])
def test_the_refresh_finds_the_same_episodes_whatever_its_slices(sim, sim_wh, monkeypatch,
                                                                  slice_min):
    """A first refresh reads the minutes in slices of stragglers.SLICE (1 hour since issue
    17 held its memory down), one read each: the table of 6-hour slices, and of 7-minute
    slices that cut through every episode, or of 3-minute slices, each shorter than an
    episode must be, is the table of 1-hour slices."""
    from warehouse import stragglers

    now = LIVE + 40 * MIN
    sim_wh.write(lambda con: refresh_stragglers(con, now)).result()
    want = sim_wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    forget_stragglers(sim_wh)
    monkeypatch.setattr(stragglers, "SLICE", slice_min * MIN)
    reads = []
    monkeypatch.setattr(stragglers, "streamed_frame",
                        lambda *a: reads.append(a) or stragglers_frame(*a))
    sim_wh.write(lambda con: refresh_stragglers(con, now)).result()
    span = timedelta(days=stragglers.FIRST_DAYS) + (Params().hold_min + 2) * MIN
    assert len(reads) == -(-span // (slice_min * MIN))  # one read per slice
    got = sim_wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    assert len(want) >= 1
    pd.testing.assert_frame_equal(got, want)


def test_a_run_is_multi_node_by_all_its_allocations_whatever_the_slice(wh, monkeypatch):
    """A run of 4 GPUs on n0 for two hours that held a GPU of n1 for its first 20 minutes
    is a run of two nodes in every read (its ``job_gpus`` 5): at 24,576 GPUs, counting
    only the allocations in the range read made such a run multi-node in an hour's read
    and not in a shorter one, and 20 of 9,927 episodes went with the slices (issue 17)."""
    from warehouse import stragglers

    start = T0 - timedelta(hours=2)
    rows = [("n0", g, start, start + timedelta(hours=2)) for g in range(4)]
    rows.append(("n1", 0, start, start + 20 * MIN))
    slow = [start + (30 + i) * MIN for i in range(6)]  # n0's GPU 3, minutes 30-35
    store_run(wh, "9", rows, {("n0", 3): {ts: 1400.0 for ts in slow}})

    found = {}
    for slice_min in (60, 7):
        monkeypatch.setattr(stragglers, "SLICE", slice_min * MIN)
        forget_stragglers(wh)
        wh.write(lambda con: refresh_stragglers(con, T0)).result()
        found[slice_min] = wh.reader().execute(
            "SELECT node, start_ts, minutes, job_gpus FROM stragglers").fetchall()
    assert found[60] == found[7] == [("n0", slow[0], 6, 5)]


@pytest.mark.parametrize("slice_min", [60, 7, 3])
def test_a_minute_read_again_costs_the_run_what_one_read_finds(wh, monkeypatch, slice_min):
    """Node n0's GPU 3 lags 10 % for minutes 30-69 of a two-hour run of 8 GPUs, n1's GPU 0
    30 % for minutes 50-60. Read at once, minutes 50-60 cost the slower n1's lag and the
    rest n0's: 8 x (29 x 0.1 + 11 x 0.3) / 60 = 0.827 GPU-hours. Read in slices, a slice
    ending a few minutes into n1's lag (1-hour and 3-minute slices end at minute 53)
    charged those minutes to n0 (n1's lag was noise to it), and the next slice, n1's
    episode now, charged them again in full (issue 17: +4 % at 24,576 GPUs in 20-minute
    slices). Whatever the slices, the run loses the same; which member a minute is
    charged to may differ (docs/analytics.md)."""
    from warehouse import stragglers

    start = T0 - timedelta(hours=2)
    end = start + timedelta(hours=2)
    gpus = [(n, g, start, end) for n in ("n0", "n1") for g in range(4)]
    store_run(wh, "9", gpus, {
        ("n0", 3): {start + m * MIN: 1782.0 for m in range(30, 70)},
        ("n1", 0): {start + m * MIN: 1386.0 for m in range(50, 61)}})

    def found(slice_min):
        monkeypatch.setattr(stragglers, "SLICE", slice_min * MIN)
        forget_stragglers(wh)
        wh.write(lambda con: refresh_stragglers(con, T0)).result()
        return wh.reader().execute(
            "SELECT node, start_ts, minutes, gpu_hours_lost FROM stragglers "
            "ORDER BY node").df()

    whole, sliced = found(60 * 24 * 10), found(slice_min)
    assert whole.gpu_hours_lost.sum() == pytest.approx(8 * (29 * 0.1 + 11 * 0.3) / 60)
    assert list(whole.node) == ["n0", "n1"]
    assert whole.gpu_hours_lost.tolist() == pytest.approx([8 * 29 * 0.1 / 60,
                                                           8 * 11 * 0.3 / 60])
    pd.testing.assert_frame_equal(sliced.drop(columns="gpu_hours_lost"),
                                  whole.drop(columns="gpu_hours_lost"))
    assert sliced.gpu_hours_lost.sum() == pytest.approx(whole.gpu_hours_lost.sum())


def test_a_first_refresh_commits_each_slice_and_lets_live_work_in_between(wh, monkeypatch):
    """Each slice of a refresh is its own transaction that moves the ledger to its end,
    then live collection's urgent work runs (a first refresh over a week at 24,576 GPUs
    took ~3 minutes in one transaction, all of it a live batch's wait). A refresh that
    fails in its 50th slice keeps the 49 before; the next one goes on from there and the
    table is the one an uninterrupted refresh writes."""
    from warehouse import meta, stragglers

    start = T0 - timedelta(hours=2)
    gpus = [(n, g, start, start + timedelta(hours=2)) for n in ("n0", "n1") for g in range(4)]
    store_run(wh, "9", gpus, {("n0", 3): {start + m * MIN: 1782.0 for m in range(30, 70)}})
    monkeypatch.setattr(stragglers, "SLICE", 60 * MIN)
    wh.write(lambda con: refresh_stragglers(con, T0)).result()
    want = wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    assert len(want) == 1
    forget_stragglers(wh)

    ledger = []
    monkeypatch.setattr(stragglers, "yield_to_urgent", lambda: ledger.append(
        meta.get(wh.reader(), stragglers.LEDGER_KEY)))  # what a reader sees: committed
    reads = []

    def read(*a):
        reads.append(a)
        if len(reads) == 50:
            raise RuntimeError("the 50th slice fails")
        return stragglers_frame(*a)

    monkeypatch.setattr(stragglers, "streamed_frame", read)
    with pytest.raises(RuntimeError, match="50th"):
        wh.write(lambda con: refresh_stragglers(con, T0)).result()
    first = T0 - timedelta(days=stragglers.FIRST_DAYS) - 7 * MIN
    assert ledger == [(first + k * 60 * MIN).isoformat() for k in range(1, 50)]
    resumed = datetime.fromisoformat(meta.get(wh.reader(), stragglers.LEDGER_KEY))
    assert resumed == first + 49 * 60 * MIN
    wh.write(lambda con: refresh_stragglers(con, T0)).result()
    # from hold + gap minutes before the ledger, in hours: 143 h 14 min
    assert len(reads) == 50 + -(-(T0 - resumed + 7 * MIN) // (60 * MIN)) == 50 + 144
    assert ledger[-1] == T0.isoformat()
    got = wh.reader().execute("SELECT * FROM stragglers ORDER BY ALL").df()
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize(("gpus", "minutes"), [(0, 60), (512, 60), (8_333, 60),
                                               (24_576, 20), (100_000, 5),
                                               (10_000_000, 1)])
def test_a_larger_fleet_reads_its_minutes_in_shorter_slices(gpus, minutes):
    """stragglers.SLICE_GPU_MINUTES (500,000) over the GPUs that report, at most SLICE (an
    hour) and at least a minute: an hour's frame and its flagging took ~640 MiB at 24,576
    GPUs (issue 17)."""
    import duckdb

    from warehouse.stragglers import slice_length

    con = duckdb.connect()
    con.execute("CREATE TABLE gpu_latest AS SELECT range AS gpu FROM range(?)", [gpus])
    assert slice_length(con) == minutes * MIN


def test_the_heat_maps_outlines_are_those_plotly_adds_one_by_one():
    """The outlines are set as plain dicts in one layout update (issue 17: add_shape and
    add_annotation per episode took 19 s for a 1,024-node job with 200 episodes): the
    figure validates to itself and its outlines are those add_shape and add_annotation
    gave."""
    import plotly.graph_objects as go

    from dashboard.figures.base import INK
    from dashboard.figures.job import straggler_heatmap

    cells = pd.DataFrame({"ts": [T0, T0, T0, T0 + MIN, T0 + MIN, T0 + MIN],
                          "node": ["b", "a", "c"] * 2, "clock_mhz": 1980.0,
                          "power_w": 600.0, "throttle_s": 0.0, "clock_rel": 1.0})
    eps = pd.DataFrame([episode("c", T0, 1, 0.2), episode("x", T0, 1, 0.2),
                        episode("a", T0 + MIN, 1, 0.3)])
    fig = straggler_heatmap(cells, eps)
    assert go.Figure(fig.to_dict()).to_plotly_json() == fig.to_plotly_json()
    ref = go.Figure(fig.to_dict())
    ref.layout.shapes, ref.layout.annotations = [], []
    for node, y in (("c", 2), ("a", 0)):  # x has no row
        rec = eps[eps["node"] == node].iloc[0]
        ref.add_shape(type="rect", x0=rec["start_ts"], x1=rec["end_ts"], y0=y - 0.5,
                      y1=y + 0.5, line={"color": INK, "width": 2}, fillcolor="rgba(0,0,0,0)")
        ref.add_annotation(x=rec["start_ts"], y=y, text="straggler", showarrow=True,
                           arrowhead=2, ax=-40, ay=0, font={"size": 11})
    assert ref.to_plotly_json() == go.Figure(fig.to_dict()).to_plotly_json()
    for none in (eps.iloc[:0], eps[eps["node"] == "x"]):  # no outline: none set, as before
        fig = straggler_heatmap(cells, none)
        assert fig.to_plotly_json() == go.Figure(fig.to_dict()).to_plotly_json()
        assert "shapes" not in fig.to_plotly_json()["layout"]

"""Overview queries against a small hand-built warehouse; every number is worked by hand.

The seeded cluster (``seed_overview``), at NOW = Wednesday 2026-11-18 12:00 UTC:

- racks r01 (zone A, tile 0,0), r02 (zone A, tile 1,0), r03 (zone B, tile 0,1, empty);
  nodes n1 (r01) and n2 (r02), two GPUs each: 4 GPUs.
- latest samples (stale after 120 s): n1/0 70 °C 80 % 400 W (its older row at -90 s is
  superseded), n1/1 65 °C 40 % 200 W, n2/0 55 °C 100 % 500 W (a row at +10 s is in the
  future and ignored); n2/1's only row is 300 s old: stale, not reporting.
- allocated now: n1/0, n1/1 (job A run 1), n2/1 (job B); n2/0's job C ended 5 min ago,
  job D starts in an hour.
- failed runs this week (ISO week from Monday 2026-11-16 00:00), classified by the
  analytics refresh with the default settings (2-h checkpoint interval, no warm-up); no
  job records checkpoints, so each loses half an interval of work, at most its run:
  A/0 FAILED 3 h on 2 GPUs, next run 0.5 h later     -> 2 x min(3, 1) = 2
  E/0 NODE_FAIL 0.5 h on 8 GPUs, next run 1 h later  -> 8 x min(0.5, 1) = 4
  F/0 TIMEOUT 6 h on 4 GPUs, never requeued          -> 4 x min(6, 1) = 4
  I/0 OUT_OF_MEMORY 0.25 h, GPUs from the job row (1) -> 1 x 0.25 = 0.25
  total 10.25 (queue waits are not lost work); G/0 (failed last week), H/0 (completed),
  K/0 (ends at NOW) do not count.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from tests.support.dash_seed import NOW, seed_overview
from warehouse import Warehouse
from warehouse.analytics import Options, refresh
from warehouse.queries import goodput, overview

WEEK = datetime(2026, 11, 16)


@pytest.fixture
def wh():
    with Warehouse(":memory:") as warehouse:
        seed_overview(warehouse)
        yield warehouse


def test_iso_week_start_is_monday_midnight():
    assert overview.iso_week_start(NOW) == WEEK
    assert overview.iso_week_start(datetime(2026, 11, 16, 0, 0)) == WEEK
    assert overview.iso_week_start(datetime(2026, 11, 22, 23, 59)) == WEEK


def test_headline_numbers(wh):
    h = overview.headline(wh.reader(), now=NOW, week_start=WEEK)
    assert h["gpus"] == 4
    assert h["gpus_reporting"] == 3  # n2/1 is stale
    assert h["allocated_gpus"] == 3
    assert h["allocated_share_pct"] == pytest.approx(75.0)
    assert h["mean_util_allocated_pct"] == pytest.approx(60.0)  # n1/0 80, n1/1 40
    assert h["power_kw"] == pytest.approx(1.1)  # 400 + 200 + 500 W
    assert h["latest_sample_ts"] == NOW - timedelta(seconds=10)
    assert h["gpu_hours_lost_week"] == pytest.approx(10.25)
    assert h["failed_runs_week"] == 4


def test_lost_gpu_hours_follow_the_goodput_settings(wh):
    """The Overview card reads the classified failures, so it moves with the settings."""
    lost = {r.job_id: r.gpu_hours_lost for r in wh.reader().execute(
        "SELECT job_id, gpu_hours_lost FROM failures").df().itertuples()}
    assert lost == pytest.approx({"A": 2.0, "E": 4.0, "F": 4.0, "G": 2.0, "I": 0.25,
                                  "K": 2.0})
    # a shorter checkpoint interval loses less work, a warm-up adds to restarted runs
    opts = Options(checkpoint_interval_h=0.5, restart_warmup_min=30)
    wh.write(lambda con: refresh(con, NOW, opts)).result()
    h = overview.headline(wh.reader(), now=NOW, week_start=WEEK)
    assert h["gpu_hours_lost_week"] == pytest.approx(
        2 * (0.25 + 0.5) + 8 * (0.25 + 0.5) + 4 * 0.25 + 0.25)
    assert h["gpu_hours_lost_week"] == pytest.approx(
        goodput.lost_total(wh.reader(), start=WEEK, end=NOW)["gpu_hours_lost"])


def test_headline_of_an_empty_warehouse():
    with Warehouse(":memory:") as empty:
        h = overview.headline(empty.reader(), now=NOW, week_start=WEEK)
    assert h["gpus"] == 0 and h["gpus_reporting"] == 0 and h["allocated_gpus"] == 0
    assert h["allocated_share_pct"] is None
    assert h["mean_util_allocated_pct"] is None
    assert h["power_kw"] is None
    assert h["gpu_hours_lost_week"] == 0.0


def test_stale_window_is_a_parameter(wh):
    h = overview.headline(wh.reader(), now=NOW, week_start=WEEK, stale_after_s=20)
    assert h["gpus_reporting"] == 2  # n1/0's row at -30 s is now stale too
    assert h["power_kw"] == pytest.approx(0.7)


def test_rack_floor(wh):
    df = overview.rack_floor(wh.reader(), now=NOW).set_index("rack")
    assert list(df.index) == ["r01", "r02", "r03"]
    r01, r02, r03 = df.loc["r01"], df.loc["r02"], df.loc["r03"]
    assert (r01["x"], r01["y"], r01["zone"]) == (0.0, 0.0, "A")
    assert r01["gpus"] == 2 and r01["gpus_reporting"] == 2
    assert r01["hottest_temp_c"] == pytest.approx(70.0)
    assert (r01["hottest_node"], r01["hottest_gpu_index"]) == ("n1", 0)
    assert r01["mean_util_pct"] == pytest.approx(60.0)
    assert r01["power_kw"] == pytest.approx(0.6)
    # the stale 90 °C row of n2/1 and the future 99 °C row of n2/0 are excluded
    assert r02["hottest_temp_c"] == pytest.approx(55.0)
    assert (r02["hottest_node"], r02["hottest_gpu_index"]) == ("n2", 0)
    assert r02["gpus"] == 2 and r02["gpus_reporting"] == 1
    assert r02["power_kw"] == pytest.approx(0.5)
    assert r03["gpus"] == 0 and r03["gpus_reporting"] == 0
    assert pd.isna(r03["hottest_temp_c"]) and pd.isna(r03["power_kw"])


def test_rack_floor_with_no_fresh_samples(wh):
    df = overview.rack_floor(wh.reader(), now=NOW + timedelta(hours=1))
    assert len(df) == 3
    assert df["hottest_temp_c"].isna().all()
    assert (df["gpus_reporting"] == 0).all()

"""Carbon of goodput (issue 21): gCO2e per productive GPU-hour on a warehouse whose answer
is worked out by hand, per job, user and cluster; the Energy page and the weekly report
show the same numbers."""

import sys
from datetime import datetime

import pandas as pd
import pytest

from tests.support.runs import H, M, T, add_job, ingest, run_refresh, samples
from warehouse.analytics import Options
from warehouse.queries import goodput_carbon as gc

OPTS = Options(node_overhead_w=0.0, pue=1.0, region="ZZ", fallback_g_per_kwh=500.0)
END = T + 4 * H


@pytest.fixture
def seeded(wh):
    """Four hours on node n0 at 500 g/kWh, PUE 1, no node overhead:
    - GPU 0 at 400 W, job A of alice: run 0 fails after 2 h (no checkpoint is recorded
      anywhere: half the 2-h checkpoint interval, 1 GPU-hour, is lost), run 1 completes;
    - GPU 1 at 400 W, job B of bob, completes;
    - GPU 2 at 100 W, never allocated (the cluster's idle GPU).
    Each of A and B: 4 GPU-hours x 0.4 kW = 1.6 kWh = 800 g CO2e."""
    ingest(wh, samples("n0", 0, T, 960, 400), samples("n0", 1, T, 960, 400),
           samples("n0", 2, T, 960, 100))
    add_job(wh, "A", [{"start": T, "end": T + 2 * H, "state": "FAILED", "nodes": ["n0"],
                       "gpu_indices": [0], "reason": "KeyError: 'x'"},
                      {"start": T + 2 * H, "end": END, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1, user="alice")
    add_job(wh, "B", [{"start": T, "end": END, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [1]}], gpus=1, user="bob")
    run_refresh(wh, now=END + H)
    return wh


def test_per_job_and_user(seeded):
    jobs = gc.carbon_per_productive_gpu_hour(seeded.reader(), start=T, end=END,
                                             opts=OPTS).set_index("job_id")
    a, b = jobs.loc["A"], jobs.loc["B"]
    assert a["user_name"] == "alice"
    assert a["gpu_hours"] == pytest.approx(4.0) and a["gpu_hours_lost"] == pytest.approx(1.0)
    assert a["productive_gpu_hours"] == pytest.approx(3.0)
    assert a["carbon_kg"] == pytest.approx(0.8)
    assert a["g_per_productive_gpu_h"] == pytest.approx(800 / 3)  # the failure's carbon too
    assert b["g_per_productive_gpu_h"] == pytest.approx(200.0)  # 800 g / 4 GPU-hours
    users = gc.carbon_per_productive_gpu_hour(seeded.reader(), start=T, end=END,
                                              by="user_name", opts=OPTS).set_index("user_name")
    assert users.loc["alice", "g_per_productive_gpu_h"] == pytest.approx(800 / 3)
    assert users.loc["bob", "g_per_productive_gpu_h"] == pytest.approx(200.0)


def test_cluster_counts_every_gpu_hour(seeded):
    c = gc.cluster_carbon_per_productive_gpu_hour(seeded.reader(), start=T, end=END,
                                                  opts=OPTS)
    # 4 h x (0.4 + 0.4 + 0.1) kW = 3.6 kWh = 1,800 g over 8 held - 1 lost GPU-hours
    assert c["carbon_kg"] == pytest.approx(1.8)
    assert c["productive_gpu_hours"] == pytest.approx(7.0)
    assert c["g_per_productive_gpu_h"] == pytest.approx(1800 / 7)


def test_no_kept_work_is_no_number(wh):
    ingest(wh, samples("n0", 0, T, 480, 400))
    add_job(wh, "F", [{"start": T, "end": T + 2 * H, "state": "FAILED", "nodes": ["n0"],
                       "gpu_indices": [0], "reason": "KeyError: 'x'"}], gpus=1)
    wh.ingest("checkpoints", pd.DataFrame(
        [{"ts": T - H, "job_id": "other", "run_index": 0}])).result()
    run_refresh(wh, now=T + 3 * H)
    df = gc.carbon_per_productive_gpu_hour(wh.reader(), start=T, end=T + 3 * H, opts=OPTS)
    # the job never checkpoints: its whole run is lost
    assert df["gpu_hours_lost"].iloc[0] == pytest.approx(2.0)
    assert df["productive_gpu_hours"].iloc[0] == 0.0
    assert df["g_per_productive_gpu_h"].isna().all()
    with pytest.raises(ValueError, match="by must be one of"):
        gc.carbon_per_productive_gpu_hour(wh.reader(), start=T, end=T + H, by="rack")


def test_energy_page_and_weekly_report_show_the_same_figure(seeded):
    from dashboard import context
    from dashboard.app import create_app
    from warehouse.queries import weekly

    now = datetime(2026, 11, 9)
    create_app(seeded, refresh_s=5, now=lambda: now, options=OPTS)
    context.set_context(seeded, lambda: now, refresh_s=5, options=OPTS)
    page = sys.modules["dashboard.pages.energy"]
    cluster, users = page.goodput_carbon_frame({"week": "2026-W45"}, "user_name")
    assert cluster["g_per_productive_gpu_h"] == pytest.approx(1800 / 7)
    shown = users.set_index("user_name")["g_per_productive_gpu_h"].to_dict()
    assert shown == pytest.approx({"alice": 800 / 3, "bob": 200.0})
    html = str(page.update_goodput_carbon({"week": "2026-W45"}, "job_id"))
    assert "257 g CO₂e" in html  # the cluster's card
    assert "'g_per_productive_gpu_h': 267" in html and "(/jobs/A)" in html  # job A's row
    week = weekly.week_numbers(seeded.reader, start=T, end=T + 7 * 24 * H,
                               now=T + 7 * 24 * H, opts=OPTS)
    e = week["energy"]
    assert e["g_per_productive_gpu_h"] == pytest.approx(1800 / 7)
    top = e["goodput_carbon_users"].set_index("user_name")["g_per_productive_gpu_h"]
    assert top.to_dict() == pytest.approx({"alice": 800 / 3, "bob": 200.0})


@pytest.mark.parametrize("by", ["job_id", "user_name"])
def test_the_sums_per_group_in_sql_are_those_of_every_run(by):
    """The Energy page sums the runs per job or user in SQL (issue 17); the weekly report
    groups the runs' frame it already has: the same rows, in the same order (carbon,
    then the group: ties between jobs of the same energy, a job without a row)."""
    from tests.support.dash_seed import NOW, seed_dashboard
    from warehouse import Warehouse
    from warehouse.queries import energy as qe

    with Warehouse(":memory:") as w:
        seed_dashboard(w)
        add_job(w, "T1", [{"start": NOW - 3 * H, "end": NOW - 2 * H, "state": "COMPLETED",
                           "nodes": ["n08"], "gpu_indices": [1]}], gpus=1, user="tie")
        add_job(w, "T2", [{"start": NOW - 3 * H, "end": NOW - 2 * H, "state": "COMPLETED",
                           "nodes": ["n08"], "gpu_indices": [2]}], gpus=1, user="tie")
        w.ingest("runs", pd.DataFrame([{"job_id": "nojob", "run_index": 0, "gpus": 1,
                                        "start_ts": NOW - 3 * H, "end_ts": NOW - H}])).result()
        w.ingest("allocations", pd.DataFrame([{
            "job_id": "nojob", "run_index": 0, "node": "n08", "gpu_index": 3,
            "start_ts": NOW - 3 * H, "end_ts": NOW - H}])).result()
        run_refresh(w, now=NOW)
        cur = w.reader()
        window = {"start": NOW - 30 * H, "end": NOW - 20 * M}
        runs = qe.run_energy(cur, opts=OPTS, **window)
        got = gc.carbon_per_productive_gpu_hour(cur, by=by, opts=OPTS, **window)
        want = gc.carbon_per_productive_gpu_hour(cur, by=by, opts=OPTS, **window,
                                                 sums=qe.sum_runs(cur, runs, by=by))
        assert len(got) > 3 and got[by].isna().sum() == (by == "user_name")
        pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-9)
        held = gc.cluster_carbon_per_productive_gpu_hour(
            cur, opts=OPTS, held_gpu_hours=float(got["gpu_hours"].sum()), **window)
        assert held == pytest.approx(gc.cluster_carbon_per_productive_gpu_hour(
            cur, opts=OPTS, runs=runs, **window))

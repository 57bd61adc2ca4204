"""Dashboard queries (utilisation, topology, thermal, jobs, reports) on the seeded cluster.

``seed_dashboard`` (tests/support/dash_seed.py): 4 racks x 2 nodes x 4 GPUs, 48 h of
1-minute telemetry, jobs 1001-1008. Numbers below follow from its job table.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.dash_seed import NOW, XSS_NAME, seed_dashboard
from warehouse import Warehouse
from warehouse.queries import energy as qe
from warehouse.queries import jobs, reports, thermal, topology, utilisation

H = timedelta(hours=1)


@pytest.fixture(scope="module")
def cur():
    with Warehouse(":memory:") as wh:
        seed_dashboard(wh)
        yield wh.reader()


def test_tier_and_bucket_follow_the_range():
    assert utilisation.tier(NOW - 24 * H, NOW) == "gpu_samples_1m"
    assert utilisation.tier(NOW - 7 * 24 * H, NOW) == "gpu_samples_1h"
    assert utilisation.bucket_s(NOW - H, NOW) == 60
    assert utilisation.bucket_s(NOW - 24 * H, NOW) == 900
    assert utilisation.bucket_s(NOW - 30 * 24 * H, NOW) == 6 * 3600


def test_allocated_vs_used_counts_the_running_jobs(cur):
    df = utilisation.allocated_vs_used(cur, start=NOW - H, end=NOW)
    last = df.iloc[-2]  # a whole minute: 1001 (16), 1002 (8), 1004 (2) hold 26 GPUs
    assert last["gpus_installed"] == 32
    assert last["allocated_gpus"] == pytest.approx(26)
    assert last["gpus_reporting"] == pytest.approx(32)
    # 16 GPUs near 88 %, 8 near 2 %, the rest idle: about 14 GPU-equivalents busy
    assert 13 < last["utilised_gpus"] < 15.5
    scoped = utilisation.allocated_vs_used(cur, start=NOW - H, end=NOW, rack="r03")
    assert scoped.iloc[-2]["gpus_installed"] == 8
    assert scoped.iloc[-2]["allocated_gpus"] == pytest.approx(8)  # job 1002


@pytest.mark.parametrize("tier_range", [6 * H, 7 * 24 * H])
def test_utilisation_by_user_on_both_tiers(cur, tier_range):
    df = utilisation.utilisation_by(cur, by="user", start=NOW - tier_range, end=NOW)
    by = df.set_index("group")
    assert by.loc["alice", "util_pct"] == pytest.approx(88, abs=2)  # job 1001
    assert by.loc["mallory", "util_pct"] < 5  # job 1004 sits idle
    with pytest.raises(ValueError, match="expected one of"):
        utilisation.utilisation_by(cur, by="name; DROP TABLE jobs", start=NOW - H, end=NOW)


def test_job_utilisation_and_idle_now(cur):
    per_job = utilisation.job_utilisation(cur, start=NOW - 6 * H, end=NOW).set_index("job_id")
    assert per_job.loc["1002", "allocated_gpu_h"] == pytest.approx(48)  # 8 GPUs x 6 h
    idle = utilisation.idle_allocated_now(cur, now=NOW)
    assert set(idle["job_id"]) == {"1002", "1004"}
    assert len(idle) == 10 and XSS_NAME in set(idle["name"])


def test_topology_drill_down(cur):
    opts = topology.filter_options(cur)
    assert opts == {"partitions": ["eval", "train"], "racks": ["r01", "r02", "r03", "r04"]}
    assert topology.filter_options(cur, partition="eval")["racks"] == ["r04"]
    rack = topology.gpus_now(cur, now=NOW, rack="r04")
    assert list(rack["node"].unique()) == ["n07", "n08"] and len(rack) == 8
    n08 = rack[rack["node"] == "n08"].set_index("gpu_index")
    assert n08.loc[0, "job_id"] == "1004" and n08.loc[0, "name"] == XSS_NAME
    assert n08.loc[3, "job_id"] is None or n08["job_id"].isna()[3]  # idle GPU
    later = topology.gpus_now(cur, now=NOW + H, node="n08")
    assert later["temp_c"].isna().all()  # silent: no fresh sample, not zero


def test_thermal_queries(cur):
    temps = thermal.rack_temperatures(cur, start=NOW - 6 * H, end=NOW).set_index("rack")
    assert temps.loc["r01", "p50_c"] > temps.loc["r04", "p50_c"]
    assert (temps["p5_c"] <= temps["p95_c"]).all()
    thr = thermal.throttling(cur, start=NOW - 6 * H, end=NOW)
    assert thr["thermal_pct"].max() > 0  # busy GPUs of 1001 pass 80 °C
    ev = thermal.events(cur, start=NOW - 48 * H, end=NOW, kinds=["xid"])
    assert list(ev["code"]) == [31, 79]
    counts = thermal.event_counts(cur, start=NOW - 48 * H, end=NOW, rack="r01")
    assert list(zip(counts["kind"], counts["code"], strict=True)) == [("xid", 79)]
    ft = thermal.failure_temperatures(cur, start=NOW - 48 * H, end=NOW).set_index("job_id")
    assert ft.loc["1001", "hottest_c"] > 60 and ft["fleet_median_c"].notna().all()


def test_jobs_search_and_job_details(cur):
    found = jobs.search(cur, now=NOW, start=NOW - 24 * H, end=NOW, q="eval")
    assert list(found["job_id"]) == ["1008", "1007"]  # 1003 ended 28 h ago
    assert list(jobs.search(cur, now=NOW, start=NOW - H, end=NOW, q="1003")["job_id"]) == [
        "1003"]  # an exact id is found whatever its age
    assert list(jobs.search(cur, now=NOW, start=NOW - 48 * H, end=NOW, q="%")["job_id"]) == []
    assert list(jobs.search(cur, now=NOW, start=NOW - 48 * H, end=NOW, user="dave",
                            state="FAILED")["job_id"]) == ["1005"]
    runs = jobs.runs(cur, job_id="1001", now=NOW)
    assert list(runs["state"]) == ["NODE_FAIL", "RUNNING"]
    assert list(runs["hours"]) == pytest.approx([20.0, 19.5])
    tel = jobs.telemetry(cur, job_id="1001", now=NOW)
    assert tel["gpus"].max() == 16 and tel["util_mean_pct"].mean() > 80
    energy = jobs.energy(cur, job_id="1001", now=NOW)
    assert list(energy["run_index"]) == [0, 1] and (energy["carbon_kg"] > 0).all()
    # the Energy page's figures for the same runs
    page = qe.run_energy(cur, start=NOW - 48 * H, end=NOW, runs=[("1001", 0), ("1001", 1)])
    assert energy["facility_kwh"].sum() == pytest.approx(page["facility_kwh"].sum())
    assert jobs.failures(cur, job_id="1001")["category"].tolist() == ["infrastructure"]
    assert jobs.job(cur, job_id="nope") is None
    assert jobs.telemetry(cur, job_id="1006", now=NOW).empty  # pending: no GPU yet


def test_reports_archive_is_empty_until_the_generator_exists(cur, tmp_path):
    assert reports.list_reports(cur).empty
    assert reports.list_report_files(tmp_path / "absent").empty
    (tmp_path / "gpulens-2026-W47.html").write_text("<html></html>")
    (tmp_path / "notes.txt").write_text("ignored")
    files = reports.list_report_files(tmp_path)
    assert list(files["title"]) == ["gpulens-2026-W47"]
    assert str(files.loc[0, "week_start"].date()) == "2026-11-16"


def test_job_energy_stays_inside_the_span_floor():
    """A job older than MAX_JOB_SPAN is counted from the floor (now - 31 days, here mid-
    hour) on, not from the floor's hour: the whole-hour reading (issue 17) stops there."""
    import pandas as pd

    from tests.support.frames import T0, samples

    floor = T0 + 2 * H + timedelta(minutes=17)
    now = floor + jobs.MAX_JOB_SPAN
    with Warehouse(":memory:") as w:
        w.ingest("samples", samples(start=T0, ticks=4 * 60 * 4, gpus=1, power_w=300.0)).result()
        w.rollup().result()
        w.ingest("jobs", pd.DataFrame([{"job_id": "7", "submit_ts": T0}])).result()
        w.ingest("runs", pd.DataFrame([{"job_id": "7", "run_index": 0, "start_ts": T0 + H,
                                        "end_ts": T0 + 3 * H, "state": "COMPLETED"}])).result()
        w.ingest("allocations", pd.DataFrame([{"job_id": "7", "run_index": 0, "node": "node000",
                                               "gpu_index": 0, "start_ts": T0 + H,
                                               "end_ts": T0 + 3 * H}])).result()
        page = jobs.energy(w.reader(), job_id="7", now=now)
        assert page["gpu_hours"].sum() == pytest.approx((T0 + 3 * H - floor) / H)

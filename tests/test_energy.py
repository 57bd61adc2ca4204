"""Energy from the counter (resets, gaps, fallbacks), node overhead, jobs and idle GPUs."""

from datetime import timedelta

import pandas as pd
import pytest

from dashboard.figures.energy import node_energy_method
from tests.support.runs import STEP, H, T, add_job, ingest, run_refresh, samples
from warehouse import Retention
from warehouse.analytics import Options
from warehouse.queries import energy as qe


def gpu_energy(wh):
    return wh.reader().execute(
        "SELECT node, gpu_index, sum(energy_j) AS j, sum(counter_samples) AS c, "
        "count(*) AS hours FROM gpu_energy_1h GROUP BY ALL ORDER BY ALL").df()


def test_counter_deltas_with_reset_and_gap(wh):
    n = 480  # two hours
    # GPU 0: counter reset at sample 200; GPU 1: the counter runs at 300 W while the
    # reported power says 250 W (the counter wins); GPU 2: a 10-minute gap of samples
    g0 = samples("n0", 0, T, n, 400, resets={200})
    g1 = samples("n0", 1, T, n, 300).assign(power_w=250.0)
    g2 = samples("n0", 2, T, n, 200, drop=range(100, 140))
    ingest(wh, g0, g1, g2)
    run_refresh(wh, now=T + 3 * H)
    e = gpu_energy(wh).set_index("gpu_index")
    # per GPU: the first sample has no predecessor and falls back to power x interval
    assert e.loc[0, "j"] == pytest.approx(400 * STEP * n)  # reset step: power fallback
    assert e.loc[0, "c"] == n - 2
    assert e.loc[1, "j"] == pytest.approx(250 * STEP + 300 * STEP * (n - 1))
    # the 600 s gap is longer than max_counter_gap_s (300): the step after it uses
    # power x interval (15 s), so the unobserved 585 s are not counted
    assert e.loc[2, "j"] == pytest.approx(200 * STEP * (n - 40))
    assert (e["hours"] == 2).all()


def test_late_samples_recompute_their_hour_and_refresh_is_idempotent(wh):
    ingest(wh, samples("n0", 0, T, 240, 100))
    run_refresh(wh, now=T + 3 * H)
    first = gpu_energy(wh)["j"].sum()
    assert run_refresh(wh, now=T + 3 * H)["energy_hours"] == 0
    ingest(wh, samples("n0", 0, T + H, 240, 100))  # the next hour arrives late
    assert run_refresh(wh, now=T + 3 * H)["energy_hours"] == 1
    assert gpu_energy(wh)["j"].sum() == pytest.approx(2 * first)


def test_late_gpu_beyond_raw_retention_keeps_the_other_gpus_hours(wh):
    """GPU 0's raw rows are gone (retention); GPU 1's hour arrives late: its energy is
    added and GPU 0's, from the counter, stays (issue 17)."""
    ingest(wh, samples("n0", 0, T, 240, 100))
    run_refresh(wh, now=T + 3 * H)
    wh.apply_retention(T + 3 * H, Retention(raw_days=1 / 24, minute_days=90,
                                            hour_days=730)).result()
    ingest(wh, samples("n0", 1, T, 240, 300))
    run_refresh(wh, now=T + 3 * H)
    e = gpu_energy(wh).set_index("gpu_index")
    assert e.loc[0, "j"] == pytest.approx(100 * STEP * 240)
    assert e.loc[1, "j"] == pytest.approx(300 * STEP * 240)
    assert run_refresh(wh, now=T + 3 * H)["energy_hours"] == 0


def test_late_batch_beyond_raw_retention_keeps_each_gpus_other_hours(wh):
    """GPU 0's two hours are stored and their raw rows gone; one late batch re-delivers
    GPU 0's first minute with GPU 1's two new hours: GPU 0 keeps both hours' energy
    (its few raw rows do not stand for its whole hours), and the refresh then rests."""
    ingest(wh, samples("n0", 0, T, 480, 100))
    run_refresh(wh, now=T + 3 * H)
    wh.apply_retention(T + 3 * H, Retention(raw_days=1 / 24, minute_days=90,
                                            hour_days=730)).result()
    ingest(wh, samples("n0", 0, T, 4, 100), samples("n0", 1, T, 480, 300))
    run_refresh(wh, now=T + 3 * H)
    e = gpu_energy(wh).set_index("gpu_index")
    assert e.loc[0, "j"] == pytest.approx(100 * STEP * 480)
    assert e.loc[0, "hours"] == 2
    assert e.loc[1, "j"] == pytest.approx(300 * STEP * 480)
    assert run_refresh(wh, now=T + 3 * H)["energy_hours"] == 0


def test_power_integral_when_no_counter(wh):
    ingest(wh, samples("n1", 0, T, 240, 500, counter=False))
    run_refresh(wh, now=T + 2 * H)
    method = wh.reader().execute("SELECT DISTINCT method FROM gpu_energy_1h").fetchall()
    assert method == [("power",)]
    assert gpu_energy(wh)["j"].sum() == pytest.approx(500 * 3600)


def test_energy_by_rack_with_node_overhead_and_measured_power(wh):
    ingest(wh, samples("n0", 0, T, 240, 600), samples("n1", 0, T, 240, 300))
    wh.write(lambda con: con.execute(
        "INSERT INTO node_power (ts, node, other_power_w) VALUES (?, 'n1', 1000.0)",
        [T + timedelta(minutes=5)])).result()
    run_refresh(wh, now=T + 2 * H)
    opts = Options(node_overhead_w=1500.0, pue=1.3, fallback_g_per_kwh=400.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="rack", opts=opts).set_index("rack")
    assert df.loc["r0", "gpu_kwh"] == pytest.approx(0.6)
    assert df.loc["r0", "other_kwh"] == pytest.approx(1.5)  # configured overhead
    assert df.loc["r1", "other_kwh"] == pytest.approx(1.0)  # measured
    assert df.loc["r1", "facility_kwh"] == pytest.approx(1.3 * 1.3)
    assert df.loc["r0", "carbon_kg"] == pytest.approx(2.1 * 1.3 * 400 / 1000)
    fleet = qe.energy_by(wh.reader(), start=T, end=T + H, by="fleet", opts=opts)
    assert fleet["it_kwh"].iloc[0] == pytest.approx(0.6 + 1.5 + 0.3 + 1.0)


def test_node_energy_is_the_bmcs_where_it_measured_else_gpus_plus_overhead(wh):
    # n0: no BMC (overhead); n1: the BMC reads 2,520 W then 2,480 W (mean 2,500 W) with
    # one 600 W GPU; n2: the BMC reads less than the GPU draws (never a negative rest)
    ingest(wh, *(samples(n, 0, T, 240, 600) for n in ("n0", "n1", "n2")))
    bmc = pd.DataFrame({"ts": [T + timedelta(minutes=m) for m in (1, 31, 1)],
                        "node": ["n1", "n1", "n2"], "total_power_w": [2520.0, 2480.0, 400.0],
                        "source": "redfish"})
    wh.ingest("node_power", bmc).result()
    run_refresh(wh, now=T + 2 * H)
    opts = Options(node_overhead_w=1500.0, pue=1.0, fallback_g_per_kwh=400.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="node", opts=opts).set_index("node")
    assert df.loc["n0", "it_kwh"] == pytest.approx(0.6 + 1.5)  # GPU + configured overhead
    assert df.loc["n1", "it_kwh"] == pytest.approx(2.5)  # what the BMC measured
    assert df.loc["n1", "other_kwh"] == pytest.approx(2.5 - 0.6)
    assert df.loc["n2", "other_kwh"] == 0.0 and df.loc["n2", "it_kwh"] == pytest.approx(0.6)
    assert df["bmc_node_hours"].to_dict() == {"n0": 0, "n1": 1, "n2": 1}
    fleet = qe.energy_by(wh.reader(), start=T, end=T + H, by="fleet", opts=opts)
    assert (fleet["bmc_node_hours"].iloc[0], fleet["node_hours"].iloc[0]) == (2, 3)
    # the Energy page says which applied
    assert node_energy_method(fleet) == ("BMC power readings 67 %, GPUs + configured node "
                                         "overhead 33 % of node-hours")
    assert node_energy_method(df.loc[["n1"]]) == "node energy from the BMC power readings"
    assert node_energy_method(df.loc[["n0"]]).endswith("(no BMC readings)")


def test_node_energy_from_the_bmc_energy_counter_before_its_power(wh):
    # n1's BMC keeps a Redfish EnergykWh counter: readings every 10 min from 23:50 the day
    # before, 1,800 W between readings (0.3 kWh a step) while its power readings say
    # 9,000 W (a spike at each reading): the hour counts the counter, 1.8 kWh. A counter
    # reset at 0:30 (back to 0) costs that step only: the hour is the other 5 steps'
    # 1.5 kWh over 50 min, scaled to 60 min. n2: power readings only (2,000 W).
    ingest(wh, *(samples(n, 0, T, 480, 600) for n in ("n1", "n2")))
    steps = [T + timedelta(minutes=10 * k - 10) for k in range(8)]  # 23:50 .. 1:00
    kwh = [5000.0 + 0.3 * k for k in range(8)]
    counter = pd.DataFrame({"ts": steps, "node": "n1", "total_power_w": 9000.0,
                            "energy_j": [k * 3.6e6 for k in kwh], "source": "redfish"})
    power = pd.DataFrame({"ts": [T + timedelta(minutes=5)], "node": "n2",
                          "total_power_w": 2000.0, "source": "ipmi"})
    wh.ingest("node_power", pd.concat([counter, power], ignore_index=True)).result()
    run_refresh(wh, now=T + 3 * H)
    opts = Options(node_overhead_w=1500.0, pue=1.0, fallback_g_per_kwh=400.0)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="node", opts=opts).set_index("node")
    assert df.loc["n1", "it_kwh"] == pytest.approx(1.8)
    assert df.loc["n1", "other_kwh"] == pytest.approx(1.8 - 0.6)
    assert df.loc["n2", "it_kwh"] == pytest.approx(2.0)
    assert df["bmc_counter_node_hours"].to_dict() == {"n1": 1, "n2": 0}
    assert node_energy_method(df.loc[["n1"]]) == "node energy from the BMC energy counter"
    assert node_energy_method(df) == ("BMC energy counter 50 %, BMC power readings 50 % of "
                                      "node-hours")
    # the counter restarts at 0:30: that step is left out, the rest scaled to the hour
    wh.write(lambda con: con.execute(
        "UPDATE node_power SET energy_j = energy_j - 5001.2 * 3.6e6 "
        "WHERE node = 'n1' AND ts >= ?", [T + timedelta(minutes=30)])).result()
    # readings are facts (append-only): one changed in place is seen by the next refresh,
    # which recomputes the node-hours it keeps (warehouse/node_energy.py)
    run_refresh(wh, now=T + 3 * H)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="node", opts=opts).set_index("node")
    assert df.loc["n1", "it_kwh"] == pytest.approx(1.5 * 60 / 50)
    # a counter that did not move in the hour while the BMC read power (one counting
    # whole kWh) is too coarse: that hour takes the power readings
    wh.write(lambda con: con.execute(
        "UPDATE node_power SET energy_j = 5000 * 3.6e6 WHERE node = 'n1'")).result()
    run_refresh(wh, now=T + 3 * H)
    df = qe.energy_by(wh.reader(), start=T, end=T + H, by="node", opts=opts).set_index("node")
    assert df.loc["n1", "it_kwh"] == pytest.approx(9.0)
    assert df.loc["n1", "bmc_counter_node_hours"] == 0


def test_job_energy_follows_the_counter_not_the_power_readings(wh):
    # the counter runs at 300 W while the sampled power says 250 W (NVML's power is an
    # average over a short window; on a real H100 its integral read 5 % low); a counter
    # reset at sample 200 (0:50) costs only that step (power x interval)
    ingest(wh, samples("n0", 0, T, 480, 300, resets={200}).assign(power_w=250.0))
    add_job(wh, "C", [{"start": T + 0.5 * H, "end": T + 1.5 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1)
    opts = Options(node_overhead_w=0.0, pue=1.0, fallback_g_per_kwh=500.0)
    for res in ("minute", None):
        jobs = qe.job_energy(wh.reader(), start=T, end=T + 2 * H, opts=opts,
                             resolution=res).set_index("job_id")
        assert jobs.loc["C", "gpu_kwh"] == pytest.approx(0.3 - 15 * 50 / 3.6e6), res


def test_job_energy_follows_allocations(wh):
    # GPU 0 of n0 at 400 W for 2 h; job X holds it from 0:30 to 1:30, job Y (user bob)
    # holds GPU 1 (100 W) for the 2 hours.
    ingest(wh, samples("n0", 0, T, 480, 400), samples("n0", 1, T, 480, 100))
    add_job(wh, "X", [{"start": T + 0.5 * H, "end": T + 1.5 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1)
    add_job(wh, "Y", [{"start": T, "end": T + 2 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [1]}], gpus=1, user="bob")
    opts = Options(node_overhead_w=800.0, pue=1.0, fallback_g_per_kwh=500.0)
    jobs = qe.job_energy(wh.reader(), start=T, end=T + 3 * H, opts=opts).set_index("job_id")
    assert jobs.loc["X", "gpu_hours"] == pytest.approx(1.0)
    assert jobs.loc["X", "gpu_kwh"] == pytest.approx(0.4)
    assert jobs.loc["X", "it_kwh"] == pytest.approx(0.4 + 800 / 8 / 1000)
    assert jobs.loc["Y", "gpu_kwh"] == pytest.approx(0.2)
    assert jobs.loc["X", "carbon_kg"] == pytest.approx(0.5 * 500 / 1000)
    users = qe.job_energy(wh.reader(), start=T, end=T + 3 * H, by="user_name", opts=opts)
    assert set(users["user_name"]) == {"ann", "bob"}
    # clipped to the query range: only the first hour of Y
    part = qe.job_energy(wh.reader(), start=T, end=T + H, opts=opts).set_index("job_id")
    assert part.loc["Y", "gpu_kwh"] == pytest.approx(0.1)


def test_idle_energy_classes(wh):
    ingest(wh, samples("n0", 0, T, 240, 300, util=80.0),   # allocated, busy
           samples("n0", 1, T, 240, 70, util=0.0),          # allocated, idle
           samples("n0", 2, T, 240, 60, util=0.0))          # unallocated
    add_job(wh, "X", [{"start": T, "end": T + H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0, 1]}], gpus=2)
    df = qe.idle_energy(wh.reader(), start=T, end=T + H).set_index("state")
    assert df.loc["busy", "gpu_kwh"] == pytest.approx(0.3)
    assert df.loc["allocated_idle", "gpu_kwh"] == pytest.approx(0.07)
    assert df.loc["unallocated", "mean_power_w"] == pytest.approx(60.0)
    assert df["gpu_hours"].sum() == pytest.approx(3.0)

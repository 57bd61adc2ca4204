"""The Energy page's fast path: the 1-hour tier against the exact 1-minute tier.

Ranges over two days read ``gpu_samples_1h`` (warehouse/queries/energy.py). On a seeded
cluster whose tiers are rolled up from the same samples, the hour path must stay within
2 % of the minute path for energy and carbon per user and job and for the carbon of
failures, and within 5 % for each idle-energy class.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from warehouse import Warehouse
from warehouse.analytics import Options
from warehouse.queries import energy as qe

NOW = datetime(2026, 11, 18, 12, 0, 0)
DAYS = 4
H = timedelta(hours=1)
OPTS = Options(node_overhead_w=600.0, pue=1.2, fallback_g_per_kwh=400.0)


def seed(wh: Warehouse, seed: int = 3) -> None:
    """2 nodes x 4 GPUs, DAYS days of 1-minute samples rolled up; on each GPU jobs of 1-20 h
    one after another with 5-90 minute gaps, starting at any minute; a job in five stays
    idle; one in eight fails; an hourly carbon-intensity series."""
    rng = np.random.default_rng(seed)
    start = NOW - DAYS * 24 * H
    times = pd.date_range(start, NOW - timedelta(minutes=1), freq="60s")
    keys = [(f"n{i}", g) for i in range(2) for g in range(4)]
    jobs, runs, allocs, fails, frames = [], [], [], [], []
    for k, (node, g) in enumerate(keys):
        util = rng.uniform(0, 2, len(times))
        t = start + timedelta(minutes=int(rng.integers(0, 120)))
        while t < NOW - H:
            end = min(t + timedelta(minutes=int(rng.integers(60, 1200))), NOW)
            job = f"{k}-{len(jobs)}"
            idle = rng.random() < 0.2
            failed = not idle and rng.random() < 0.125
            jobs.append((job, f"job {job}", f"user{len(jobs) % 5}", 1))
            runs.append((job, 0, t, end, "FAILED" if failed else "COMPLETED", 1))
            allocs.append((job, 0, node, g, t, end))
            mask = (times >= t) & (times < end)
            util[mask] = rng.uniform(0, 3, mask.sum()) if idle else rng.uniform(40, 98, mask.sum())
            if failed:
                fails.append((job, 0, t, end, "infrastructure", "node failure", "state", 1.5))
            t = end + timedelta(minutes=int(rng.integers(5, 90)))
        frames.append(pd.DataFrame({"ts": times, "node": node, "gpu_index": g,
                                    "interval_s": 60.0, "util_pct": util,
                                    "power_w": 70 + 5.5 * util, "temp_c": 40.0}))
    batches = {
        "nodes": pd.DataFrame({"node": ["n0", "n1"], "rack": ["r0", "r1"],
                               "partition": "train", "gpus": 4}),
        "samples": pd.concat(frames, ignore_index=True),
        "jobs": pd.DataFrame(jobs, columns=["job_id", "name", "user_name", "gpus"]),
        "runs": pd.DataFrame(runs, columns=["job_id", "run_index", "start_ts", "end_ts",
                                            "state", "gpus"]),
        "allocations": pd.DataFrame(allocs, columns=["job_id", "run_index", "node",
                                                     "gpu_index", "start_ts", "end_ts"]),
        "carbon": pd.DataFrame({"ts": pd.date_range(start - H, NOW, freq="1h")}).assign(
            g_co2_per_kwh=lambda d: 300 + 100 * np.sin(np.arange(len(d)) / 24 * 2 * np.pi)),
    }
    for kind, frame in batches.items():
        wh.ingest(kind, frame).result()
    wh.rollup().result()
    wh.write(lambda con: con.executemany(
        "INSERT INTO failures (job_id, run_index, start_ts, end_ts, category, reason, "
        "source, gpu_hours_lost) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", fails)).result()


@pytest.fixture(scope="module")
def cur():
    with Warehouse(":memory:") as wh:
        seed(wh)
        yield wh.reader()


RANGE = {"start": NOW - timedelta(days=DAYS - 0.5), "end": NOW}


def both(fn, **kwargs):
    return (fn(resolution="minute", **RANGE, **kwargs),
            fn(resolution="hour", **RANGE, **kwargs))


def test_an_unknown_resolution_is_refused():
    with pytest.raises(ValueError):
        qe.idle_energy(None, **RANGE, resolution="second")


@pytest.mark.parametrize("by", ["user_name", "job_id"])
def test_job_and_user_energy_within_2_percent(cur, by):
    exact, fast = (df.set_index(by) for df in both(
        lambda **kw: qe.job_energy(cur, by=by, opts=OPTS, **kw)))
    assert set(fast.index) == set(exact.index)
    cols = ["gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg"]
    if by == "user_name":  # every user: many runs
        np.testing.assert_allclose(fast.loc[exact.index, cols], exact[cols], rtol=0.02)
    else:  # single jobs: a boundary hour weighs more on a short job
        err = (fast.loc[exact.index, cols] - exact[cols]).abs().sum() / exact[cols].sum()
        assert (err < 0.02).all(), err
        np.testing.assert_allclose(fast.loc[exact.index, "gpu_hours"], exact["gpu_hours"],
                                   rtol=1e-6)


def test_failure_carbon_within_2_percent(cur):
    exact, fast = both(lambda **kw: qe.failure_carbon(cur, opts=OPTS, **kw))
    assert len(exact) == len(fast) >= 3
    for col in ("lost_kwh", "lost_carbon_kg"):
        assert fast[col].sum() == pytest.approx(exact[col].sum(), rel=0.02)


def test_idle_energy_within_5_percent(cur):
    exact, fast = (df.set_index("state") for df in both(
        lambda **kw: qe.idle_energy(cur, **kw)))
    assert list(fast.index) == ["allocated_idle", "busy", "unallocated"]
    np.testing.assert_allclose(fast["gpu_hours"], exact["gpu_hours"], rtol=0.05)
    np.testing.assert_allclose(fast["gpu_kwh"], exact["gpu_kwh"], rtol=0.05)
    assert fast["gpu_hours"].sum() == pytest.approx(exact["gpu_hours"].sum(), rel=1e-6)

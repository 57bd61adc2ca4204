"""Stragglers in multi-node jobs (issue 15): the simulator's ground truth, detection and
its cost worked by hand, and the alert rule on simulated data."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from collector.simulator import Cluster, SimConfig

ANCHOR = datetime(2026, 11, 2)
LIVE = ANCHOR + timedelta(days=1)
MIN = timedelta(minutes=1)


@pytest.fixture(scope="module")
def sim() -> Cluster:
    return Cluster(SimConfig(), ANCHOR, LIVE)


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

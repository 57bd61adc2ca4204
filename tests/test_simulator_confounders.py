"""The simulator's confounders (issue 22): a warm afternoon, a fleet-wide load burst and a
rack drained for maintenance, off unless asked for, each doing what it says."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
import pytest

from collector.simulator import Cluster, SimConfig

ANCHOR = datetime(2026, 11, 2)
SMALL = SimConfig(racks=4, nodes_per_rack=4, seed=5)


@pytest.fixture(scope="module")
def on() -> Cluster:
    return Cluster(replace(SMALL, confounders=True), ANCHOR)


def _at(cluster: Cluster, t_s: float):
    t = ANCHOR + timedelta(seconds=t_s)
    return cluster.samples(t, t + timedelta(seconds=15)).to_pandas()  # one tick


def test_off_by_default_and_on_they_change_nothing_drawn_before_them(on):
    off = Cluster(SMALL, ANCHOR)
    assert off.workload.confounders.items == []
    kinds = {c.kind for c in on.workload.confounders.items}
    assert kinds == {"warm_afternoon", "load_burst", "rack_drain"}
    first = min(c.start_s for c in on.workload.confounders.items)
    a = _at(off, first - 600)
    b = _at(on, first - 600)
    assert a.equals(b)  # before the first confounder the clusters are the same


def test_a_warm_afternoon_raises_every_rack_alike(on):
    off = Cluster(SMALL, ANCHOR)
    warm = on.workload.confounders.of_kind("warm_afternoon")[0]
    mid = (warm.start_s + warm.end_s) / 2
    assert on.workload.confounders.ambient_c(np.array([mid]))[0] == pytest.approx(
        warm.magnitude)
    hot, cool = _at(on, mid), _at(off, mid)
    same_load = (hot["power_w"] - cool["power_w"]).abs() < 20  # the same GPU state
    rise = (hot["temp_c"] - cool["temp_c"])[same_load]
    assert len(rise) > 10
    assert abs(float(np.median(rise)) - warm.magnitude) <= 1.0


def test_a_load_burst_fills_idle_gpus_across_the_fleet(on):
    burst = on.workload.confounders.of_kind("load_burst")[0]
    before, during = _at(on, burst.start_s - 60), _at(on, burst.start_s + 600)
    assert (during["util_pct"] > 0).sum() > (before["util_pct"] > 0).sum()


def test_a_drained_rack_starts_no_job_until_it_returns(on):
    drain = on.workload.confounders.of_kind("rack_drain")[0]
    on.workload.advance(drain.end_s + 3600)
    nodes = set(np.flatnonzero(on.topo.node_rack == drain.rack).tolist())
    a = on.workload.allocs.view()
    gpn = on.config.gpus_per_node
    started = [(s, g // gpn) for s, g in zip(a["start"], a["gpu"], strict=True)
               if g // gpn in nodes and drain.start_s < s < drain.end_s]
    assert started == []

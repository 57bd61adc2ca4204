"""The simulator's BMC node power (issue 21): Acme's figures by hand, the Redfish wire in
live cycles, and the demo's energy counting the whole node."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from collector.simulated import SimulatedSource
from collector.simulator import SimConfig
from collector.simulator.bmc import WOBBLE, node_power, node_power_w

T = datetime(2026, 11, 2)


def _gpus(ts, node, watts):
    return pa.table({"ts": pa.array([ts] * len(watts), pa.timestamp("us")),
                     "node": [node] * len(watts), "power_w": [float(w) for w in watts]})


@pytest.mark.parametrize("gpu_w, node_w", [
    ([60] * 8, 1360.0),  # Acme: idle A100s draw ~60 W
    ([156.25] * 8, 2515.0),  # ~Acme's median GPU node, 2,520 W
    ([400] * 8, 5440.0),  # all eight at TDP: ~Acme's p99, 5,452 W
])
def test_node_power_is_shaped_like_acmes_ipmi_figures(gpu_w, node_w):
    p = node_power_w(_gpus(T, "gpu001", gpu_w))
    assert p["total_power_w"].iloc[0] == pytest.approx(node_w, rel=WOBBLE)


def test_readings_only_on_the_minute_and_through_the_redfish_wire():
    off = node_power_w(_gpus(T + timedelta(seconds=15), "gpu001", [100] * 8))
    assert off.empty
    t = node_power(pa.concat_tables([_gpus(T, "a", [100] * 4), _gpus(T, "b", [200] * 4)]),
                   wire=True)
    assert t.column("node").to_pylist() == ["a", "b"]
    assert t.column("source").to_pylist() == ["redfish", "redfish"]
    assert t.column("total_power_w").to_pylist() == node_power(
        pa.concat_tables([_gpus(T, "a", [100] * 4), _gpus(T, "b", [200] * 4)])
    ).column("total_power_w").to_pylist()


def test_demo_counts_the_bmcs_energy(wh):
    from tests.support.runs import run_refresh
    from warehouse.queries import energy as qe

    anchor = datetime(2026, 11, 1)
    src = SimulatedSource(SimConfig(racks=1, nodes_per_rack=2, seed=5), anchor=anchor,
                          live_start=anchor + timedelta(hours=3))
    src.history(lambda k, t: wh.ingest(k, t).result(), anchor, anchor + timedelta(hours=3),
                progress=False)
    live = dict(src.collect(anchor + timedelta(hours=3)))
    assert live["node_power"].num_rows == 2  # one Redfish reading per node
    wh.rollup().result()
    run_refresh(wh, now=anchor + timedelta(hours=4))
    df = qe.energy_by(wh.reader(), start=anchor + timedelta(hours=1),
                      end=anchor + timedelta(hours=3), by="fleet")
    assert df["bmc_node_hours"].iloc[0] == df["node_hours"].iloc[0] == 4
    # the rest of the node is what the BMC model adds, not the configured overhead
    assert df["other_kwh"].iloc[0] > 0 and df["it_kwh"].iloc[0] > df["gpu_kwh"].iloc[0]

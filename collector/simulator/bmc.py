"""BMC-style node power of the simulated cluster (issue 21), so the demo counts the whole node.

A node's input power is its GPUs' power plus the rest of the node, modelled as

    rest_w = BASE_W_PER_GPU x gpus + LOAD_SHARE x gpu_w   (CPUs, memory, NICs, fans)

times a deterministic +-2 % wobble per node and reading. With 8 A100s this gives
~1,360 W idle (8 x 60 W), ~2,520 W at ~1,250 W of GPU power (Acme's IPMI median for a
GPU node) and ~5,450 W with all eight at their 400 W TDP (Acme's p99). Readings are
taken every :data:`EVERY_S` seconds, rendered as Redfish ``EnvironmentMetrics`` JSON
(the wire a real BMC speaks) and read back through collector/bmc.py in live cycles.
Units: W.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pandas as pd
import pyarrow as pa

from collector.bmc import parse_environment_metrics
from warehouse.schema import SCHEMAS

EVERY_S = 60  # seconds between BMC readings (the bmc source's default interval)
BASE_W_PER_GPU = 80.0  # CPUs, memory, NICs and idle fans, per GPU slot, W
LOAD_SHARE = 0.5  # fans and host work that follow the GPUs: W per GPU W
WOBBLE = 0.02


def node_power_w(samples: pa.Table) -> pd.DataFrame:
    """Per node and reading time (``ts`` on the EVERY_S grid): the node's input power in
    W from its GPUs' samples (``ts``, ``node``, ``power_w``)."""
    us = samples.column("ts").cast(pa.timestamp("us")).cast(pa.int64()).to_numpy()
    due = (us // 1_000_000) % EVERY_S == 0
    df = samples.select(["ts", "node", "power_w"]).filter(pa.array(due)).to_pandas()
    g = df.groupby(["ts", "node"], as_index=False).agg(gpu_w=("power_w", "sum"),
                                                       gpus=("power_w", "size"))
    if g.empty:
        return g.assign(total_power_w=[])
    crc = np.array([zlib.crc32(n.encode()) for n in g["node"]], dtype=np.int64)
    t = g["ts"].astype("datetime64[us]").astype("int64").to_numpy() // 1_000_000
    wobble = ((crc * 2_654_435_761 + t * 40_503) % 10_007) / 10_007 * 2 - 1
    rest = BASE_W_PER_GPU * g["gpus"] + LOAD_SHARE * g["gpu_w"]
    return g.assign(total_power_w=((g["gpu_w"] + rest) * (1 + WOBBLE * wobble)).round(1))


def redfish_documents(samples: pa.Table) -> dict[tuple, str]:
    """(ts, node) -> the ``EnvironmentMetrics`` JSON the node's BMC would answer."""
    p = node_power_w(samples)
    return {(ts, node): json.dumps({
        "@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics",
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "PowerWatts": {"Reading": w}}) for ts, node, w in
        zip(p["ts"], p["node"], p["total_power_w"], strict=True)}


def node_power(samples: pa.Table, *, wire: bool = False) -> pa.Table:
    """``node_power`` rows for the readings due in ``samples``; ``wire`` renders each as
    Redfish JSON and parses it back (live cycles), else straight from the model (history)."""
    if wire:
        rows = [{"ts": ts.to_pydatetime(), "node": node, "source": "redfish",
                 "total_power_w": parse_environment_metrics(json.loads(doc)).power_w}
                for (ts, node), doc in redfish_documents(samples).items()]
        return pa.Table.from_pylist(rows, schema=SCHEMAS["node_power"])
    p = node_power_w(samples)
    return pa.table({"ts": pa.array(p["ts"], pa.timestamp("us")), "node": p["node"],
                     "total_power_w": p["total_power_w"].astype(float),
                     "energy_j": pa.nulls(len(p), pa.float64()),
                     "source": pa.array(["redfish"] * len(p), pa.string())},
                    schema=SCHEMAS["node_power"])

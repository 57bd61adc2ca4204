"""Small hand-built batches for warehouse tests."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

T0 = datetime(2026, 11, 2, 0, 0, 0)


def samples(start: datetime = T0, ticks: int = 4, gpus: int = 8, interval_s: float = 15.0,
            nodes: int = 1, power_w: float | None = None, seed: int = 0) -> pa.Table:
    """``ticks`` scrapes of ``nodes`` x ``gpus`` GPUs, with deterministic values."""
    rng = np.random.default_rng(seed)
    n_gpu = nodes * gpus
    ts = np.repeat(
        np.array([start + timedelta(seconds=interval_s * k) for k in range(ticks)],
                 dtype="datetime64[us]"), n_gpu)
    node = np.tile(np.repeat([f"node{i:03d}" for i in range(nodes)], gpus), ticks)
    idx = np.tile(np.tile(np.arange(gpus), nodes), ticks).astype("int16")
    n = len(ts)
    power = (np.full(n, power_w) if power_w is not None else rng.uniform(60, 700, n))
    return pa.table({
        "ts": ts,
        "node": node,
        "gpu_index": idx,
        "gpu_uuid": [f"GPU-{a}-{b}" for a, b in zip(node, idx, strict=True)],
        "interval_s": np.full(n, interval_s, dtype="float32"),
        "util_pct": rng.uniform(0, 100, n).astype("float32"),
        "power_w": power.astype("float32"),
        "temp_c": rng.uniform(30, 90, n).astype("float32"),
        "throttle_thermal": rng.random(n) < 0.1,
    })

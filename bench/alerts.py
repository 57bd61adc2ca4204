"""Benchmark: one evaluation of every default alert rule over 24,576 GPUs.

The window is synthetic (numpy): 96 racks x 32 nodes x 8 GPUs, the last 15 minutes of
15-s samples (60 per GPU, 1.47 M samples), temperature = inlet + 0.066 C/W x power +
noise, with one rack 12 C hotter (cooling failure), one poorly cooled GPU, a few
throttling GPUs and a node with critical XIDs. Prints the time of ``evaluate`` (target:
under 1 s) and of gridding the long frame the warehouse returns (``build_window``).

    .venv/bin/python bench/alerts.py [--gpus 24576] [--repeat 3] [--quick]

``--quick``: 6,144 GPUs.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.engine import evaluate  # noqa: E402
from alerts.rules import DEFAULTS  # noqa: E402
from alerts.window import Window, build_window  # noqa: E402
from bench.common import print_targets  # noqa: E402

STEP_S = 15.0
COLS = 60  # 15 minutes


def synthetic(n_gpus: int, seed: int = 0, end: datetime = datetime(2026, 11, 2, 12, 0)):
    """A Window plus the equivalent long frames (samples, inventory, events)."""
    rng = np.random.default_rng(seed)
    gpn, npr = 8, 32
    n_nodes = n_gpus // gpn
    node_names = np.array([f"node{i:05d}" for i in range(n_nodes)], dtype=object)
    node = np.repeat(node_names, gpn)
    gpu_index = np.tile(np.arange(gpn), n_nodes)
    rack_of_node = np.array([f"r{i // npr:03d}" for i in range(n_nodes)], dtype=object)
    rack = np.repeat(rack_of_node, gpn)
    n_racks = len(set(rack_of_node))
    inlet = 22.0 + rng.normal(0, 0.8, n_racks).clip(-2, 2)
    rack_id = np.repeat(np.arange(n_nodes) // npr, gpn)
    busy = rng.random(n_gpus) < 0.7
    power = np.where(busy, rng.normal(680, 25, n_gpus), rng.normal(65, 3, n_gpus))
    power = power[:, None] + rng.normal(0, 8, (n_gpus, COLS))
    r = rng.normal(0.066, 0.003, n_gpus)
    r[123] *= 1.5  # the poorly cooled GPU
    air = inlet[rack_id][:, None] + np.zeros((1, COLS))
    hot = rack_id == 7
    air[hot] += np.clip((np.arange(COLS) - 30) * 0.6, 0, 12)  # rack 7's cooling fails
    temp = air + r[:, None] * power + rng.normal(0, 0.3, (n_gpus, COLS))
    series = {
        "temp_c": temp.astype(np.float32),
        "mem_temp_c": (temp + 8).astype(np.float32),
        "power_w": power.astype(np.float32),
        "throttle_thermal": (temp > 86.0).astype(np.float32),
    }
    series["throttle_thermal"][:40, -12:] = 1.0
    events = pd.DataFrame({"ts": [end - timedelta(minutes=3)] * 2, "node": [node[800]] * 2,
                           "gpu_index": [0, 1], "code": [79, 48]})
    win = Window(end=end, step_s=STEP_S, node=node, gpu_index=gpu_index, rack=rack,
                 model=np.full(n_gpus, "H100", dtype=object), series=series, events=events)
    ts = end - timedelta(seconds=STEP_S) * (COLS - 1 - np.arange(COLS))
    long = pd.DataFrame({
        "ts": np.tile(np.array(ts, dtype="datetime64[us]"), n_gpus),
        "node": np.repeat(node, COLS), "gpu_index": np.repeat(gpu_index, COLS).astype(np.int16),
        **{k: v.reshape(-1) for k, v in series.items()},
    })
    inventory = pd.DataFrame({"node": node, "gpu_index": gpu_index, "rack": rack,
                              "model": "H100"})
    return win, long, inventory, events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=24_576)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="6,144 GPUs")
    args = ap.parse_args(argv)
    if args.quick:
        args.gpus = 6144
    win, long, inventory, events = synthetic(args.gpus)
    best_eval = best_grid = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = evaluate(DEFAULTS, win, win.end)
        best_eval = min(best_eval, time.perf_counter() - t0)
        t0 = time.perf_counter()
        build_window(long, inventory, events, win.end, COLS * STEP_S, STEP_S)
        best_grid = min(best_grid, time.perf_counter() - t0)
    by_rule: dict[str, int] = {}
    for a in result.upserts:
        by_rule[a.rule] = by_rule.get(a.rule, 0) + 1
    print(f"alerts: {args.gpus} GPUs x {COLS} samples, {len(DEFAULTS)} rules")
    print(f"  evaluate (all default rules): {best_eval * 1000:.0f} ms  (target < 1000 ms)")
    print(f"  build_window from {len(long):,} long rows: {best_grid * 1000:.0f} ms")
    print(f"  alerts found: {dict(sorted(by_rule.items()))}")
    ok = print_targets([(f"evaluate, every default rule, {args.gpus:,} GPUs",
                         f"{best_eval * 1000:.0f} ms", "< 1000 ms", best_eval < 1.0)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

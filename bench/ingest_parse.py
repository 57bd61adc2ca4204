"""Benchmark: parse one dcgm-exporter scrape of 3,072 nodes x 8 GPUs.

Prints the line count, the time of the vectorised path (collector.dcgm.parse_scrapes,
which includes collector.promtext) and of prometheus_client's text parser, and the ratio.
prometheus_client is timed on a 1/20 subset of the nodes and extrapolated linearly (it
is a per-line Python loop, so its time is proportional to the lines). The text is
rendered with collector.wire.render_dcgm from a synthetic numpy samples table; no
simulator or network is needed.

Usage: .venv/bin/python bench/ingest_parse.py [--nodes 3072] [--repeat 3] [--quick]

``--quick``: 768 nodes (6,144 GPUs).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.dcgm import parse_scrapes  # noqa: E402
from collector.wire import render_dcgm  # noqa: E402
from warehouse.schema import SCHEMAS  # noqa: E402

TS = datetime(2026, 11, 2, 12, 0)


def synthetic_samples(nodes: int, gpus: int = 8, seed: int = 0) -> pa.Table:
    """A samples table with realistic value ranges (util %, W, MiB, MHz, J)."""
    rng = np.random.default_rng(seed)
    n = nodes * gpus
    def ints(lo, hi):
        return rng.integers(lo, hi, n).astype(np.float32)
    return pa.table(
        {
            "ts": [TS] * n,
            "node": np.repeat([f"gpu{i:05d}" for i in range(nodes)], gpus),
            "gpu_index": np.tile(np.arange(gpus, dtype=np.int16), nodes),
            "gpu_uuid": [f"GPU-{i:08x}-5b6a-3f0e-9c1d-8e7f6a5b4c30" for i in range(n)],
            "interval_s": np.full(n, 15.0, np.float32),
            "util_pct": ints(0, 101),
            "mem_util_pct": ints(0, 101),
            "sm_active_pct": (rng.random(n) * 100).astype(np.float32),
            "mem_used_mib": ints(0, 81560),
            "power_w": (60 + rng.random(n) * 640).astype(np.float32),
            "energy_j": rng.random(n) * 5e8,
            "temp_c": ints(28, 90),
            "mem_temp_c": ints(28, 95),
            "sm_clock_mhz": ints(210, 1981),
            "throttle_thermal": rng.random(n) < 0.05,
            "throttle_power": rng.random(n) < 0.1,
            "ecc_sbe_volatile": rng.integers(0, 3, n),
            "ecc_dbe_volatile": np.zeros(n, np.int64),
            "xid_last": np.zeros(n, np.int32),
            "tensor_active_pct": (rng.random(n) * 60).astype(np.float32),
            "dram_active_pct": (rng.random(n) * 60).astype(np.float32),
        },
        schema=SCHEMAS["samples"],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3072)
    ap.add_argument("--repeat", type=int, default=3, help="fast-path runs; the best counts")
    ap.add_argument("--quick", action="store_true", help="768 nodes (6,144 GPUs)")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes = 768

    t = time.perf_counter()
    texts = render_dcgm(synthetic_samples(args.nodes))
    render_s = time.perf_counter() - t
    lines = sum(x.count("\n") for x in texts.values())
    samples_lines = sum(1 for x in texts.values() for ln in x.splitlines() if ln[:1] != "#")
    print(f"exporter text: {args.nodes} nodes x 8 GPUs, {lines:,} lines "
          f"({samples_lines:,} samples), {sum(map(len, texts.values())) / 1e6:.1f} MB; "
          f"rendered in {render_s:.2f} s")

    fast = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        result = parse_scrapes(texts, TS)
        fast.append(time.perf_counter() - t)
    assert result.samples.num_rows == args.nodes * 8 and not result.errors
    print(f"fast path (parse_scrapes): best {min(fast):.3f} s, first {fast[0]:.3f} s "
          f"of {args.repeat} runs -> {lines / min(fast):,.0f} lines/s")

    subset = list(texts)[:: 20]
    sub_lines = sum(texts[k].count("\n") for k in subset)
    t = time.perf_counter()
    for k in subset:
        for _ in text_string_to_metric_families(texts[k]):
            pass
    ref_sub = time.perf_counter() - t
    ref = ref_sub * lines / sub_lines
    print(f"prometheus_client: {ref_sub:.2f} s on a 1/20 subset ({len(subset)} nodes, "
          f"{sub_lines:,} lines, {sub_lines / ref_sub:,.0f} lines/s) -> "
          f"~{ref:.1f} s extrapolated to all {lines:,} lines")
    print(f"ratio: fast path is ~{ref / min(fast):.0f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

""""Now" questions from the writer's latest-sample table against a scan of the raw tier.

    .venv/bin/python bench/latest.py [--nodes 3072] [--gpus 8] [--ticks 40] [--runs 10]
                                     [--quick]

Writes ``--ticks`` scrapes (15 s apart) of ``--nodes`` x ``--gpus`` GPUs into an in-memory
warehouse, alternating scrapes written with and without the ``gpu_latest`` upsert (its
cost to the writer), then times the 10 hottest GPUs now, the Overview headline and the
rack floor from ``gpu_latest`` and from the raw tier, the two sources alternately so that
the machine's load weighs on both alike. Medians, in ms. Both sources give the same
answers (tests/test_warehouse_latest.py). Target (issue 17): every "now" question at
least as fast from ``gpu_latest`` as from the raw scan. ``--quick``: 768 nodes, 20 scrapes,
5 runs.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import questions as bq  # noqa: E402
from bench.common import machine, median, ms, print_table, print_targets, timed  # noqa: E402
from warehouse import Warehouse, ingest  # noqa: E402
from warehouse.queries import fleet, overview  # noqa: E402

END = datetime(2026, 11, 16)


def scrape(nodes: list[str], gpus: int, ts: datetime, rng) -> pa.Table:
    """One scrape: a row per GPU with utilisation (%), power (W) and temperature (°C)."""
    n = len(nodes) * gpus
    return pa.table({
        "ts": np.full(n, np.datetime64(ts, "us")), "node": np.repeat(nodes, gpus),
        "gpu_index": np.tile(np.arange(gpus, dtype="int16"), len(nodes)),
        "util_pct": rng.uniform(0, 100, n).astype("float32"),
        "power_w": rng.uniform(60, 700, n).astype("float32"),
        "temp_c": rng.uniform(30, 90, n).astype("float32")})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3072)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--ticks", type=int, default=40, help="scrapes, 15 s apart")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="768 nodes, 20 scrapes, 5 runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.ticks, args.runs = 768, 20, 5
    print(f"machine: {machine()}")
    rng = np.random.default_rng(0)
    nodes = [f"n{i:05d}" for i in range(args.nodes)]
    wh = Warehouse(":memory:")
    try:
        wh.ingest("nodes", pd.DataFrame({"node": nodes, "rack": [f"r{i // 8:04d}" for i in
                                                                 range(args.nodes)],
                                         "partition": "gpu", "gpus": args.gpus})).result()
        write = {True: [], False: []}
        upsert = ingest.latest_sql
        for k in range(args.ticks):  # the last scrape is written with the upsert
            with_upsert = (args.ticks - 1 - k) % 2 == 0
            ingest.latest_sql = upsert if with_upsert else (lambda: "SELECT 1")
            batch = scrape(nodes, args.gpus, END - timedelta(seconds=15 * (args.ticks - k)),
                           rng)
            try:
                write[with_upsert].append(timed(lambda: wh.ingest("samples", batch)  # noqa: B023
                                                .result())[0])
            finally:
                ingest.latest_sql = upsert
        n = args.nodes * args.gpus
        print(f"{n:,} GPUs, {args.ticks} scrapes; one scrape written with the gpu_latest "
              f"upsert {ms(median(write[True][1:]))}, without {ms(median(write[False][1:]))}")
        now = END
        questions = {
            "10 hottest GPUs now": lambda: bq.hottest_gpus(wh.reader(), now=now, limit=10),
            "Overview headline": lambda: overview.headline(
                wh.reader(), now=now, week_start=now - timedelta(days=2)),
            "Overview rack floor": lambda: overview.rack_floor(wh.reader(), now=now)}
        source = fleet.latest_source
        rows, targets = [], []
        for name, question in questions.items():
            took = {"raw": [], "table": []}
            for _ in range(args.runs + 1):  # the first of each is a warm-up
                for key in took:
                    fleet.latest_source = lambda cur, now, key=key: key
                    try:
                        took[key].append(timed(question)[0])
                    finally:
                        fleet.latest_source = source
            raw, table = median(took["raw"][1:]), median(took["table"][1:])
            rows.append((name, ms(raw), ms(table), f"{raw / table:,.1f}x"))
            targets.append((f"{name}: raw scan / gpu_latest", f"{raw / table:,.1f}x",
                            ">= 1x", table <= raw))
        print_table(["question", "raw scan", "gpu_latest", "raw / gpu_latest"], rows)
        print_targets(targets, title=f"targets ({n:,} GPUs)")
    finally:
        wh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

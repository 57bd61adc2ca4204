"""Ingest benchmark: the live collection cycle at fleet scale, and the bulk path.

Prints
- one live cycle for N nodes x 8 GPUs (default 3,072 x 8 = 24,576 GPUs): exporter text
  already fetched -> parse -> writer -> committed rows; median and p95 over cycles,
  against the 15-s sampling interval (target: under 2 s);
- the bulk path (Warehouse.ingest, idempotent) in rows/s next to a raw DuckDB append of
  the same rows into the same schema, measured in the same run, and their ratio
  (target: bulk >= 50 % of raw).

    python bench/ingest.py [--racks 384] [--cycles 7] [--bulk-hours 24] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_targets  # noqa: E402
from collector.dcgm import DcgmCollector  # noqa: E402
from collector.simulator import Cluster, SimConfig  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.db import fill, transaction  # noqa: E402
from warehouse.migrate import migrate  # noqa: E402
from warehouse.schema import TABLES  # noqa: E402

ANCHOR = datetime(2026, 11, 2)


def raw_append(con: duckdb.DuckDBPyConnection, kind: str, table) -> int:
    """Plain append without idempotency: the baseline gpulens's ingest is compared with."""
    con.register("batch", table)
    try:
        with transaction(con):
            con.execute(fill("INSERT INTO {table} SELECT * FROM batch", table=TABLES[kind]))
    finally:
        con.unregister("batch")
    return table.num_rows


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def live_cycles(racks: int, cycles: int, workdir: Path) -> None:
    config = SimConfig(racks=racks)
    cluster = Cluster(config, anchor=ANCHOR, live_start=ANCHOR + timedelta(hours=1))
    ticks = [ANCHOR + timedelta(hours=1, seconds=15 * k) for k in range(cycles)]
    t0 = time.perf_counter()
    texts = [cluster.dcgm_texts(ts) for ts in ticks]
    render_s = time.perf_counter() - t0
    lines = sum(t.count("\n") for t in texts[0].values())
    nodes = len(texts[0])
    collector = DcgmCollector(config.interval_s)
    with Warehouse(workdir / "live.duckdb") as wh:
        wh.ingest_all(cluster.topology())
        parse_s, total_s, rows = [], [], 0
        for ts, text in zip(ticks, texts, strict=True):
            start = time.perf_counter()
            result = collector.collect(text, ts)
            parsed = time.perf_counter()
            rows = wh.ingest("samples", result.samples).result()
            wh.ingest("events", result.events).result()
            done = time.perf_counter()
            parse_s.append(parsed - start)
            total_s.append(done - start)
    med = statistics.median(total_s)
    print(f"live cycle: {nodes} nodes, {rows} GPUs, {lines:,} exporter lines per cycle "
          f"(rendering the text, not timed: {render_s / cycles:.2f} s/cycle)")
    print(f"  parse        median {statistics.median(parse_s):.3f} s  p95 {p95(parse_s):.3f} s")
    print(f"  parse+commit median {med:.3f} s  p95 {p95(total_s):.3f} s  "
          f"over {cycles} cycles; headroom vs 15 s: {15 / med:.1f}x; target < 2 s: "
          f"{'met' if p95(total_s) < 2 else 'NOT met'}")
    return ("live cycle parse + commit, p95", f"{p95(total_s):.2f} s", "< 2 s",
            p95(total_s) < 2)


def bulk(racks: int, hours: float, workdir: Path) -> None:
    cluster = Cluster(SimConfig(racks=racks), anchor=ANCHOR)
    end = ANCHOR + timedelta(hours=hours)
    chunks, t = [], ANCHOR
    while t < end:
        nxt = min(end, t + timedelta(hours=6))
        chunks.append(cluster.samples(t, nxt))
        t = nxt
    rows = sum(c.num_rows for c in chunks)
    with Warehouse(workdir / "bulk.duckdb") as wh:
        start = time.perf_counter()
        for chunk in chunks:
            wh.ingest("samples", chunk).result()
        bulk_s = time.perf_counter() - start
        again = time.perf_counter()
        wh.ingest("samples", chunks[0]).result()  # a retried batch: skipped, not doubled
        retry_s = time.perf_counter() - again
        stored = wh.reader().execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    con = duckdb.connect(str(workdir / "raw.duckdb"))
    migrate(con)
    start = time.perf_counter()
    for chunk in chunks:
        raw_append(con, "samples", chunk)
    raw_s = time.perf_counter() - start
    con.close()
    assert stored == rows, f"bulk path stored {stored} rows of {rows}"
    bulk_rate, raw_rate = rows / bulk_s, rows / raw_s
    print(f"bulk path: {rows:,} rows ({racks * 64} GPUs x {hours:g} h at 15 s) in "
          f"{len(chunks)} batches")
    print(f"  gpulens ingest (idempotent) {bulk_rate / 1e6:6.2f} M rows/s")
    print(f"  raw DuckDB append           {raw_rate / 1e6:6.2f} M rows/s")
    print(f"  ratio {bulk_rate / raw_rate:.0%} of raw (target >= 50 %: "
          f"{'met' if bulk_rate >= 0.5 * raw_rate else 'NOT met'}); a retried "
          f"{chunks[0].num_rows:,}-row batch took {retry_s:.2f} s and added nothing")
    return ("bulk path against a raw DuckDB append", f"{bulk_rate / raw_rate:.0%}", ">= 50 %",
            bulk_rate >= 0.5 * raw_rate)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--racks", type=int, default=384, help="racks of 8 nodes x 8 GPUs")
    ap.add_argument("--cycles", type=int, default=7)
    ap.add_argument("--bulk-racks", type=int, default=8)
    ap.add_argument("--bulk-hours", type=float, default=48)
    ap.add_argument("--quick", action="store_true", help="fewer cycles, less bulk data")
    args = ap.parse_args()
    if args.quick:
        args.cycles, args.bulk_hours = 3, 12
    with tempfile.TemporaryDirectory() as tmp:
        targets = [live_cycles(args.racks, args.cycles, Path(tmp)),
                   bulk(args.bulk_racks, args.bulk_hours, Path(tmp))]
    print_targets(targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())

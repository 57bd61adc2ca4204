"""Benchmark: the weekly analytics aggregates on a 24,576-GPU fleet.

    .venv/bin/python bench/analytics.py [--gpus 24576] [--fraction 0.125] [--days 7]
                                        [--quick]

``--quick``: 6,144 GPUs, 2 days.

What is generated (numpy, straight into the tables, no simulator):
- topology for all ``--gpus`` (8 GPUs per node, 16 nodes per rack);
- ``gpu_energy_1h`` for ALL GPUs and days (the hourly tier the fleet/rack energy reads:
  24,576 x 168 = 4.1 M rows), so ``energy_by`` is measured at full scale;
- ``gpu_samples_1m`` for a ``--fraction`` of the nodes only (a full week at 24,576 GPUs
  is 248 M rows, too many for this machine in a benchmark's time); the queries reading it
  (``idle_energy``, ``job_energy``) are timed at the fraction and extrapolated linearly
  (they are scans/joins linear in rows);
- whole-node jobs on the sampled nodes (1-12 h each, 35 % failing with Acme-like log
  lines), with allocations; then ``analytics.refresh`` classifies them.
Prints one line per query: seconds measured, rows it read, and the extrapolation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

# the repository ahead of bench/: run as `python bench/analytics.py`, bench/alerts.py
# stood in for the `alerts` package the settings import
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from warehouse import Warehouse, run_nodes, run_shapes  # noqa: E402
from warehouse.analytics import Options, refresh  # noqa: E402
from warehouse.queries import energy as qe  # noqa: E402
from warehouse.queries import failures as qf  # noqa: E402
from warehouse.queries import goodput as qg  # noqa: E402
from warehouse.schema import derived_columns  # noqa: E402

T0 = datetime(2026, 11, 2)
GPN = 8
REASONS = ["RuntimeError: CUDA error: unspecified launch failure", "KeyError: 'input_ids'",
           "torch.cuda.OutOfMemoryError: CUDA out of memory.", None,
           "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL"]


def _append(con, table: str, arrow: pa.Table) -> None:
    con.register("_b", arrow)
    con.execute(f"INSERT INTO {table} BY NAME SELECT *{derived_columns(table)} FROM _b")
    con.unregister("_b")


def topology(con, n_nodes: int) -> None:
    nodes = pd.DataFrame({"node": [f"n{i:05d}" for i in range(n_nodes)],
                          "rack": [f"r{i // 16:04d}" for i in range(n_nodes)],
                          "partition": "train", "gpus": GPN})
    _append(con, "nodes", pa.Table.from_pandas(nodes, preserve_index=False))


def hourly(con, n_nodes: int, days: int, rng) -> int:
    hours = days * 24
    n = n_nodes * GPN
    for h in range(hours):
        ts = np.full(n, np.datetime64(T0 + timedelta(hours=h), "us"))
        arrow = pa.table({"ts": ts, "node": np.repeat([f"n{i:05d}" for i in range(n_nodes)],
                                                      GPN),
                          "gpu_index": np.tile(np.arange(GPN, dtype="int16"), n_nodes),
                          "energy_j": rng.uniform(60, 700, n) * 3600,
                          "samples": np.full(n, 240, "int32"),
                          "counter_samples": np.full(n, 240, "int32"),
                          "method": np.full(n, "counter")})
        _append(con, "gpu_energy_1h", arrow)
    # the 1-hour rollup tier the refresh compares against (sample counts only)
    con.execute("INSERT INTO gpu_samples_1h (ts, node, gpu_index, samples, energy_j) "
                "SELECT ts, node, gpu_index, samples, energy_j FROM gpu_energy_1h")
    return hours * n


def minutes(con, nodes: list[str], days: int, rng) -> int:
    n = len(nodes) * GPN
    node_col = np.repeat(nodes, GPN)
    gpu_col = np.tile(np.arange(GPN, dtype="int16"), len(nodes))
    rows = 0
    for day in range(days):
        for chunk in range(4):  # 6-hour chunks keep memory small
            mins = 360
            base = np.datetime64(T0 + timedelta(days=day, hours=6 * chunk), "us")
            ts = np.repeat(base + np.arange(mins) * np.timedelta64(60_000_000, "us"), n)
            util = rng.uniform(0, 100, mins * n).astype("float32")
            power = (60 + 6.4 * util).astype("float32")
            arrow = pa.table({"ts": ts, "node": np.tile(node_col, mins),
                              "gpu_index": np.tile(gpu_col, mins),
                              "samples": np.full(mins * n, 4, "int32"),
                              "covered_s": np.full(mins * n, 60.0),
                              "util_pct_avg": util, "util_pct_max": util,
                              "power_w_avg": power, "energy_j": power * 60.0})
            _append(con, "gpu_samples_1m", arrow)
            rows += mins * n
    return rows


def jobs(con, nodes: list[str], days: int, rng) -> int:
    job_rows, run_rows, alloc_rows = [], [], []
    end_all = T0 + timedelta(days=days)
    k = 0
    for node in nodes:
        t = T0
        while t < end_all:
            dur = timedelta(hours=float(rng.uniform(1, 12)))
            failed = rng.random() < 0.35
            jid = f"b{k}"
            k += 1
            reason = REASONS[k % len(REASONS)] if failed else None
            job_rows.append((jid, f"u{k % 50}", "train", GPN, t, t, t + dur,
                             "FAILED" if failed else "COMPLETED"))
            run_rows.append((jid, 0, t, t + dur, "FAILED" if failed else "COMPLETED",
                             1 if failed else 0, reason, GPN))
            alloc_rows += [(jid, 0, node, g, t, t + dur) for g in range(GPN)]
            t += dur
    cols = dict(jobs=["job_id", "user_name", "partition", "gpus", "submit_ts", "start_ts",
                      "end_ts", "state"],
                job_runs=["job_id", "run_index", "start_ts", "end_ts", "state", "exit_code",
                          "reason", "gpus"],
                allocations=["job_id", "run_index", "node", "gpu_index", "start_ts",
                             "end_ts"])
    for table, data in (("jobs", job_rows), ("job_runs", run_rows),
                        ("allocations", alloc_rows)):
        df = pd.DataFrame(data, columns=cols[table])
        _append(con, table, pa.Table.from_pandas(df, preserve_index=False))
    run_nodes.rebuild(con)  # allocations written here, not through the writer's ingest
    run_shapes.rebuild(con)
    return len(run_rows)


def timed(label: str, fn, scale: float = 1.0) -> None:
    t = time.perf_counter()
    out = fn()
    s = time.perf_counter() - t
    n = len(out) if hasattr(out, "__len__") else 1
    extra = f"  -> ~{s * scale:7.2f} s at full scale (x{scale:g})" if scale != 1 else ""
    print(f"{label:<42} {s:7.2f} s  ({n} result rows){extra}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=24576)
    ap.add_argument("--fraction", type=float, default=0.125,
                    help="share of nodes with 1-minute data (default 1/8)")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="6,144 GPUs, 2 days")
    args = ap.parse_args(argv)
    if args.quick:
        args.gpus, args.days = 6144, 2
    rng = np.random.default_rng(0)
    n_nodes = args.gpus // GPN
    sampled = [f"n{i:05d}" for i in range(max(1, int(n_nodes * args.fraction)))]
    scale = n_nodes / len(sampled)
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(Path(tmp) / "bench.duckdb")
        t = time.perf_counter()

        def build(con):
            topology(con, n_nodes)
            return hourly(con, n_nodes, args.days, rng), minutes(con, sampled, args.days, rng), \
                jobs(con, sampled, args.days, rng)

        h_rows, m_rows, runs = wh.write(build).result()
        print(f"generated in {time.perf_counter() - t:.1f} s: {h_rows:,} hourly GPU rows "
              f"(all {args.gpus:,} GPUs), {m_rows:,} 1-minute rows ({len(sampled) * GPN:,} "
              f"GPUs = 1/{scale:g} of the fleet), {runs:,} job runs")
        end = T0 + timedelta(days=args.days)
        opts = Options()
        timed("analytics.refresh (first, classify all)",
              lambda: [wh.write(lambda con: refresh(con, end, opts)).result()], scale)
        timed("analytics.refresh (again, incremental)",
              lambda: [wh.write(lambda con: refresh(con, end, opts)).result()])
        cur = wh.reader()
        week = {"start": T0, "end": end}
        timed("energy_by rack (hourly tier, full scale)",
              lambda: qe.energy_by(cur, by="rack", opts=opts, **week))
        timed("energy_by day (hourly tier, full scale)",
              lambda: qe.energy_by(cur, by="day", opts=opts, **week))
        timed("idle_energy (1-minute tier)", lambda: qe.idle_energy(cur, **week), scale)
        timed("job_energy per job (1-minute tier)",
              lambda: qe.job_energy(cur, opts=opts, **week), scale)
        timed("job_energy per user (1-minute tier)",
              lambda: qe.job_energy(cur, by="user_name", opts=opts, **week), scale)
        timed("failures_by category", lambda: qf.failures_by(cur, by="category", **week), scale)
        timed("failure_rate + MTTF", lambda: [qf.failure_rate(cur, **week)], scale)
        timed("lemon_nodes", lambda: qf.lemon_nodes(cur, **week), scale)
        timed("lost_total (failures table)", lambda: [qg.lost_total(cur, **week)], scale)
        timed("ettr_jobs", lambda: qg.ettr_jobs(cur, now=end, **week), scale)
        wh.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: straggler detection against the simulator's ground truth (issue 15).

    .venv/bin/python bench/stragglers.py [--days 7] [--seed 42] [--quick]

``--quick``: 2 days. The demo cluster (512 GPUs, collector/simulator) runs for ``--days``
with a straggler injected every 6 hours into its largest multi-node run (a slow GPU or a
slow node, collector/simulator/stragglers.py); its samples go through the real path
(ingest, 1-minute rollup) and the analytics' straggler refresh runs every 30 minutes of
simulated time, as the service runs it. Then:

- recall: injected episodes found (a detected episode of the same job and node that
  overlaps it in time) / injected episodes;
- precision: detected episodes that are true / detected episodes. True: it matches an
  injected episode, or the simulator's other ground truth explains it: the poorly cooled
  GPU (``hot_gpu``, thermal resistance x 1.5: a real straggler when its job is synchronous)
  or a rack cooling failure on the node's rack at that time. These are printed apart.

Prints figure / target / met; the target is 0.9 for each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.simulator import Cluster, SimConfig  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.queries import stragglers as sq  # noqa: E402
from warehouse.stragglers import refresh_stragglers  # noqa: E402

ANCHOR = datetime(2026, 11, 2)
TARGET = 0.9
REFRESH = timedelta(minutes=30)


def overlaps(a0, a1, b0, b1) -> bool:
    return a0 < b1 and b0 < a1


def score(found, truth, incidents, rack_of) -> dict:
    """Recall over ``truth``, precision over ``found`` (rows of the stragglers table)."""
    hits = [any(r.job_id == t.job_id and r.node == t.node
                and overlaps(r.start_ts, r.end_ts, t.start, t.end) for r in found)
            for t in truth]
    hot = [i for i in incidents if i.kind == "hot_gpu"]
    cooling = [i for i in incidents if i.kind == "rack_cooling"]
    injected = explained = false = 0
    for r in found:
        if any(r.job_id == t.job_id and r.node == t.node
               and overlaps(r.start_ts, r.end_ts, t.start, t.end) for t in truth):
            injected += 1
        elif (any(h.node == r.node and h.gpu_index in list(r.gpu_indices) for h in hot)
              or any(c.rack == rack_of[r.node] and overlaps(r.start_ts, r.end_ts, c.start,
                                                              c.end) for c in cooling)):
            explained += 1
        else:
            false += 1
    n = len(found)
    return {"truth": len(truth), "found_truth": sum(hits), "detected": n,
            "injected": injected, "explained": explained, "false": false,
            "recall": sum(hits) / len(truth) if truth else float("nan"),
            "precision": (injected + explained) / n if n else float("nan")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=7.0, help="simulated days (default 7)")
    ap.add_argument("--seed", type=int, default=None, help="simulator seed (default: the "
                    "setting simulator.seed)")
    ap.add_argument("--quick", action="store_true", help="2 days")
    args = ap.parse_args(argv)
    days = 2.0 if args.quick else args.days
    config = SimConfig() if args.seed is None else SimConfig(seed=args.seed)
    start, end = ANCHOR, ANCHOR + timedelta(days=days)
    cluster = Cluster(config, ANCHOR, start)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        wh = Warehouse(str(Path(tmp) / "bench.duckdb"))
        try:
            cluster.backfill(lambda k, t: wh.ingest(k, t).result(), start, end,
                             progress=False)
            wh.rollup().result()
            t1 = time.perf_counter()
            t = start + REFRESH
            while t <= end:
                wh.write(lambda con, t=t: refresh_stragglers(con, t)).result()
                t += REFRESH
            t2 = time.perf_counter()
            found = list(sq.episodes(wh.reader(), start=start, end=end,
                                     limit=1_000_000).itertuples())
        finally:
            wh.close()
    truth = [s for s in cluster.stragglers(end) if s.start >= start and s.end <= end]
    topo = cluster.topo
    rack_of = {n: topo.rack_names[topo.node_rack[i]] for i, n in enumerate(topo.node_names)}
    s = score(found, truth, cluster.incidents(), rack_of)
    print(f"stragglers: {config.n_gpus} GPUs, {days:g} simulated days, {s['truth']} injected "
          f"episodes; simulate+ingest+rollup {t1 - t0:.0f} s, detection "
          f"{t2 - t1:.1f} s ({int(days * 86400 / REFRESH.total_seconds())} refreshes)")
    print(f"detected {s['detected']}: {s['injected']} injected, {s['explained']} explained "
          f"by the simulator's other ground truth (hot GPU, rack cooling), {s['false']} false")
    print(f"{'figure':<12}{'value':>8}{'target':>9}  met")
    ok = True
    for name in ("precision", "recall"):
        met = s[name] >= TARGET
        ok &= met
        print(f"{name:<12}{s[name]:>8.3f}{TARGET:>9.2f}  {'yes' if met else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: how good the default alert rules are over a simulated month (issue 22).

The simulator's incidents are the ground truth: rack cooling failures (every ~48 h) and
the poorly cooled GPU; its confounders (warm afternoons, fleet-wide load bursts, racks
drained for maintenance) must not page. The samples go straight from the simulator into
``alerts.backtest.replay`` (the service's evaluator, every 15 s), without a warehouse.
XID pages count as tied to a fault when the simulator raised that XID, throttling pages
when the simulator had that GPU throttling (its busy power above its thermal limit).

Prints, per size, measured / target / met for: recall (>= 0.95), false pages per week
per 1,000 GPUs (<= 1), median time from incident start to page (<= 3 min), p95 of it,
and pages per rack incident (exactly 1).

    .venv/bin/python bench/alert_quality.py [--days 30] [--sizes 512,4096] [--quick]
                                            [--every 15] [--offset 0]

``--quick``: 3 days at the demo's size (512 GPUs) only.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts import backtest  # noqa: E402
from alerts.rules import DEFAULTS  # noqa: E402
from collector.simulator import Cluster, SimConfig  # noqa: E402
from collector.simulator.incidents import Incident  # noqa: E402

ANCHOR = datetime(2026, 10, 1, 0, 0)
US = timedelta(microseconds=1)
TARGETS = {"recall": 0.95, "false": 1.0, "median_s": 180.0}


class SimSource:
    """A backtest source reading the simulator directly (bounds ``since < ts <= until``)."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        topo = cluster.topology()
        nodes = topo["nodes"].to_pandas()[["node", "rack"]]
        gpus = topo["gpus"].to_pandas()[["node", "gpu_index", "model"]]
        self.inv = nodes.merge(gpus, on="node", how="left")[["node", "gpu_index", "rack",
                                                              "model"]]
        self.rack_of = dict(zip(nodes["node"], nodes["rack"], strict=True))
        self.xids: list[pd.DataFrame] = []
        self.throttled: list[pd.DataFrame] = []

    def samples(self, since, until) -> pd.DataFrame:
        t = self.c.samples(since + US, until + US).select(
            ["ts", "node", "gpu_index", "temp_c", "mem_temp_c", "power_w", "throttle_thermal"])
        df = t.to_pandas()
        df["throttle_thermal"] = df["throttle_thermal"].astype("float32")
        hot = df[df["throttle_thermal"] > 0]
        if len(hot):  # the simulator's own throttling state: ground truth of throttling GPUs
            self.throttled.append(hot.groupby(["node", "gpu_index"])["ts"].agg(["min", "max"])
                                  .reset_index())
        return df

    def events(self, since, until) -> pd.DataFrame:
        df = self.c.events(since + US, until + US).to_pandas()
        df = df[df["kind"] == "xid"][["ts", "node", "gpu_index", "code"]]
        df["rack"] = df["node"].map(self.rack_of)
        df = df.sort_values("ts", kind="stable").reset_index(drop=True)
        self.xids.append(df)
        return df

    def inventory(self) -> pd.DataFrame:
        return self.inv


def measure(gpus: int, days: float, every_s: float, seed: int, offset_days: float = 0.0) -> dict:
    nodes_per_rack, gpn = 8, 8
    racks = max(4, gpus // (nodes_per_rack * gpn))
    sim = replace(SimConfig(), racks=racks, nodes_per_rack=nodes_per_rack, gpus_per_node=gpn,
                  seed=seed, confounders=True, cooling_incident_every_h=12.0)
    live = ANCHOR + timedelta(days=1)
    cluster = Cluster(sim, anchor=ANCHOR, live_start=live)
    src = SimSource(cluster)
    start = live + timedelta(days=offset_days)
    end = start + timedelta(days=days)
    a, b = ((t - ANCHOR).total_seconds() for t in (start, end))
    t0 = time.perf_counter()
    result = backtest.replay(DEFAULTS, src, start, end, step_s=sim.interval_s, every_s=every_s)
    seconds = time.perf_counter() - t0
    # incidents wholly inside the span are scored; one that straddles its start or end
    # explains the pages it causes (a known fault) but is not scored, as its page or its
    # resolve may lie outside the replay
    truth, edge = [], []
    for i in cluster.incidents():
        if i.kind not in ("rack_cooling", "hot_gpu"):
            continue
        if i.end is None or (i.start >= start and i.end <= end):
            truth.append(i)
        elif i.start < end and i.end > start:
            edge.append(i)
    xid = pd.concat(src.xids).drop_duplicates() if src.xids else pd.DataFrame()
    hold = timedelta(seconds=1800)
    faults = edge + [Incident("xid", ts, ts + hold, rack=r, node=n)
                     for ts, n, r in zip(xid.get("ts", []), xid.get("node", []),
                                         xid.get("rack", []), strict=True)]
    for part in src.throttled:
        faults += [Incident("throttling", a, b, rack=src.rack_of[n], node=n, gpu_index=int(g))
                   for n, g, a, b in part.itertuples(index=False)]
    q = backtest.quality(result, truth, sim.n_gpus, faults=faults)
    q.update(gpus=sim.n_gpus, days=days, seconds=seconds, evaluations=result.evaluations,
             confounders=sum(a <= c.start_s < b for c in cluster.workload.confounders.items))
    return q


def table(q: dict) -> list[tuple[str, str, str, str]]:
    ttp = q["time_to_page_s"]
    med = float(np.median(ttp)) if ttp else float("nan")
    p95 = float(np.percentile(ttp, 95)) if ttp else float("nan")
    per = q["pages_per_rack_incident"]
    exact = sum(p == 1 for p in per)
    return [
        ("recall", f"{q['recall']:.3f}", ">= 0.95", _met(q["recall"] >= TARGETS["recall"])),
        ("false pages / week / 1,000 GPUs", f"{q['false_pages_per_week_per_1000_gpus']:.2f}",
         "<= 1", _met(q["false_pages_per_week_per_1000_gpus"] <= TARGETS["false"])),
        ("median time to page", f"{med / 60:.1f} min", "<= 3 min",
         _met(med <= TARGETS["median_s"])),
        ("p95 time to page", f"{p95 / 60:.1f} min", "-", "-"),
        ("pages per rack incident", f"{exact}/{len(per)} exactly 1 (max {max(per, default=0)})",
         "exactly 1", _met(exact == len(per))),
    ]


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--sizes", default="512,4096", help="GPU counts, comma-separated")
    ap.add_argument("--every", type=float, default=15.0, help="seconds between evaluations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--offset", type=float, default=0.0,
                    help="days after the live start where the replay begins (to run the "
                         "days of a span as separate processes)")
    ap.add_argument("--quick", action="store_true", help="3 days at 512 GPUs")
    args = ap.parse_args(argv)
    if args.quick:
        args.days, args.sizes = min(args.days, 3.0), "512"
    ok = True
    for gpus in (int(s) for s in args.sizes.split(",")):
        q = measure(gpus, args.days, args.every, args.seed, args.offset)
        print(f"alert quality: {q['gpus']} GPUs, {q['days']:g} simulated days, "
              f"{q['incidents']} incidents, {q['confounders']} confounders, "
              f"{q['evaluations']} evaluations every {args.every:g} s "
              f"({q['seconds']:.0f} s)")
        rows = table(q)
        print(f"  {'measure':34} {'measured':30} {'target':10} met")
        for name, measured, target, met in rows:
            print(f"  {name:34} {measured:30} {target:10} {met}")
            ok &= met != "NO"
        for f in q["false"][:10]:
            print(f"  false page: {f['rule']} {f['rack']} at {f['created_at']}")
        for r in q["rows"]:
            if r["pages"] != 1 and r["node"] is None:
                print(f"  incident {r['kind']} {r['rack']} {r['start']}: {r['pages']} pages "
                      f"{r['rules']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

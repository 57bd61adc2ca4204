"""Fleet view benchmark (issue 18): the figures of N clusters read from a Parquet lake.

    .venv/bin/python bench/fleet.py [--clusters 4] [--days 30] [--runs 5] [--quick]

One warehouse of 1,024 GPUs x ``--days`` days (bench/dashboard.py's ``build``: hourly
tier, jobs, runs, allocations, classified failures, energy, carbon intensity) is exported
``--clusters`` times into one lake under the names c0, c1, ... Then, each ``--runs``
times: one cluster's figures (``lake_fleet.cluster_figures``) from the warehouse and from
the lake, and the fleet view's whole read of the lake (``fleet_figures``); plus opening
a cluster's lake (the migrations and one view per table). The lake's figures must equal
the warehouse's (the one-definition check of tests/test_fleet.py, at this size).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, median, p95, repeat  # noqa: E402
from bench.dashboard import NOW, build  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from warehouse.analytics import Options  # noqa: E402
from warehouse.export import export_parquet  # noqa: E402
from warehouse.queries import lake_fleet as lf  # noqa: E402


def _scalars(figs: dict) -> dict[str, float]:
    """The figures a cluster's row of the fleet table shows, for the equality check."""
    r = figs["rate"]
    return {"gpus": figs["fleet"]["gpus"], "utilised_gpu_h": figs["fleet"]["utilised_gpu_h"],
            "r_f": r["r_f_per_1000_node_days"], "r_f_low": r["r_f_low"],
            "r_f_high": r["r_f_high"], "lost": float(figs["lost"]["gpu_hours_lost"].sum()),
            "ettr": figs["ettr"]["ettr"] or 0.0, "carbon_kg": figs["energy"]["carbon_kg"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 clusters, 3 days, 3 runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.clusters, args.days, args.runs = 2, 3, 3
    print(machine())
    opts = Options()
    w = lf.Window(NOW - timedelta(days=min(args.days, 30)), NOW, NOW)
    with tempfile.TemporaryDirectory(prefix="gpulens-fleet-") as tmp:
        lake = Path(tmp) / "lake"
        with Warehouse(Path(tmp) / "wh.duckdb") as wh:
            t0 = time.perf_counter()
            facts = build(wh, args.days, minute_days=0.1)
            print(f"built in {time.perf_counter() - t0:.1f} s: {facts}")
            t0 = time.perf_counter()
            for i in range(args.clusters):
                export_parquet(wh.reader(), lake, since=NOW - timedelta(days=args.days + 1),
                               until=NOW + timedelta(days=1), cluster=f"c{i}")
            print(f"exported {args.clusters} clusters in {time.perf_counter() - t0:.1f} s")
            ref = lf.cluster_figures(wh.reader(), w, opts)
            wh_times = repeat(lambda: lf.cluster_figures(wh.reader(), w, opts), args.runs)
        open_times = repeat(lambda: lf.open_cluster(str(lake), "c0").close(), args.runs)
        fleet = lf.Lake(lake)
        got = lf.cluster_figures(fleet.reader("c0"), w, opts)
        one_times = repeat(lambda: lf.cluster_figures(fleet.reader("c0"), w, opts), args.runs)
        all_times = repeat(lambda: lf.fleet_figures(fleet, w, opts), args.runs)
        same = all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in
                   zip(_scalars(got).values(), _scalars(ref).values(), strict=True))
    print(f"\n{'what':<44} {'p50 s':>8} {'p95 s':>8}")
    for label, t in (("one cluster's figures, from its warehouse", wh_times),
                     ("one cluster's figures, from the lake", one_times),
                     ("open one cluster's lake", open_times),
                     (f"the fleet view's read of {args.clusters} clusters", all_times)):
        print(f"{label:<44} {median(t):8.3f} {p95(t):8.3f}")
    print(f"\nthe lake's figures equal the warehouse's: {'yes' if same else 'NO'} "
          f"({_scalars(got)})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

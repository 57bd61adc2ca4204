"""Simulated warehouses for the lake tests (export, lake job, Spark): history written
in bulk, rolled up and classified (failures, GPU-hours lost) as the service would."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from collector.simulator import Cluster, SimConfig
from warehouse import Warehouse, analytics


def simulated_warehouse(path: Path, start: datetime, days: float, *, seed: int = 0,
                        racks: int = 1, interval_s: float = 60.0,
                        infra_failures_per_1000_node_days: float = 50.0,
                        classify: bool = False) -> Path:
    """A warehouse file at ``path`` holding ``days`` of a simulated cluster from
    ``start`` (samples every ``interval_s`` seconds), rolled up; ``classify``: the
    analytics refresh run at the end too (failures and their GPU-hours lost)."""
    end = start + timedelta(days=days)
    cluster = Cluster(SimConfig(racks=racks, interval_s=interval_s, seed=seed,
                                infra_failures_per_1000_node_days=(
                                    infra_failures_per_1000_node_days)), anchor=start)
    with Warehouse(path) as wh:
        cluster.backfill(lambda k, t: wh.ingest(k, t).result(), start, end, progress=False)
        wh.rollup().result()
        if classify:
            wh.write(lambda con: analytics.refresh(con, end, None)).result()
    return path


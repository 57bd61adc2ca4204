"""Clusters for the fleet view's tests (issue 18): each simulated with ``gpulens
simulate``'s function (history, rollups, the analytics refresh), then exported into a
lake under its cluster name with the export code the service and ``gpulens export
parquet`` run."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from gpulens.config import load
from gpulens.simulate import simulate
from warehouse import Warehouse
from warehouse.export import export_parquet


def simulated_cluster(db: Path, *, now: datetime, days: float, rate: float, seed: int,
                      racks: int = 1, nodes_per_rack: int = 2) -> Path:
    """A warehouse file ``db`` with ``days`` of a simulated cluster ending at ``now``
    (samples every 60 s), whose nodes fail from infrastructure at ``rate`` per 1,000
    node-days."""
    config = load(None).with_overrides(
        service__db=str(db), collect__interval_s=60.0, simulator__racks=racks,
        simulator__nodes_per_rack=nodes_per_rack, simulator__seed=seed,
        simulator__infra_failures_per_1000_node_days=rate)
    simulate(config, days=days, now=now, progress=False)
    return db


def export_cluster(db: Path, lake: Path, cluster: str, *, now: datetime, days: float):
    """Export the whole history of ``db`` (the ``days`` before ``now``, a day more on
    each side) into ``lake`` as ``cluster``; returns the ExportResult."""
    with Warehouse(db) as wh:
        return export_parquet(wh.reader(), lake, since=now - timedelta(days=days + 1),
                              until=now + timedelta(days=1), cluster=cluster)

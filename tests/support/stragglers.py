"""The stragglers' test warehouse (issue 15): the demo cluster simulated from 30 minutes
before live start to 100 minutes after, written through ingest and the 1-minute rollup.
Its live straggler runs from 2 minutes after live start to about 85 minutes after."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from collector.simulator import Cluster, SimConfig

ANCHOR = datetime(2026, 11, 2)
LIVE = ANCHOR + timedelta(days=1)
MIN = timedelta(minutes=1)
END = LIVE + 100 * MIN


def cluster() -> Cluster:
    return Cluster(SimConfig(), ANCHOR, LIVE)


def seed(path: Path, sim: Cluster | None = None) -> Path:
    """Write the warehouse file at ``path`` (no analytics refresh yet)."""
    from warehouse import Warehouse

    sim = sim or cluster()
    w = Warehouse(str(path))
    try:
        sim.backfill(lambda k, t: w.ingest(k, t).result(), LIVE - 30 * MIN, END,
                     progress=False)
        w.rollup().result()
    finally:
        w.close()
    return path

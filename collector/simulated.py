"""The simulated cluster as a source: it speaks the real wire formats.

Each cycle renders what the real sources would answer at that moment (dcgm-exporter
text for every node, ``squeue --json``, ``sacct --json``) and parses it with the same
collector code a real cluster goes through, so the demo exercises the real path.
History is written in bulk, straight from the simulator's tables.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from collector.dcgm import DcgmCollector
from collector.sanitize import DropCounter
from collector.simulator import Cluster, SimConfig
from collector.simulator.bmc import node_power
from collector.slurm import parse_sacct, parse_squeue


class SimulatedSource:
    """Collect from a simulated cluster through the real parsers."""

    name = "simulator"

    def __init__(self, config: SimConfig, anchor: datetime, live_start: datetime):
        self.cluster = Cluster(config, anchor=anchor, live_start=live_start)
        self.interval_s = config.interval_s  # seconds between collection cycles
        self.live_start = live_start
        self.dcgm = DcgmCollector(config.interval_s)
        self._sacct_since = live_start - timedelta(days=1)
        self.dropped = DropCounter()  # what the parsers refused, per reason (/healthz)
        self.targets_down: dict[str, str] = {}  # node -> why its page gave no GPU
        self.targets_total = 0  # nodes scraped in the latest cycle

    def topology(self) -> dict[str, pa.Table]:
        return self.cluster.topology()

    def history(self, ingest, start: datetime, end: datetime, *, progress: bool = True,
                on_chunk=None) -> None:
        """Write [start, end) in bulk through ``ingest(kind, table)``, which returns once
        the table is written. ``on_chunk(ts)``, if given, is called whenever every row
        before ``ts`` is written (the scheduler state of [start, end) comes last)."""
        self.cluster.backfill(ingest, start, end, progress=progress, on_chunk=on_chunk)

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """One cycle at tick ``ts``: telemetry, XID events, and scheduler state."""
        texts = self.cluster.dcgm_texts(ts)
        scrape = self.dcgm.collect(texts, ts)
        self.targets_total = len(texts)
        self.dropped.add(dict(scrape.dropped))
        self.targets_down = dict(scrape.errors)
        squeue = parse_squeue(self.cluster.squeue_json(ts), ts)
        sacct = parse_sacct(self.cluster.sacct_json(ts, self._sacct_since))
        self._sacct_since = ts
        batches = [("samples", scrape.samples), ("events", scrape.events),
                   ("node_power", node_power(scrape.samples, wire=True))]  # the BMCs
        for part in (sacct, squeue):  # squeue last: it is the newest view of running jobs
            batches += [("jobs", part.jobs), ("runs", part.runs), ("allocations", part.allocations)]
        return batches

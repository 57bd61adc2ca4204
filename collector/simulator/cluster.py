"""The simulated cluster: gpulens's embedded default source.

Deterministic for a (config, anchor): the workload is simulated lazily forward in time as
far as anyone asks, telemetry is computed per window from it, and the wire formats come
from :mod:`collector.wire`, the renderers the real-source tests also use.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import pyarrow as pa

from warehouse.clock import naive_utc
from warehouse.schema import SCHEMAS

from .bmc import node_power
from .config import SimConfig
from .incidents import Incident, Incidents, seconds_to_datetime
from .power import PowerModel
from .stragglers import Stragglers
from .telemetry import Telemetry
from .topology import Topology
from .views import (
    carbon_table,
    checkpoints_table,
    events_table,
    job_state,
    scheduler_tables,
)
from .workload import Workload

EPOCH = datetime(1970, 1, 1)


def to_us(t: datetime) -> int:
    """Microseconds since the epoch of a (naive UTC or zone-aware) datetime."""
    return (naive_utc(t) - EPOCH) // timedelta(microseconds=1)


def _locked(method):
    """Run ``method`` holding the cluster's lock: the workload is simulated lazily, and the
    service asks from two threads at once (history being written, live collection)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class Cluster:
    """A simulated GPU cluster (see :class:`SimConfig`) starting at ``anchor``.

    ``anchor`` is the start of simulated time (naive UTC); ``live_start`` (default: the
    anchor) is when live mode begins, the first rack cooling incident is scheduled
    ``config.first_incident_after_min`` after it. Safe to use from several threads.
    """

    def __init__(self, config: SimConfig, anchor: datetime, live_start: datetime | None = None):
        self._lock = threading.RLock()
        self.config = config = config.resolved()  # the profile's calibration (issue 16)
        self.anchor = naive_utc(anchor)
        self.live_start = naive_utc(live_start) if live_start is not None else self.anchor
        self.anchor_us = to_us(self.anchor)
        self.dt_us = int(round(config.interval_s * 1e6))
        midnight = self.anchor.replace(hour=0, minute=0, second=0, microsecond=0)
        day_offset_s = (self.anchor - midnight).total_seconds()
        self.topo = Topology(config)
        live_s = (self.live_start - self.anchor).total_seconds()
        self.inc = Incidents(config, self.topo, live_s)
        self.workload = Workload(config, self.topo, self.inc, day_offset_s)
        self.power = PowerModel(self.topo, self.inc, config.interval_s)
        self.stragglers_ = Stragglers(config, live_s)
        self.telemetry = Telemetry(self.topo, self.workload, self.power, self.anchor_us,
                                   day_offset_s, self.stragglers_)

    # --- time helpers ----------------------------------------------------------------
    def _sec(self, t: datetime) -> float:
        """Seconds since the anchor."""
        return (to_us(t) - self.anchor_us) / 1e6

    def _tick(self, t: datetime) -> int:
        """Index of the first tick at or after ``t``."""
        return -((self.anchor_us - to_us(t)) // self.dt_us)

    def _us(self, s: float) -> int:
        return self.anchor_us + int(round(s * 1e6))

    def tick_time(self, k: int) -> datetime:
        """The time of tick ``k`` (naive UTC)."""
        return self.anchor + timedelta(microseconds=k * self.dt_us)

    # --- tables ----------------------------------------------------------------------
    def topology(self) -> dict[str, pa.Table]:
        """{"racks", "nodes", "gpus"} tables."""
        return self.topo.tables()

    @_locked
    def samples(self, start: datetime, end: datetime) -> pa.Table:
        """One row per GPU for every tick ``start <= t < end`` (ticks at anchor + k *
        interval_s, none before the anchor), ordered by tick then GPU."""
        k0, k1 = max(0, self._tick(start)), self._tick(end)
        if k1 <= k0:
            return self.telemetry.window(0, 0)
        self.workload.advance(k1 * self.config.interval_s)
        return self.telemetry.window(k0, k1)

    @_locked
    def events(self, start: datetime, end: datetime) -> pa.Table:
        """GPU events (XID, ECC, lost node) with ``start <= ts < end``."""
        a, b = self._sec(start), self._sec(end)
        self.workload.advance(b)
        return events_table(self.workload, self.topo, a, b, self._us)

    @_locked
    def scheduler(self, now: datetime, since: datetime | None = None) -> dict[str, pa.Table]:
        """{"jobs", "runs", "allocations"} as Slurm shows them at ``now``; ``since``: only
        the jobs a ``sacct -S since -E now`` window names (pending or running at ``now``,
        or ended at or after ``since``), as the Slurm source reads them (its first read
        goes back ``slurm.lookback_h``, each later one to the read before)."""
        t = self._sec(now)
        self.workload.advance(t)
        jobs = [j for j in self.workload.jobs if j.submit_s < t]
        if since is not None:
            s = self._sec(since)
            jobs = [j for j in jobs if not j.done or j.runs[-1].end_s >= s]
        return scheduler_tables(self.workload, self.topo, jobs, t, self._us)

    def carbon(self, start: datetime, end: datetime) -> pa.Table:
        """Grid carbon intensity, one row per ``config.carbon_interval_min``."""
        slot = self.config.carbon_interval_min * 60.0
        return carbon_table(self.config.seed, slot, to_us(start), to_us(end))

    @_locked
    def checkpoints(self, start: datetime, end: datetime) -> pa.Table:
        """Checkpoints of pre-training/SFT runs completed with ``start <= ts < end``."""
        a, b = self._sec(start), self._sec(end)
        self.workload.advance(b)
        ckpt = self.config.checkpoint_interval_h * 3600.0
        return checkpoints_table(self.workload, ckpt, a, b, self._us)

    @_locked
    def incidents(self) -> list[Incident]:
        """The ground-truth incidents (cooling failures, the hot GPU, lemon nodes)."""
        return self.inc.ground_truth(self.topo, seconds_to_datetime(self.anchor))

    @_locked
    def stragglers(self, end: datetime) -> list[Incident]:
        """The injected stragglers that started before ``end`` (ground truth, issue 15):
        kind ``slow_gpu`` or ``slow_node``, the job, node (and GPU), interval and slowdown
        (``magnitude``, fraction of the clock)."""
        self.workload.advance(self._sec(end))
        to_dt, t, out = seconds_to_datetime(self.anchor), self.topo, []
        by_id = {r.run_id: r for r in self.workload.runs}
        for e in self.stragglers_.resolve(self.workload):
            run, g = by_id[e.run_id], e.gpu
            out.append(Incident(
                kind=e.kind, start=to_dt(e.start_s), end=to_dt(e.end_s),
                rack=t.rack_names[t.node_rack[e.node]], node=t.node_names[e.node],
                gpu_uuid=t.gpu_uuids[g] if g >= 0 else None,
                gpu_index=int(t.gpu_index[g]) if g >= 0 else None,
                magnitude=e.slowdown, job_id=run.job.job_id,
                detail=f"run {run.index} of {len(run.gpus)} GPUs, clock -{e.slowdown:.0%}"))
        return out

    def backfill(self, ingest: Callable[[str, pa.Table], None], start: datetime,
                 end: datetime, *, chunk: timedelta = timedelta(hours=6),
                 progress: bool = True,
                 on_chunk: Callable[[datetime], None] | None = None) -> None:
        """Write history: topology once, then samples, events and carbon chunk by chunk
        in time order, then the scheduler state at ``end``, through ``ingest(kind, t)``.
        ``on_chunk(e)`` is called after each chunk ``[t, e)`` was handed to ``ingest``."""
        from tqdm import tqdm

        for kind, table in self.topology().items():
            ingest(kind, table)
        n = max(0, math.ceil((end - start) / chunk))
        with tqdm(total=n, disable=not progress, desc="simulating history",
                  unit="chunk") as bar:
            t = start
            while t < end:
                e = min(t + chunk, end)
                samples = self.samples(t, e)
                ingest("samples", samples)
                ingest("node_power", node_power(samples))  # the BMCs (issue 21)
                ingest("events", self.events(t, e))
                ingest("carbon", self.carbon(t, e))
                if "checkpoints" in SCHEMAS:  # a newer kind of the warehouse contract
                    ingest("checkpoints", self.checkpoints(t, e))
                bar.update(1)
                if on_chunk is not None:
                    on_chunk(e)
                t = e
        for kind, table in self.scheduler(end).items():
            ingest(kind, table)

    # --- wire formats ------------------------------------------------------------------
    @_locked
    def dcgm_texts(self, ts: datetime) -> dict[str, str]:
        """dcgm-exporter /metrics text of every node at the tick at or after ``ts``."""
        from collector.wire import render_dcgm

        if not hasattr(self, "_model_of"):
            t = self.topo
            self._model_of = {u: t.models[p].name
                              for u, p in zip(t.gpu_uuids, t.gpu_partition, strict=True)}
        tick = self.samples(ts, ts + timedelta(microseconds=self.dt_us))
        return render_dcgm(tick, models=self._model_of)

    @_locked
    def _jobs_where(self, now: datetime, keep) -> dict[str, pa.Table]:
        t = self._sec(now)
        self.workload.advance(t)
        jobs = [j for j in self.workload.jobs if j.submit_s < t and keep(j, t)]
        return scheduler_tables(self.workload, self.topo, jobs, t, self._us)

    def squeue_json(self, now: datetime) -> str:
        """``squeue --json`` at ``now``: pending and running jobs."""
        from collector.wire import render_squeue

        tabs = self._jobs_where(now, lambda j, t: job_state(j, t)[0] in ("PENDING", "RUNNING"))
        return render_squeue(tabs["jobs"], tabs["runs"], tabs["allocations"], naive_utc(now))

    def sacct_json(self, now: datetime, since: datetime) -> str:
        """``sacct --json -D`` at ``now`` of jobs submitted, started or ended since
        ``since`` (every run of those jobs)."""
        from collector.wire import render_sacct

        s = self._sec(since)

        def changed(j, t):
            if s <= j.submit_s < t:
                return True
            return any(s <= r.start_s < t or s <= r.end_s <= t for r in j.runs)

        tabs = self._jobs_where(now, changed)
        return render_sacct(tabs["jobs"], tabs["runs"], tabs["allocations"])

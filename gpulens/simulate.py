"""Write a simulated warehouse without serving (``gpulens simulate``; issue 16).

The history goes through the path the service's first start takes: the configured
simulated source (``gpulens.sources``, which also records the simulated world in the
warehouse, so ``gpulens demo --db FILE`` continues it), ``source.history(...)`` in
batches, the rollups, then the analytics refresh, so the dashboard is ready at once.

A *profile* is a named set of simulator settings, declared once here (``PROFILES``):

- ``demo``: the demo's raised infrastructure failure rate, so failures show in a week
  of a small cluster; it is not a real fleet's rate;
- ``realistic``: Meta's published rate (2.34 to 6.50 failures per 1,000 node-days for
  RSC-2 and RSC-1; the middle, 4.4, here).

    summary = simulate(config, days=7, profile="realistic", progress=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpulens.config import Config, ConfigError
from warehouse import Warehouse, analytics, meta
from warehouse.clock import utcnow

PROFILE_KEY = meta.SIMULATOR_PROFILE_KEY  # the profile a simulated warehouse was made with
BATCH_ROWS = 250_000  # rows per write, like the service's history


@dataclass(frozen=True)
class Profile:
    """A named set of simulator settings (``settings``: setting name -> value)."""

    name: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("demo", "raised infrastructure failure rate (50 per 1,000 node-days) so "
            "failures show within a week of a small cluster; not a real fleet's rate",
            {"simulator.profile": "demo",
             "simulator.infra_failures_per_1000_node_days": 50.0}),
    Profile("realistic", "calibrated to Acme's published figures (NSDI'24), with Meta's "
            "hardware failure rate (2.34-6.50 per 1,000 node-days, RSC-1/RSC-2): 4.4",
            {"simulator.profile": "realistic",
             "simulator.infra_failures_per_1000_node_days": 4.4}),
)}


def with_profile(config: Config, name: str | None) -> Config:
    """``config`` with the settings of profile ``name`` (unchanged for None)."""
    if name is None:
        return config
    if name not in PROFILES:
        raise ConfigError(f"unknown simulator profile {name!r}; choose one of "
                          f"{', '.join(PROFILES)}")
    return config.with_overrides(**{k.replace(".", "__"): v
                                    for k, v in PROFILES[name].settings.items()})


def simulate(config: Config, *, days: float, profile: str | None = None,
             now: datetime | None = None, progress: bool = True) -> dict:
    """Write ``days`` of simulated history ending at ``now`` (naive UTC, default the
    clock) into ``config['service.db']``; return what was written: the profile, the
    window, rows per kind and the analytics refresh's counts."""
    from gpulens.sources import build_sources

    config = with_profile(config, profile).with_overrides(
        collect__source="simulator", simulator__history_days=days)
    now = utcnow() if now is None else now
    wh = Warehouse(config["service.db"], memory_limit_mb=config["warehouse.memory_limit_mb"])
    rows: dict[str, int] = {}
    try:
        (source,) = build_sources(config, wh, now=now)
        end = source.live_start
        start = end - timedelta(days=days)

        def ingest(kind, table):
            for offset in range(0, max(table.num_rows, 1), BATCH_ROWS):
                rows[kind] = rows.get(kind, 0) + wh.ingest(
                    kind, table.slice(offset, BATCH_ROWS)).result()

        source.history(ingest, start, end, progress=progress)
        wh.rollup().result()
        refreshed = wh.write(lambda con: analytics.refresh(con, end, config)).result()
        if profile is not None:
            wh.write(lambda con: meta.put(con, PROFILE_KEY, profile)).result()
    finally:
        wh.close()
    return {"profile": profile, "start": start, "end": end, "rows": rows,
            "analytics": refreshed}


def simulate_failures(sim, *, start: datetime, end: datetime, settings: Any = None,
                      db: str = ":memory:") -> Warehouse:
    """A warehouse (open; the caller closes it) with what failures are classified from
    and nothing else: the simulated cluster ``sim`` (a ``collector.simulator.SimConfig``)
    from ``start`` (its anchor) to ``end``: topology, jobs, runs, allocations and GPU
    events, classified by the analytics refresh with ``settings``. No telemetry, so it
    is fast: for counting failures too rare to count in a simulated week (the H100
    interruption causes of bench/fidelity.py, at a raised rate)."""
    from collector.simulator import Cluster

    cluster = Cluster(sim, anchor=start)
    wh = Warehouse(db)
    for kind, table in cluster.topology().items():
        wh.ingest(kind, table).result()
    wh.ingest("events", cluster.events(start, end)).result()
    for kind, table in cluster.scheduler(end).items():
        wh.ingest(kind, table).result()
    wh.write(lambda con: analytics.refresh(con, end, settings)).result()
    return wh

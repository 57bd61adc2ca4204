"""Build the configured source (composition only; the sources live in collector/)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from gpulens.config import Config
from warehouse import Warehouse, meta

ANCHOR_KEY = "simulator.anchor"
WORLD_KEY = "simulator.world"


class SimulatorMismatch(RuntimeError):
    """The database was filled by a simulator with other settings."""


def build_sources(config: Config, warehouse: Warehouse, *, now: datetime) -> list:
    """The configured sources (see collector/source.py), ready to collect from ``now`` on."""
    kind = config["collect.source"]
    if kind == "simulator":
        return [_simulator(config, warehouse, now)]
    raise ValueError(f"collect.source = {kind!r} is not supported")  # config validates first


def _simulator(config: Config, warehouse: Warehouse, now: datetime):
    from collector.simulated import SimulatedSource
    from collector.simulator import SimConfig

    sim = config.section("simulator")
    interval = config["collect.interval_s"]
    sim_config = SimConfig(
        racks=sim["racks"], nodes_per_rack=sim["nodes_per_rack"],
        gpus_per_node=sim["gpus_per_node"], seed=sim["seed"], interval_s=interval,
        infra_failures_per_1000_node_days=sim["infra_failures_per_1000_node_days"],
        checkpoint_interval_h=sim["checkpoint_interval_h"],
        restart_overhead_min=sim["restart_overhead_min"],
    )
    epoch = datetime(1970, 1, 1)
    live_start = now - (now - epoch) % timedelta(seconds=interval)
    # The simulated world keeps its start time in the warehouse, so a restarted service
    # continues the same world instead of inventing a new one.
    world = json.dumps({k: v for k, v in sim.items() if k != "history_days"} | {
        "interval_s": interval}, sort_keys=True)
    cur = warehouse.reader()
    stored, stored_world = meta.get(cur, ANCHOR_KEY), meta.get(cur, WORLD_KEY)
    if stored is None:
        anchor = live_start - timedelta(days=max(sim["history_days"], 0) + 1)
        anchor -= (anchor - epoch) % timedelta(seconds=interval)

        def remember(con):
            meta.put(con, ANCHOR_KEY, anchor.isoformat())
            meta.put(con, WORLD_KEY, world)

        warehouse.write(remember).result()
    elif stored_world != world:
        raise SimulatorMismatch(
            f"database {warehouse.path} holds a simulated cluster made with other "
            f"simulator settings ({stored_world}); pass another --db, or the same settings"
        )
    else:
        anchor = datetime.fromisoformat(stored)
    return SimulatedSource(sim_config, anchor=anchor, live_start=live_start)

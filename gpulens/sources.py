"""Build the configured source (composition only; the sources live in collector/)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from gpulens.config import Config, ConfigError
from warehouse import Warehouse, meta

ANCHOR_KEY = "simulator.anchor"
WORLD_KEY = "simulator.world"


class SimulatorMismatch(RuntimeError):
    """The database was filled by a simulator with other settings."""


def build_sources(config: Config, warehouse: Warehouse, *, now: datetime) -> list:
    """The configured sources (see collector/source.py), ready to collect from ``now`` on.

    ``collect.source`` lists them, comma-separated; each runs on its own schedule. The
    grid-intensity source runs besides when ``grid.providers`` names one.
    """
    kinds = [k.strip() for k in config["collect.source"].split(",") if k.strip()]
    builders = {"simulator": _simulator, "nvml": _nvml, "dcgm": _dcgm,
                "prometheus": _prometheus, "slurm": _slurm, "topology": _topology,
                "bmc": _bmc}
    unknown = [k for k in kinds if k not in builders]
    if unknown:  # config validates first
        raise ValueError(f"collect.source: {unknown} not supported")
    sources = [builders[k](config, warehouse, now) for k in dict.fromkeys(kinds)]
    if config["grid.providers"].strip():  # grid intensity runs beside any telemetry source
        sources.append(_grid(config, warehouse, now))
    return sources


def _require(config: Config, name: str, why: str) -> str:
    value = config[name]
    if not value:
        raise ConfigError(f"{config.source}: {name} is empty, but {why}")
    return value


def _nvml(config: Config, warehouse: Warehouse, now: datetime):
    from collector.nvml import NvmlSource

    return NvmlSource(node=config["nvml.node"], interval_s=config["collect.interval_s"])


def _dcgm(config: Config, warehouse: Warehouse, now: datetime):
    from collector.scrape import DcgmScrapeSource

    targets = _require(config, "dcgm.targets", "collect.source includes 'dcgm'")
    return DcgmScrapeSource(targets, interval_s=config["collect.interval_s"],
                            timeout_s=config["dcgm.timeout_s"], workers=config["dcgm.workers"],
                            ca_file=config["dcgm.ca_file"] or None, names=_node_names(config))


def _node_names(config: Config):
    """Exporter host names -> scheduler node names (docs/collectors.md, node names)."""
    from collector.nodenames import NodeNames

    n = config.section("nodes")
    try:
        return NodeNames(n["strip_domain"], n["rename_regex"], n["rename_to"])
    except ValueError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None


def _prometheus(config: Config, warehouse: Warehouse, now: datetime):
    from collector.prometheus import PrometheusSource, connect

    p = config.section("prometheus")
    url = _require(config, "prometheus.url", "collect.source includes 'prometheus'")
    client = connect(url, bearer_token=p["bearer_token"], username=p["username"],
                     password=p["password"], ca_file=p["ca_file"],
                     verify_tls=p["verify_tls"], timeout_s=p["timeout_s"])
    return PrometheusSource(
        client, interval_s=config["collect.interval_s"], selector=p["selector"],
        node_label=p["node_label"], names=_node_names(config),
        resume_from=meta.latest_sample_ts(warehouse.reader()),
        seen=meta.latest_per_gpu(warehouse.reader()) if p["pull"] == "federate" else None,
        max_catchup_s=p["max_catchup_h"] * 3600, chunk_s=p["chunk_min"] * 60,
        pull=p["pull"], federate_workers=p["federate_workers"],
        federate_gzip=p["federate_gzip"],
    )


def _slurm(config: Config, warehouse: Warehouse, now: datetime):
    from collector.slurm_source import SlurmSource
    from warehouse.mig import mig_layout

    s = config.section("slurm")
    return SlurmSource(
        interval_s=s["interval_s"], squeue=s["squeue"], sacct=s["sacct"],
        jobcomp_file=s["jobcomp_file"], jobcomp_tz=s["jobcomp_tz"],
        overlap_s=s["sacct_overlap_min"] * 60, lookback_s=s["lookback_h"] * 3600,
        gpus_per_node=s["gpus_per_node"] or None, job_type_regex=s["job_type_regex"] or None,
        mig_layout=lambda ts: mig_layout(warehouse.reader(), ts),  # MIG GRES (issue 21)
    )


def _bmc(config: Config, warehouse: Warehouse, now: datetime):
    from collector.bmc_source import BmcSource, target_list

    b = config.section("bmc")
    spec = _require(config, "bmc.targets", "collect.source includes 'bmc'")
    try:
        targets = target_list(spec)
    except ValueError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    return BmcSource(targets, interval_s=b["interval_s"], timeout_s=b["timeout_s"],
                     username=b["username"], password=b["password"], workers=b["workers"],
                     ipmitool=b["ipmitool"], cipher_suite=b["ipmi_cipher_suite"],
                     ca_file=b["ca_file"], verify_tls=b["verify_tls"],
                     ipmi_power_sensor=b["ipmi_power_sensor"])


def _grid(config: Config, warehouse: Warehouse, now: datetime):
    from collector.grid.source import GridSource, build_providers

    try:
        providers = build_providers(config.section("grid"), region=config["carbon.region"])
    except ValueError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    return GridSource(providers, region=config["carbon.region"],
                      interval_s=config["grid.interval_s"])


def _topology(config: Config, warehouse: Warehouse, now: datetime):
    from collector.topology import TopologySource

    t = config.section("topology")
    if not t["inventory"] and not t["slurm_conf"]:
        raise ConfigError(f"{config.source}: collect.source includes 'topology' but neither "
                          "topology.inventory nor topology.slurm_conf is set")
    return TopologySource(t["inventory"], t["slurm_conf"])


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
        restart_overhead_min=sim["restart_overhead_min"], profile=sim["profile"],
    )
    epoch = datetime(1970, 1, 1)
    live_start = now - (now - epoch) % timedelta(seconds=interval)
    # The simulated world keeps its start time in the warehouse, so a restarted service
    # continues the same world instead of inventing a new one.
    # (the demo profile is the world of warehouses made before profiles existed)
    world = json.dumps({k: v for k, v in sim.items() if k != "history_days"
                        and (k, v) != ("profile", "demo")} | {"interval_s": interval},
                       sort_keys=True)
    cur = warehouse.reader()
    stored, stored_world = meta.get(cur, ANCHOR_KEY), meta.get(cur, WORLD_KEY)
    if stored is None:
        anchor = live_start - timedelta(days=max(sim["history_days"], 0) + 1)
        anchor -= (anchor - epoch) % timedelta(seconds=interval)

        def remember(con):
            meta.put(con, ANCHOR_KEY, anchor.isoformat())
            meta.put(con, WORLD_KEY, world)
            meta.put(con, meta.SIMULATOR_PROFILE_KEY, sim["profile"])

        warehouse.write(remember).result()
    elif stored_world != world:
        raise SimulatorMismatch(
            f"database {warehouse.path} holds a simulated cluster made with other "
            f"simulator settings ({stored_world}); pass another --db, or the same settings"
        )
    else:
        anchor = datetime.fromisoformat(stored)
        if meta.get(cur, meta.SIMULATOR_PROFILE_KEY) is None:  # made before profiles
            warehouse.write(lambda con: meta.put(con, meta.SIMULATOR_PROFILE_KEY,
                                                 sim["profile"])).result()
    return SimulatedSource(sim_config, anchor=anchor, live_start=live_start)

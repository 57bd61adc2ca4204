"""Settings of the service, collection, warehouse and simulator."""

import re

from gpulens.settings.base import Setting, between, positive

SOURCE_KINDS = ("simulator", "nvml", "dcgm", "prometheus", "slurm", "topology", "bmc")

#: a cluster name: a label value, a hive partition value and a path part alike
CLUSTER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def cluster_name_ok(value: object) -> bool:
    """Whether ``value`` may name a cluster (see :data:`CLUSTER_NAME`; not . or ..)."""
    return (isinstance(value, str) and CLUSTER_NAME.fullmatch(value) is not None
            and value not in (".", ".."))


def _lake_tables_ok(value: str) -> bool:
    from warehouse.export import PARTITIONED, WHOLE  # imports this module: not at the top

    names = [t.strip() for t in value.split(",") if t.strip()]
    return all(t in PARTITIONED or t in WHOLE for t in names)


def _simulator_profile_ok(value: object) -> bool:
    from collector.simulator.config import PROFILES  # imports the settings: not at the top

    return value in PROFILES


SETTINGS: tuple[Setting, ...] = (
    Setting("cluster.name", str, "default",
            "Name of the cluster this gpulens watches: exported Parquet rows "
            "(partition cluster=NAME), notifications (label and field cluster), weekly "
            "reports and the dashboard header carry it, so several clusters stay apart "
            "(docs/scaling.md).",
            cluster_name_ok,
            "1 to 64 of the characters A-Z a-z 0-9 . _ -, e.g. rsc-1", max_len=64),
    Setting("lake.dir", str, "lake",
            "Folder of the Parquet lake (DIR/<table>/cluster=NAME/date=DAY/) that the "
            "running service writes on schedule (lake.interval_min) and when asked (POST "
            "/api/export; `gpulens export parquet` or `gpulens export lake` while the "
            "service owns the database). The service writes nowhere else: an export's "
            "folder must be this one or inside it."),
    Setting("lake.interval_min", float, 0.0,
            "Minutes between the service's scheduled lake exports into lake.dir (the "
            "recent days again, the days since the last run, then lake retention; "
            "docs/scaling.md). 0: none, only on request. `gpulens demo` uses 10 unless "
            "this is set.", between(0, 10080), "0 or a number of minutes up to 10080"),
    Setting("lake.reexport_days", int, 2,
            "UTC days before today that every scheduled lake export writes again (today "
            "always): their rows still change after midnight, as sacct records arrive up "
            "to slurm.lookback_h (24 h) late and the hourly rollup and the failure "
            "classification run after the day ends. Jobs, runs and allocations still open "
            "or ended within them are written again with their submit or start day.",
            between(0, 366), "an integer number of days from 0 to 366"),
    Setting("lake.tables", str, "",
            "Tables the scheduled lake export writes, separated by commas (e.g. "
            "'gpu_samples_1h,gpu_energy_1h,jobs,job_runs,failures,nodes,racks,gpus' to "
            "leave the raw and minute tiers in the warehouse); empty: every table.",
            _lake_tables_ok,
            "empty or a comma-separated list of tables gpulens exports (docs/scaling.md)"),
    Setting("lake.retention_days", int, 0,
            "Days of this cluster's lake partitions kept: each scheduled export deletes "
            "the day folders older than this (whole days, never today). 0: kept forever.",
            between(0, 36600), "0 (keep forever) or a whole number of days"),
    Setting("service.host", str, "127.0.0.1",
            "Address the web server binds. Keep 127.0.0.1 unless a reverse proxy or "
            "firewall protects the dashboard."),
    Setting("service.port", int, 8050, "TCP port of the dashboard and /healthz.",
            between(0, 65535), "an integer from 0 to 65535"),
    Setting("service.db", str, "gpulens.duckdb", "Path of the DuckDB warehouse file."),
    Setting("service.metrics_public", bool, True,
            "Serve /metrics (gpulens's derived figures for Prometheus) without a login, as "
            "/healthz; false: it needs a login when the dashboard has logins."),
    Setting("service.threads", int, 8, "Web server worker threads.",
            between(1, 64), "an integer from 1 to 64"),
    Setting("service.log_level", str, "INFO", "Logging level.",
            lambda v: v.upper() in {"DEBUG", "INFO", "WARNING", "ERROR"},
            "one of DEBUG, INFO, WARNING, ERROR"),
    Setting("warehouse.memory_limit_mb", int, 256,
            "DuckDB's memory limit for the warehouse, in MiB: its buffer pool (cached "
            "blocks) and query memory; past it DuckDB spills to a temporary file beside "
            "the database. 0 keeps DuckDB's own default, 80 % of RAM, which its cache "
            "fills. Sizing: docs/operations.md.",
            lambda v: v == 0 or v >= 64,
            "0 (DuckDB's default, 80 % of RAM) or a number of MiB from 64 up, e.g. 1024"),
    Setting("collect.source", str, "simulator",
            "Where telemetry and scheduler state come from: one or more of simulator, "
            "nvml, dcgm, prometheus, slurm, topology, bmc, separated by commas (e.g. "
            "'prometheus,slurm,topology'). Each runs on its own schedule and fails alone; "
            "see docs/collectors.md.",
            lambda v: bool(v.strip()) and all(
                p.strip() in SOURCE_KINDS for p in v.split(",") if p.strip()),
            "a comma-separated list of simulator, nvml, dcgm, prometheus, slurm, topology, "
            "bmc"),
    Setting("collect.interval_s", float, 15.0, "Seconds between collection cycles.",
            between(1, 3600), "a number of seconds from 1 to 3600"),
    Setting("rollup.interval_s", float, 60.0, "Seconds between rollup runs.",
            between(5, 3600), "a number of seconds from 5 to 3600"),
    Setting("retention.raw_days", float, 1.25,
            "Days of raw samples kept: alerts, the live pages, rollups and late or "
            "backfilled samples need minutes to hours; 1.25 leaves a whole day for alert "
            "backtests and the lake's export of yesterday 6 hours after midnight. Pages "
            "and reports read the rollups (docs/operations.md, Retention).",
            positive, "a positive number of days"),
    Setting("retention.mig_days", float, 3.0,
            "Days of per-MIG-instance samples (gpu_mig_samples) kept: a MIG job's part of "
            "its GPU's energy is computed from them whenever the analytics refresh "
            "recomputes an hour, so keep them longer than analytics.recheck_days (2).",
            positive, "a positive number of days"),
    Setting("retention.minute_days", float, 90.0, "Days of 1-minute rollups kept.",
            positive, "a positive number of days"),
    Setting("retention.hour_days", float, 730.0,
            "Days of 1-hour rollups and GPU events kept.", positive,
            "a positive number of days"),
    Setting("simulator.racks", int, 8, "Racks in the simulated cluster.",
            between(1, 2000), "an integer from 1 to 2000"),
    Setting("simulator.nodes_per_rack", int, 8, "Nodes per simulated rack.",
            between(1, 64), "an integer from 1 to 64"),
    Setting("simulator.gpus_per_node", int, 8, "GPUs per simulated node.",
            between(1, 16), "an integer from 1 to 16"),
    Setting("simulator.seed", int, 0, "Seed of the simulation (same seed, same cluster)."),
    Setting("simulator.profile", str, "demo",
            "Calibration of the simulated cluster: demo (the embedded demo's workload and "
            "telemetry) or realistic (fitted to Acme's published figures; docs/simulator.md). "
            "`gpulens simulate --profile` sets it with the failure rate.",
            _simulator_profile_ok, "demo or realistic"),
    Setting("simulator.history_days", float, 7.0,
            "Days of history written in bulk when the service starts on an empty "
            "database.", between(0, 400), "a number of days from 0 to 400"),
    Setting("simulator.infra_failures_per_1000_node_days", float, 50.0,
            "Infrastructure failure rate of the simulated fleet (Meta measured 2.34 to "
            "6.5; the demo raises it so failures show).", between(0, 10000),
            "a number from 0 to 10000"),
    Setting("simulator.checkpoint_interval_h", float, 2.0,
            "Hours between checkpoints of simulated training jobs.", positive,
            "a positive number of hours"),
    Setting("simulator.restart_overhead_min", float, 15.0,
            "Minutes from a failure until the requeued run is productive again.",
            between(0, 1440), "a number of minutes from 0 to 1440"),
)


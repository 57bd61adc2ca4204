"""Settings of the real collectors: NVML, dcgm-exporter, Prometheus, Slurm, topology.

A source is used when its name is in ``collect.source``; see docs/collectors.md.
"""

import re

from gpulens.settings.base import Setting, between, positive


def _ipmi_power_sensor_ok(value: str) -> bool:
    from collector.bmc import parse_sensor_choice  # imports the settings: not at the top

    try:
        parse_sensor_choice(value)
    except ValueError:
        return False
    return True


def _regex(value: str) -> bool:
    try:
        re.compile(value)
    except re.error:
        return False
    return True


SETTINGS: tuple[Setting, ...] = (
    Setting("nvml.node", str, "",
            "Node name for this host's GPUs read through NVML (empty: the hostname)."),
    Setting("dcgm.targets", str, "",
            "dcgm-exporter (or `gpulens agent`) endpoints: 'host:port' items separated by "
            "commas, or the path (or glob) of Prometheus file_sd JSON/YAML files, re-read "
            "when they change."),
    Setting("dcgm.timeout_s", float, 5.0, "Seconds one scrape may take before it counts "
            "as failed.", between(0.1, 300), "a number of seconds from 0.1 to 300"),
    Setting("dcgm.workers", int, 64, "Concurrent scrapes.", between(1, 1024),
            "an integer from 1 to 1024"),
    Setting("dcgm.ca_file", str, "", "CA bundle for https targets (empty: the system's)."),
    Setting("nodes.strip_domain", bool, False,
            "Name nodes by their short host name: gpu001.cluster.example -> gpu001 (exporter "
            "Hostname labels and scrape addresses; IP addresses are kept whole)."),
    Setting("nodes.rename_regex", str, "",
            "Regex matched against the whole exporter host name (after nodes.strip_domain); "
            "a match is renamed to nodes.rename_to, e.g. (gpu\\d+)-ib. Empty: no renaming.",
            _regex, "a Python regular expression"),
    Setting("nodes.rename_to", str, "",
            "What a host name matching nodes.rename_regex becomes; \\1 or \\g<name> insert "
            "its groups, e.g. \\1 for the Slurm node name."),
    Setting("prometheus.url", str, "",
            "Base URL of Prometheus or Thanos Query, e.g. http://prometheus:9090."),
    Setting("prometheus.selector", str, "",
            "Label matchers added to every query, e.g. job=\"dcgm\" (without braces)."),
    Setting("prometheus.node_label", str, "",
            "Label naming the node (empty: Hostname, else the host of instance)."),
    Setting("prometheus.bearer_token", str, "",
            "Bearer token (set it through GPULENS_PROMETHEUS_BEARER_TOKEN)."),
    Setting("prometheus.username", str, "", "User for HTTP basic auth (empty: none)."),
    Setting("prometheus.password", str, "",
            "Password for HTTP basic auth (set it through GPULENS_PROMETHEUS_PASSWORD)."),
    Setting("prometheus.ca_file", str, "", "CA bundle to verify Prometheus's TLS "
            "certificate (empty: the system's)."),
    Setting("prometheus.verify_tls", bool, True,
            "Verify Prometheus's TLS certificate (turn off only for testing)."),
    Setting("prometheus.timeout_s", float, 30.0, "Seconds one query may take.",
            between(1, 600), "a number of seconds from 1 to 600"),
    Setting("prometheus.pull", str, "federate",
            "How each cycle reads the newest samples: federate (GET /federate, the "
            "exposition text; Prometheus and VictoriaMetrics) or query (one instant query "
            "per field; Thanos and Mimir have no /federate, and a 404 there switches to "
            "query by itself). Catch-up after a gap reads Prometheus's raw samples at "
            "their scrape times under federate (as the pulls store them) and range "
            "queries on the step grid under query.",
            lambda v: v in ("federate", "query"), "federate or query"),
    Setting("prometheus.federate_workers", int, 4,
            "Concurrent /federate requests (one per DCGM field), each parsed as it "
            "arrives.", between(1, 64), "an integer from 1 to 64"),
    Setting("prometheus.federate_gzip", bool, False,
            "Ask for /federate answers gzipped: for slow links. Off, the store spends no "
            "CPU compressing and gpulens none inflating (~400 MB a pull at 100,000 GPUs)."),
    Setting("prometheus.max_catchup_h", float, 24.0,
            "After an outage, hours of history read back from Prometheus at most (keep it "
            "within Prometheus's retention).", between(0, 8760), "hours from 0 to 8760"),
    Setting("prometheus.chunk_min", float, 15.0,
            "Minutes of history one catch-up cycle reads (bounds memory per cycle).",
            between(0.1, 1440), "minutes from 0.1 to 1440"),
    Setting("slurm.interval_s", float, 30.0, "Seconds between reads of squeue and sacct.",
            between(1, 3600), "a number of seconds from 1 to 3600"),
    Setting("slurm.squeue", str, "squeue", "The squeue command (a path or a name on PATH)."),
    Setting("slurm.sacct", str, "sacct",
            "The sacct command; empty where accounting (slurmdbd) is off."),
    Setting("slurm.jobcomp_file", str, "",
            "Slurm's jobcomp/filetxt log (JobCompLoc), read when sacct is off or failing."),
    Setting("slurm.jobcomp_tz", str, "UTC",
            "Time zone of slurmctld, in which the jobcomp file's times are written."),
    Setting("slurm.sacct_overlap_min", float, 10.0,
            "Minutes each sacct read overlaps the previous one.", between(0, 1440),
            "minutes from 0 to 1440"),
    Setting("slurm.lookback_h", float, 24.0,
            "Hours of accounting read on the first cycle after a start.", positive,
            "a positive number of hours"),
    Setting("slurm.gpus_per_node", int, 0,
            "GPUs per node, to place sacct's whole-node runs on GPU indices (0: unknown).",
            between(0, 64), "an integer from 0 to 64"),
    Setting("slurm.job_type_regex", str, "",
            "Regex on the job name giving its type (group 'type' or the first group) when "
            "the comment has no gpulens:type=... tag, e.g. ^(pretrain|sft|eval|debug)[-_]."),
    Setting("topology.inventory", str, "",
            "Inventory file (.toml or .csv): racks with zone, row and floor position, and "
            "their nodes as host lists. It wins over topology.slurm_conf."),
    Setting("topology.slurm_conf", str, "",
            "Slurm's topology.conf: each leaf switch is a rack, its parent switch a zone."),
    Setting("bmc.targets", str, "",
            "BMCs measuring node power: items node=ipmi://host[:port] (DCMI over lanplus, "
            "else the sensor records) or "
            "node=redfish://host[:port] (https; http:// for plain HTTP; #id picks a chassis), "
            "separated by commas, or @path of a file of such items, one per line, re-read "
            "every cycle."),
    Setting("bmc.interval_s", float, 60.0, "Seconds between reads of the BMCs.",
            between(5, 3600), "a number of seconds from 5 to 3600"),
    Setting("bmc.timeout_s", float, 10.0, "Seconds one BMC may take to answer.",
            between(1, 120), "a number of seconds from 1 to 120"),
    Setting("bmc.workers", int, 16, "BMCs read at the same time.", between(1, 256),
            "an integer from 1 to 256"),
    Setting("bmc.username", str, "", "User for IPMI and Redfish."),
    Setting("bmc.password", str, "",
            "Password for IPMI and Redfish (set it through GPULENS_BMC_PASSWORD; ipmitool "
            "gets it in its environment, never on its command line)."),
    Setting("bmc.ipmitool", str, "ipmitool", "The ipmitool command (a path or a name on PATH)."),
    Setting("bmc.ipmi_cipher_suite", int, 17,
            "RMCP+ cipher suite for IPMI over lanplus (ipmitool -C): 17 (HMAC-SHA256, "
            "ipmitool's default) or 3 (HMAC-SHA1) for older BMCs.", between(0, 17),
            "an integer from 0 to 17"),
    Setting("bmc.ipmi_power_sensor", str, "auto",
            "Where IPMI BMCs that refuse DCMI (or whose DCMI power measurement is off) "
            "report node power in their sensor records: auto (the total sensor, such as "
            "'Pwr Consumption' or 'Total_Power', else the sum of the power supplies' input "
            "sensors) or sensor names separated by commas, summed, e.g. "
            "'PS1 Input Power,PS2 Input Power'.",
            _ipmi_power_sensor_ok, "auto, or sensor names separated by commas"),
    Setting("bmc.ca_file", str, "", "CA bundle for Redfish's TLS (empty: the system's)."),
    Setting("bmc.verify_tls", bool, True,
            "Verify Redfish BMCs' TLS certificates (turn off only for testing)."),
)

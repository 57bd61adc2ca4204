"""Configuration of the simulated cluster: sizes, rates and the GPU models it is built of.

Every knob has a default (the 512-GPU demo) and its unit in the comment beside it.
Times inside the simulator are seconds since the anchor; rates are stated per hour or
per 1,000 node-days as the literature states them (Meta: 2.34-6.5 failures per 1,000
node-days; the demo raises that so failures are visible within a day).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from gpulens.settings import setting_field


@dataclass(frozen=True)
class GpuModel:
    """A GPU model as NVML names it, with the numbers the power/thermal model needs."""

    name: str  # NVML product name
    tdp_w: float  # board power limit, watts
    memory_mib: float  # framebuffer, MiB
    idle_w: tuple[float, float]  # range of idle draw, watts
    max_clock_mhz: float  # SM clock when busy and unthrottled
    idle_clock_mhz: float  # SM clock when idle
    thermal_c_per_w: float  # GPU die temperature above inlet per watt, degrees C / W
    slowdown_c: float  # die temperature where thermal slowdown starts, degrees C


H100_SXM = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    tdp_w=700.0,
    memory_mib=81559.0,
    idle_w=(60.0, 70.0),
    max_clock_mhz=1980.0,
    idle_clock_mhz=345.0,
    thermal_c_per_w=0.07,
    slowdown_c=86.0,
)
A100_SXM = GpuModel(
    name="NVIDIA A100-SXM4-80GB",
    tdp_w=400.0,
    memory_mib=81920.0,
    idle_w=(50.0, 60.0),
    max_clock_mhz=1410.0,
    idle_clock_mhz=210.0,
    thermal_c_per_w=0.11,
    slowdown_c=85.0,
)

MODELS: dict[str, GpuModel] = {"H100": H100_SXM, "A100": A100_SXM}


@dataclass(frozen=True)
class SimConfig:
    """Size, workload and fault knobs of the simulated cluster (see units beside each)."""

    # named calibration (PROFILES below): its values replace the fields left at default
    profile: str = setting_field("simulator.profile")
    calibrated: bool = False  # True once resolved(): the profile's values are applied

    # --- size and layout
    racks: int = setting_field("simulator.racks")
    nodes_per_rack: int = setting_field("simulator.nodes_per_rack")
    gpus_per_node: int = setting_field("simulator.gpus_per_node")
    zones: int = 2
    racks_per_row: int = 4  # racks side by side in one floor row
    eval_rack_fraction: float = 0.25  # share of racks in the "eval" partition (A100)
    train_model: str = "H100"  # key of MODELS for the "train" partition
    eval_model: str = "A100"  # key of MODELS for the "eval" partition
    seed: int = setting_field("simulator.seed")
    interval_s: float = setting_field("collect.interval_s")  # sampling period, seconds

    # --- workload (target share of a partition's GPUs each job type keeps busy, 0-1)
    pretrain_load: float = 0.55  # of the train partition
    sft_load: float = 0.20  # of the train partition
    debug_load: float = 0.04  # of each partition
    eval_load: float = 0.50  # of the eval partition
    pretrain_work_h: float = 20.0  # median productive length of a pre-training job, hours
    users: int = 30  # number of distinct user names
    # run intensity ranges (0-1 of the way from idle to TDP) by job type
    pretrain_level: tuple[float, float] = (0.93, 1.0)
    sft_level: tuple[float, float] = (0.8, 0.93)
    eval_level: tuple[float, float] = (0.35, 0.75)
    debug_level: tuple[float, float] = (0.08, 0.35)
    fates: str = "demo"  # table of per-run outcome probabilities (jobs.FATES)
    late_framework: bool = False  # framework errors of training runs at any time, not early

    # --- telemetry
    inlet_c: float = 22.0  # air at the GPUs' heat sinks in the middle of a row, degrees C
    thermal_scale: float = 1.0  # multiplies each model's thermal resistance
    hbm_offset_c: tuple[float, float] = (3.0, 8.0)  # HBM above the die when busy, degrees C
    power_noise: float = 0.012  # sigma of a power reading's noise, share of TDP
    # training runs: one reading in this many falls in a communication wait (0: none)
    comm_every_ticks: int = 0
    comm_w_per_tdp: float = 0.25  # draw while waiting in a collective, share of TDP
    util_near_full: bool = False  # busy GPUs read GPU_UTIL near 100 % (DCGM counts a kernel)

    # --- failures
    # hardware/network faults hitting runs, per 1,000 node-days
    infra_failures_per_1000_node_days: float = setting_field(
        "simulator.infra_failures_per_1000_node_days")
    lemon_nodes: int = 1  # nodes with a raised fault rate (they pass health checks)
    lemon_factor: float = 8.0  # how many times more often a lemon node fails
    # pre-training/SFT checkpoint period, hours
    checkpoint_interval_h: float = setting_field("simulator.checkpoint_interval_h")
    # failure -> requeued run may start, minutes
    restart_overhead_min: float = setting_field("simulator.restart_overhead_min")
    # Acme's transient infrastructure errors (no XID, no repair): at a run's start (a
    # share of runs) and during multi-node runs (per 1,000 node-days)
    startup_infra_p: float = 0.0
    network_per_1000_node_days: float = 0.0
    # hardware interruptions of the train (H100) partition in the Llama 3 report's mix
    # instead of Acme's A100 taxonomy
    llama3_h100: bool = False
    max_restarts: int = 30  # requeues before a job is left FAILED
    node_repair_h: float = 2.0  # a node is down this long after a hardware fault, hours
    xid_hold_h: float = 1.0  # XID gauge clears after this if no repair follows, hours

    # --- incidents (ground truth; see incidents.py)
    first_incident_after_min: float = 3.0  # rack cooling failure this long after live start
    cooling_incident_every_h: float = 48.0  # recurrence of rack cooling failures, hours
    cooling_rise_c: tuple[float, float] = (10.0, 15.0)  # inlet rise range, degrees C
    cooling_ramp_min: float = 5.0  # minutes for the inlet to rise (and to fall back)
    cooling_hold_min: tuple[float, float] = (30.0, 60.0)  # plateau length range, minutes
    hot_gpu_factor: float = 1.5  # thermal resistance multiplier of the poorly cooled GPU
    confounders: bool = False  # warm afternoons, load bursts, drained racks (confounders.py)
    # stragglers in multi-node runs (issue 15; see stragglers.py)
    first_straggler_after_min: float = 2.0  # first straggler this long after live start
    straggler_every_h: float = 6.0  # recurrence of stragglers, hours
    straggler_hold_min: tuple[float, float] = (40.0, 90.0)  # episode length range, minutes
    straggler_slowdown: tuple[float, float] = (0.2, 0.35)  # clock slowdown range, fraction

    # --- carbon
    carbon_interval_min: float = 15.0  # one carbon-intensity row per this many minutes

    def resolved(self) -> SimConfig:
        """This configuration with its profile's values (PROFILES) in the fields still at
        their defaults: an explicit field wins over the profile. Applied once: change a
        field of the result with ``dataclasses.replace`` to set it to any value."""
        if self.calibrated:
            return self
        if self.profile not in PROFILES:
            raise ValueError(f"unknown simulator profile {self.profile!r}; choose one of "
                             f"{', '.join(PROFILES)}")
        defaults = {f.name: f.default for f in fields(self)}
        return replace(self, calibrated=True, **{
            k: v for k, v in PROFILES[self.profile].items() if getattr(self, k) == defaults[k]})

    @property
    def n_nodes(self) -> int:
        return self.racks * self.nodes_per_rack

    @property
    def n_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node


#: Calibrations by profile name: SimConfig field -> value (docs/simulator.md says why).
#: ``demo`` keeps the defaults: the embedded demo, its incidents and alerts as they were.
#: ``realistic`` is fitted to Acme's published characterisation (NSDI'24) with Meta's
#: hardware failure rate (set by the profile's infrastructure-rate setting) and the
#: Llama 3 report's H100 interruption causes (issue 16).
PROFILES: dict[str, dict[str, object]] = {
    "demo": {},
    "realistic": {
        # workload: pre-training holds most GPU time (Acme: 70-96 %), little SFT
        "pretrain_load": 0.80, "sft_load": 0.05, "debug_load": 0.02, "eval_load": 0.60,
        "pretrain_work_h": 14.0,
        "pretrain_level": (0.57, 0.72), "sft_level": (0.55, 0.8),
        "eval_level": (0.06, 0.18), "debug_level": (0.05, 0.2),
        "fates": "realistic", "late_framework": True,
        # telemetry: idle ~30 % of samples, busy GPUs at GPU_UTIL ~100 % whose power
        # drops while they wait in collectives; GPUs in air a few degrees above the room
        "inlet_c": 30.0, "thermal_scale": 0.68, "hbm_offset_c": (9.0, 14.0),
        "power_noise": 0.04, "comm_every_ticks": 3, "comm_w_per_tdp": 0.2,
        "util_near_full": True,
        # failures: Acme's transient infrastructure errors besides Meta's hardware rate
        "startup_infra_p": 0.05, "network_per_1000_node_days": 80.0,
        "llama3_h100": True,
    },
}

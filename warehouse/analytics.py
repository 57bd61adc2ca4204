"""The analytics refresh: derived ``failures``, ``gpu_energy_1h``, ``gpu_usage_1h`` (with
``run_usage_1h``, warehouse/run_usage.py), ``fleet_hours_1h`` (warehouse/fleet_hours.py)
and ``stragglers`` (warehouse/stragglers.py).

    wh.write(lambda con: refresh(con, now, config)).result()

Run it on the writer thread after the rollup job, every ``analytics.interval_s``. It is
incremental and idempotent: failed runs that are new or ended within
``analytics.recheck_days`` are classified and costed again (late XIDs, restarts and
checkpoints change their verdict); energy hours are recomputed where the raw samples
behind them changed (see warehouse/energy.py); usage hours (which job run held each GPU,
warehouse/usage.py) where they are new, or within ``recheck_days`` their samples or
allocations changed, or the idle threshold changed; the fleet's GPU-hours per hour where
they are new or, within ``recheck_days``, their samples or allocations changed. Running
it twice changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpulens.settings import setting_field, values_for
from warehouse.db import transaction
from warehouse.energy import refresh_energy
from warehouse.failures import load_rules, refresh_failures
from warehouse.fleet_hours import refresh_fleet_hours, resign_after_upgrade
from warehouse.stragglers import Params, refresh_stragglers
from warehouse.usage import refresh_usage
from warehouse.writer import yield_to_urgent


@dataclass(frozen=True)
class Options:
    """The analytics settings (declared in gpulens/settings/analytics.py, with their units
    and defaults; each field takes the default of the setting its metadata names)."""

    recheck_days: float = setting_field("analytics.recheck_days")
    rules_file: str = setting_field("failures.rules_file")
    window_before_min: float = setting_field("failures.window_before_min")
    window_after_min: float = setting_field("failures.window_after_min")
    lemon_min_failures: int = setting_field("failures.lemon_min_failures")
    lemon_p_value: float = setting_field("failures.lemon_p_value")
    checkpoint_interval_h: float = setting_field("goodput.checkpoint_interval_h")
    restart_warmup_min: float = setting_field("goodput.restart_warmup_min")
    node_overhead_w: float = setting_field("energy.node_overhead_w")
    pue: float = setting_field("energy.pue")
    idle_util_pct: float = setting_field("energy.idle_util_pct")
    max_counter_gap_s: float = setting_field("energy.max_counter_gap_s")
    region: str = setting_field("carbon.region")
    fallback_g_per_kwh: float = setting_field("carbon.fallback_g_per_kwh")
    max_age_h: float = setting_field("carbon.max_age_h")
    embodied_kg_per_gpu: float = setting_field("carbon.embodied_kg_per_gpu")
    gpu_lifetime_years: float = setting_field("carbon.gpu_lifetime_years")
    large_job_gpus: int = setting_field("reports.large_job_gpus")  # large jobs for ETTR
    straggler_min_lag: float = setting_field("stragglers.min_lag")
    straggler_z: float = setting_field("stragglers.z")
    straggler_hold_min: int = setting_field("stragglers.hold_min")

    @property
    def warmup_h(self) -> float:
        return self.restart_warmup_min / 60.0

    @classmethod
    def from_settings(cls, settings: Any = None) -> Options:
        """Options from a gpulens Config (or a mapping of dotted names); None: defaults."""
        if settings is None:
            return cls()
        if isinstance(settings, cls):
            return settings
        return cls(**values_for(cls, settings))


def refresh(con, now: datetime, settings: Any = None) -> dict:
    """Refresh the derived analytics tables up to ``now`` (naive UTC) on connection
    ``con`` (the writer's). Returns counts and the seconds taken: failures_classified,
    energy_hours, usage_hours, usage_pending (hours left to a later refresh), fleet_hours,
    fleet_pending (likewise); failures_s, energy_s, usage_s, fleet_s."""
    opts = Options.from_settings(settings)
    t0 = time.perf_counter()
    rules = load_rules(opts.rules_file)
    with transaction(con):
        classified = refresh_failures(
            con, now,
            recheck_from=now - timedelta(days=opts.recheck_days),
            rules=rules,
            interval_h=opts.checkpoint_interval_h,
            warmup_h=opts.warmup_h,
            window_before=timedelta(minutes=opts.window_before_min),
            window_after=timedelta(minutes=opts.window_after_min),
        )
    yield_to_urgent()  # between the stages too: live collection waits for one at most
    t1 = time.perf_counter()
    hours = refresh_energy(con, now, max_gap_s=opts.max_counter_gap_s)
    t2 = time.perf_counter()
    yield_to_urgent()
    resign_after_upgrade(con)  # before either kept table compares hashes (its keys)
    usage = refresh_usage(con, now, recheck_days=opts.recheck_days,
                          idle_pct=opts.idle_util_pct)
    yield_to_urgent()
    fleet = refresh_fleet_hours(con, now, recheck_days=opts.recheck_days,
                                idle_pct=opts.idle_util_pct)
    yield_to_urgent()
    t3 = time.perf_counter()
    slow = refresh_stragglers(con, now, Params(min_lag=opts.straggler_min_lag,
                                               z=opts.straggler_z,
                                               hold_min=opts.straggler_hold_min))
    return {"failures_classified": classified, "energy_hours": hours,
            "usage_hours": usage["usage_hours"], "usage_pending": usage["usage_pending"],
            **fleet, "stragglers": slow, "failures_s": round(t1 - t0, 3),
            "energy_s": round(t2 - t1, 3), "usage_s": usage["usage_s"],
            "stragglers_s": round(time.perf_counter() - t3, 3)}

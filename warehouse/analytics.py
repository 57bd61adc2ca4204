"""The analytics refresh: derived ``failures``, ``gpu_energy_1h`` and ``gpu_usage_1h``.

    wh.write(lambda con: refresh(con, now, config)).result()

Run it on the writer thread after the rollup job, every ``analytics.interval_s``. It is
incremental and idempotent: failed runs that are new or ended within
``analytics.recheck_days`` are classified and costed again (late XIDs, restarts and
checkpoints change their verdict); energy hours are recomputed where the raw samples
behind them changed (see warehouse/energy.py); usage hours (which job run held each GPU,
warehouse/usage.py) where they are new, or within ``recheck_days`` their samples or
allocations changed, or the idle threshold changed. Running it twice changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from gpulens.settings import setting_field
from warehouse.energy import refresh_energy
from warehouse.failures import load_rules, refresh_failures
from warehouse.usage import refresh_usage


@dataclass(frozen=True)
class Options:
    """The analytics settings (gpulens/settings/analytics.py), units in the names."""

    recheck_days: float = 2.0
    rules_file: str = ""
    window_before_min: float = 10.0
    window_after_min: float = 5.0
    lemon_min_failures: int = 3
    lemon_p_value: float = 0.01
    checkpoint_interval_h: float = 2.0
    restart_warmup_min: float = 0.0
    node_overhead_w: float = 2000.0
    pue: float = 1.2
    idle_util_pct: float = 5.0
    max_counter_gap_s: float = 300.0
    region: str = ""
    fallback_g_per_kwh: float = 481.0
    max_age_h: float = 24.0
    embodied_kg_per_gpu: float = 0.0
    gpu_lifetime_years: float = 5.0
    large_job_gpus: int = setting_field("reports.large_job_gpus")  # large jobs for ETTR

    @property
    def warmup_h(self) -> float:
        return self.restart_warmup_min / 60.0

    @classmethod
    def from_settings(cls, settings: Any = None) -> Options:
        """Options from a gpulens Config (or a mapping of dotted names); None: defaults.

        A setting ``section.key`` maps to the field ``key`` (e.g.
        ``goodput.checkpoint_interval_h`` -> ``checkpoint_interval_h``).
        """
        if settings is None:
            return cls()
        if isinstance(settings, cls):
            return settings
        names = {f.name for f in fields(cls)}
        values = {}
        for section in ("analytics", "failures", "goodput", "energy", "carbon"):
            for key in names:
                dotted = f"{section}.{key}"
                try:
                    values[key] = settings[dotted]
                except (KeyError, TypeError):
                    continue
        return cls(**values)


def refresh(con, now: datetime, settings: Any = None) -> dict:
    """Refresh the derived analytics tables up to ``now`` (naive UTC) on connection
    ``con`` (the writer's). Returns counts and the seconds taken: failures_classified,
    energy_hours, usage_hours, usage_pending (hours left to a later refresh); failures_s,
    energy_s, usage_s."""
    opts = Options.from_settings(settings)
    t0 = time.perf_counter()
    rules = load_rules(opts.rules_file)
    con.execute("BEGIN TRANSACTION")
    try:
        classified = refresh_failures(
            con, now,
            recheck_from=now - timedelta(days=opts.recheck_days),
            rules=rules,
            interval_h=opts.checkpoint_interval_h,
            warmup_h=opts.warmup_h,
            window_before=timedelta(minutes=opts.window_before_min),
            window_after=timedelta(minutes=opts.window_after_min),
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    t1 = time.perf_counter()
    hours = refresh_energy(con, now, max_gap_s=opts.max_counter_gap_s)
    t2 = time.perf_counter()
    usage = refresh_usage(con, now, recheck_days=opts.recheck_days,
                          idle_pct=opts.idle_util_pct)
    return {"failures_classified": classified, "energy_hours": hours,
            "usage_hours": usage["usage_hours"], "usage_pending": usage["usage_pending"],
            "failures_s": round(t1 - t0, 3),
            "energy_s": round(t2 - t1, 3), "usage_s": usage["usage_s"]}

"""Settings of the reliability, goodput, energy and carbon analytics (warehouse/analytics.py)."""

from gpulens.settings.base import Setting, between, positive


def _nonneg(v) -> bool:
    return v >= 0


SETTINGS: tuple[Setting, ...] = (
    Setting("analytics.interval_s", float, 300.0,
            "Seconds between refreshes of the derived analytics tables (failures, energy, "
            "GPU usage per job run and hour).",
            between(10, 86400), "a number of seconds from 10 to 86400"),
    Setting("analytics.recheck_days", float, 2.0,
            "Failed runs that ended this many days before now are classified again at "
            "each refresh (late XIDs, restarts and checkpoints change their verdict).",
            between(0, 365), "a number of days from 0 to 365"),
    Setting("failures.rules_file", str, "",
            "CSV of log rules (pattern, category, reason) matched against failed runs' "
            "log tails (RE2, case-insensitive, first match wins; a rule whose pattern RE2 "
            "rejects is left out with a warning); empty: the rules shipped in "
            "warehouse/data/failure_rules.csv."),
    Setting("failures.window_before_min", float, 10.0,
            "Minutes before a run ended in which XIDs and GPU events on its GPUs count as "
            "its evidence (Meta's attribution window).", between(0, 1440),
            "a number of minutes from 0 to 1440"),
    Setting("failures.window_after_min", float, 5.0,
            "Minutes after a run ended in which XIDs and GPU events still count.",
            between(0, 1440), "a number of minutes from 0 to 1440"),
    Setting("failures.lemon_min_failures", int, 3,
            "Infrastructure failures a node needs before it can be called a lemon.",
            between(1, 1000), "an integer from 1 to 1000"),
    Setting("failures.lemon_p_value", float, 0.01,
            "A node is a lemon when its failure count is this unlikely under the fleet's "
            "rate (Poisson tail probability).", between(0, 1), "a number from 0 to 1"),
    Setting("goodput.checkpoint_interval_h", float, 2.0,
            "Hours between checkpoints assumed for jobs without recorded checkpoints; a "
            "failure then loses half of it on average.", positive, "a positive number of hours"),
    Setting("goodput.restart_warmup_min", float, 0.0,
            "Minutes a restarted run needs (loading the checkpoint, warming up) before it "
            "is productive, added to the wait for the next run.", between(0, 1440),
            "a number of minutes from 0 to 1440"),
    Setting("energy.node_overhead_w", float, 2000.0,
            "Non-GPU power of a node (CPUs, memory, NICs, fans), watts, used where no "
            "measured node power exists.", _nonneg, "a number of watts, 0 or more"),
    Setting("energy.pue", float, 1.2,
            "Power usage effectiveness of the facility (facility / IT energy) where no "
            "measured PUE series exists.", between(1, 5), "a number from 1 to 5"),
    Setting("energy.idle_util_pct", float, 5.0,
            "An allocated GPU whose utilisation stays below this (percent, 1-minute "
            "maximum) counts as allocated but idle.", between(0, 100),
            "a number from 0 to 100"),
    Setting("energy.max_counter_gap_s", float, 300.0,
            "Longest gap between two samples across which the energy counter's delta is "
            "trusted; longer gaps fall back to power x interval.", positive,
            "a positive number of seconds"),
    Setting("carbon.region", str, "",
            "Grid region of the site, an ISO 3166 code (e.g. DE) or an Electricity Maps "
            "zone (e.g. US-CAL-CISO): selects imported intensity series and the row of the "
            "shipped annual table, warehouse/data/grid_intensity_{defaults,zones}.csv (a "
            "zone it lacks takes its country's)."),
    Setting("carbon.fallback_g_per_kwh", float, 481.0,
            "Carbon intensity (gCO2e/kWh) when no series and no regional default applies "
            "(world average 2023, Ember).", _nonneg, "a number, 0 or more"),
    Setting("carbon.max_age_h", float, 24.0,
            "An intensity reading older than this (hours) no longer stands for the present; "
            "the regional default applies.", positive, "a positive number of hours"),
    Setting("carbon.embodied_kg_per_gpu", float, 0.0,
            "Embodied (manufacturing) carbon per GPU including its share of the server, "
            "kgCO2e; 0 leaves embodied carbon out.", _nonneg, "a number, 0 or more"),
    Setting("carbon.gpu_lifetime_years", float, 5.0,
            "Years over which embodied carbon is amortised.", positive,
            "a positive number of years"),
    Setting("stragglers.min_lag", float, 0.05,
            "A GPU of a multi-node run lags when its SM clock (or its power and SM activity "
            "both) is at least this fraction below the run's median in a minute "
            "(warehouse/stragglers.py).", between(0, 1), "a number from 0 to 1"),
    Setting("stragglers.z", float, 3.5,
            "A lagging GPU is also at least this many robust standard deviations "
            "(1.4826 x MAD) below its run's median in that minute.",
            positive, "a positive number"),
    Setting("stragglers.hold_min", int, 5,
            "Lagging minutes a node needs before it counts as a straggler (shorter lags "
            "are noise).", between(1, 1440), "an integer from 1 to 1440"),
)

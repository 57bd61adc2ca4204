"""gpulens's own derived figures as one snapshot, for ``/metrics`` (gpulens/exporter.py).

What only gpulens computes, for teams that chart in Grafana (issue 19): GPU-hours lost
by failure category, the fleet's infrastructure failure rate r_f with its 95 % interval,
the ETTR of the large jobs running now, energy and carbon, and the alerts firing. Every
figure comes from the function its page uses (one definition, docs/analytics.md), read
from the tables the analytics refresh keeps, so a snapshot costs a few small queries.

Windows: losses, energy and carbon over the last :data:`WINDOW_DAYS` days up to ``now``;
r_f over :func:`warehouse.queries.failures.rate_window` (at least 30 days or 10
failures). Units: GPU-hours, failures per 1,000 node-days, kWh, kg CO2e, 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from warehouse.analytics import Options
from warehouse.queries import energy as qe
from warehouse.queries import failures as qf
from warehouse.queries import goodput as qg

WINDOW_DAYS = 7.0

_FIRING_SQL = """
SELECT rule, severity, count(*) AS alerts FROM alerts WHERE state = 'firing'
GROUP BY rule, severity ORDER BY rule, severity
"""

#: What says the analytics refresh ran again (a snapshot is cached until it changes).
_REFRESH_MARK_SQL = """
SELECT (SELECT max(classified_at) FROM failures), (SELECT max(ts) FROM gpu_energy_1h),
       (SELECT max(ts) FROM gpu_usage_hours)
"""


@dataclass
class Figures:
    """One snapshot; see the module docstring for windows and units."""

    now: datetime
    window_days: float
    lost_gpu_hours: dict[str, float] = field(default_factory=dict)  # category -> GPU-h
    failed_runs: dict[str, int] = field(default_factory=dict)  # category -> runs
    rate: dict = field(default_factory=dict)  # failures, node_days, r_f, low, high, days
    large_jobs: list[dict] = field(default_factory=list)  # running: job_id, user, gpus, ettr
    large_ettr: float | None = None  # GPU-weighted ETTR of the running large jobs
    large_job_gpus: int = 0
    energy: dict[str, float] = field(default_factory=dict)  # gpu/it/facility kWh, carbon
    alerts_firing: list[dict] = field(default_factory=list)  # rule, severity, alerts


def refresh_mark(cur) -> tuple:
    """A value that changes whenever the analytics refresh wrote new figures."""
    return tuple(cur.execute(_REFRESH_MARK_SQL).fetchall()[0])


def alerts_firing(cur) -> list[dict]:
    """Alerts firing now, counted per rule and severity."""
    return cur.execute(_FIRING_SQL).df().to_dict("records")


def figures(reader, *, now: datetime, opts: Options | None = None,
            window_days: float = WINDOW_DAYS) -> Figures:
    """The snapshot at ``now`` (naive UTC); ``reader`` returns a fresh cursor."""
    opts = opts or Options()
    start = now - timedelta(days=window_days)
    out = Figures(now=now, window_days=window_days, large_job_gpus=opts.large_job_gpus)
    lost = qf.failures_by(reader(), start=start, end=now, by="category")
    out.lost_gpu_hours = {str(r.category): float(r.gpu_hours_lost or 0.0)
                          for r in lost.itertuples()}
    out.failed_runs = {str(r.category): int(r.failures) for r in lost.itertuples()}
    r_start, r_end = qf.rate_window(reader(), end=now)
    rate = qf.failure_rate(reader(), start=r_start, end=r_end, job_gpus=())
    out.rate = {"failures": rate["failures"], "node_days": rate["node_days"],
                "r_f": rate["r_f_per_1000_node_days"], "low": rate["r_f_low"],
                "high": rate["r_f_high"], "days": (r_end - r_start).total_seconds() / 86400}
    jobs = qg.large_jobs(reader(), start=now - timedelta(seconds=1), end=now, now=now,
                         opts=opts)
    running = jobs[~jobs["finished"].astype(bool)] if len(jobs) else jobs
    out.large_jobs = [{"job_id": str(r.job_id), "user_name": str(r.user_name),
                       "gpus": int(r.gpus or 0), "ettr": float(r.ettr)}
                      for r in running.itertuples() if r.ettr == r.ettr]  # not NaN
    out.large_ettr = qg.ettr_summary(running)["ettr"]
    fleet = qe.energy_by(reader(), start=start, end=now, by="fleet", opts=opts)
    row = fleet.iloc[0] if len(fleet) else {}
    out.energy = {k: float(row.get(k) or 0.0) if len(fleet) else 0.0
                  for k in ("gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg")}
    out.alerts_firing = alerts_firing(reader())
    return out

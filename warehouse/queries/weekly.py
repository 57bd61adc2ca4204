"""The numbers of the weekly report: every section's figures for one week (issue #7).

    nums = week_numbers(wh.reader, start=start, end=end, now=now, opts=Options())

``reader`` is a callable returning a fresh cursor (``Warehouse.reader``): each query
function gets its own and drops it. Weeks are ISO weeks, Monday 00:00 to Monday 00:00 in
the report's time zone, turned into the naive UTC ``[start, end)`` the tables use
(:func:`week_range`); a week still in progress ends at ``now``.

Every figure a page also shows comes from the page's own function (one definition,
docs/analytics.md "One figure, one definition"): GPU-hours lost from the failures table,
idle energy and allocated-but-idle GPU-hours from
:func:`warehouse.queries.energy.idle_energy`, job and user energy from
:func:`warehouse.queries.energy.run_energy` (both read the hours of ``gpu_usage_1h``
the analytics refresh keeps, the latter its sums per run, ``run_usage_1h``), large jobs' ETTR from
:func:`warehouse.queries.goodput.large_jobs`. Computed here from the 1-hour tier:

- :func:`fleet_hours`: reporting, allocated, utilised and throttled GPU-hours (per hour in
  ``fleet_hours_1h``, kept by the analytics refresh: warehouse/fleet_hours.py);
- :func:`alerts_fired`: thermal alerts that fired in the week, per rule and severity.
Units are in the names: GPU-hours (``_gpu_h``), kWh, kg CO2e, hours.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from gpulens.settings import default
from warehouse import fleet_hours as hourly
from warehouse import placement, placement_runs, placement_waits
from warehouse.analytics import Options
from warehouse.queries import energy as qe
from warehouse.queries import failures as qf
from warehouse.queries import goodput as qg
from warehouse.queries import goodput_carbon as gc
from warehouse.queries import stragglers as qs
from warehouse.queries import thermal as qt
from warehouse.queries import utilisation as qu

WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
#: A week whose telemetry covered less of its installed GPU-hours (percent) is not
#: compared against: its figures count only the covered part (issue 19: W47 against a
#: first week of 1.1 % coverage read "+8,485 % energy").
MIN_COMPARABLE_COVERAGE_PCT = 90.0
MTTF_JOB_GPUS = (1024, 4096)

# ----------------------------------------------------------------------------- weeks


def parse_week(week: str) -> date:
    """The Monday of an ISO week written ``2026-W47``; ValueError when malformed."""
    m = WEEK.match(week.strip())
    if not m:
        raise ValueError(f"week {week!r}: expected an ISO week like 2026-W47")
    try:
        return date.fromisocalendar(int(m[1]), int(m[2]), 1)
    except ValueError:
        raise ValueError(f"week {week!r}: {m[1]} has no week {int(m[2])}") from None


def week_name(monday: date) -> str:
    """``2026-W47`` for any day of that ISO week."""
    year, wk, _ = monday.isocalendar()
    return f"{year}-W{wk:02d}"


def previous_week(week: str) -> str:
    return week_name(parse_week(week) - timedelta(days=7))


def week_range(week: str, tz: str = "UTC") -> tuple[datetime, datetime]:
    """``[start, end)`` of the ISO week as naive UTC: Monday 00:00 to Monday 00:00 in ``tz``."""
    monday = parse_week(week)
    zone = ZoneInfo(tz)

    def utc(d: date) -> datetime:
        local = datetime(d.year, d.month, d.day, tzinfo=zone)
        return local.astimezone(UTC).replace(tzinfo=None)

    return utc(monday), utc(monday + timedelta(days=7))


def last_complete_week(now_utc: datetime, tz: str = "UTC") -> str:
    """The most recent ISO week (in ``tz``) that ended at or before ``now_utc`` (naive)."""
    local = now_utc.replace(tzinfo=UTC).astimezone(ZoneInfo(tz))
    return week_name(local.date() - timedelta(days=7))


# ----------------------------------------------------------------------------- SQL

#: Installed GPUs: the GPUs table's, else the nodes' GPU counts.
_GPUS_SQL = """
SELECT coalesce(nullif((SELECT count(*) FROM gpus), 0), (SELECT sum(gpus) FROM nodes), 0)
"""

#: The allocations' intervals within [$start, $end), microseconds, per GPU (``g``: a
#: number per node and GPU index), for :func:`scheduled_gpu_hours`.
_HELD_SQL = """
WITH a AS (
    SELECT node, gpu_index, epoch_us(greatest(start_ts, $start::TIMESTAMP)) AS s,
           epoch_us(least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP)) AS e
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
k AS (SELECT node, row_number() OVER (ORDER BY node) AS k FROM (SELECT DISTINCT node FROM a))
SELECT k.k * 65536 + (a.gpu_index + 32768) AS g, a.s, a.e FROM a JOIN k USING (node)
ORDER BY g, s
"""

_ALERTS_SQL = """
SELECT rule, severity, count(*) AS alerts, count(DISTINCT rack) AS racks,
       max(peak) AS peak, any_value(unit) AS unit
FROM alerts WHERE fired_at >= $start AND fired_at < $end
GROUP BY rule, severity ORDER BY alerts DESC, rule
"""

_ALERT_RACKS_SQL = """
SELECT rack, count(*) AS alerts FROM alerts
WHERE fired_at >= $start AND fired_at < $end AND rack IS NOT NULL
GROUP BY rack ORDER BY alerts DESC, rack LIMIT $limit
"""


def _f(v) -> float:
    return 0.0 if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def fleet_hours(cur, *, start: datetime, end: datetime) -> dict:
    """GPU-hours of the week from the 1-hour tier (see module docstring): gpus
    (installed), scheduled_gpu_h (GPU-hours some allocation held, each once however many
    jobs shared the GPU; with or without telemetry),
    reporting_gpu_h, allocated_gpu_h and utilised_gpu_h (with telemetry),
    throttled_gpu_h; the last four per hour from ``fleet_hours_1h`` where the analytics
    refresh holds the week (warehouse/fleet_hours.py, issue 17)."""
    gpus = cur.execute(_GPUS_SQL).fetchone()[0]
    out = {k: _f(v) for k, v in hourly.fleet_hours(cur, start=start, end=end).items()}
    return {"gpus": int(gpus or 0),
            "scheduled_gpu_h": scheduled_gpu_hours(cur, start=start, end=end), **out}


def scheduled_gpu_hours(cur, *, start: datetime, end: datetime) -> float:
    """GPU-hours of ``[start, end)`` some allocation held: per GPU the union of its
    allocations' intervals, so a GPU shared by several jobs at once (shards, MPS, MIG
    instances, time-slicing; issue 21) counts each hour once. Per GPU by start, each
    interval adds what passes the latest end before it, in integer microseconds (issue
    17: a window over every allocation row in SQL took 0.37 s of CPU a 24,576-GPU week;
    its sum of seconds also varied in its last digits from run to run).

    The rows come sorted by DuckDB (which spills what its memory limit does not hold)
    and are summed in numpy :data:`HELD_BATCH_ROWS` at a time, each batch going on from
    the last GPU and latest end of the one before: a 24,576-GPU week's 4.8 M allocation
    rows fetched whole and sorted in numpy took the report ~410-660 MiB above its base,
    so ~130-300 MiB, DuckDB's pool included (issue 17)."""
    span = int((end - start) / timedelta(microseconds=1)) + 1  # e - start in [0, span)
    rows = max(1, min(HELD_BATCH_ROWS, (2**62) // max(span, 1)))  # rank x span fits
    total, last_g, last_end = 0, None, 0
    reader = cur.sql(_HELD_SQL, params={"start": start, "end": end}).to_arrow_reader(rows)
    for batch in reader:
        for offset in range(0, batch.num_rows, rows):
            part = batch.slice(offset, rows)
            g, s, e = (np.asarray(part.column(c).to_numpy(), np.int64) for c in ("g", "s", "e"))
            held, last_g, last_end = _held_us(g, s, e, last_g, last_end, base=_us(start),
                                              span=span)
            total += held
    return total / 3.6e9


#: Allocation rows :func:`scheduled_gpu_hours` sums at a time (fewer where the window is
#: so long that a batch's GPU ranks times its span would not fit in 63 bits).
HELD_BATCH_ROWS = 1 << 20


def _us(ts: datetime) -> int:
    """``ts`` (naive UTC) as microseconds since the epoch, as DuckDB's ``epoch_us``."""
    return (ts - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _held_us(g: np.ndarray, s: np.ndarray, e: np.ndarray, last_g, last_end: int, *,
             base: int, span: int) -> tuple[int, object, int]:
    """One batch of :func:`scheduled_gpu_hours`'s rows (sorted by GPU ``g``, then start
    ``s``; ends ``e``; microseconds within ``[base, base + span)``): the microseconds
    they add to the union, and the batch's last GPU and the latest end on it so far for
    the next batch (``last_g`` None: the first batch). The running latest end per GPU is
    one cumulative maximum over the ends lifted by each GPU's rank times ``span``."""
    n = len(g)
    if not n:
        return 0, last_g, last_end
    new = np.empty(n, bool)
    new[0] = last_g is None or g[0] != last_g
    np.not_equal(g[1:], g[:-1], out=new[1:])
    lift = np.cumsum(new) * span
    latest = np.maximum.accumulate(lift + (e - base)) - lift + base  # ends so far
    if not new[0]:  # the first GPU goes on from the batch before
        same = int(np.argmax(new)) if new.any() else n
        np.maximum(latest[:same], last_end, out=latest[:same])
    prior = np.empty(n, np.int64)  # the latest end before each interval
    prior[0] = s[0] if new[0] else last_end
    prior[1:] = latest[:-1]
    before = np.where(new, s, np.maximum(prior, s))
    return int(np.maximum(0, e - before).sum()), g[-1], int(latest[-1])


def comparable(nums: dict) -> bool:
    """Whether a week's numbers (of :func:`week_numbers`) may be compared against: its
    telemetry covered at least :data:`MIN_COMPARABLE_COVERAGE_PCT` of its GPU-hours."""
    cov = nums["fleet"].get("coverage_pct")
    return cov is not None and cov >= MIN_COMPARABLE_COVERAGE_PCT


def hottest_racks(temps: pd.DataFrame) -> pd.DataFrame:
    """Racks hottest first: by the 95th percentile of their GPUs' temperature, then the
    peak, then the rack's name (ties never reorder between the summary and the table)."""
    return temps.sort_values(["p95_c", "max_c", "rack"], ascending=[False, False, True],
                             kind="mergesort").reset_index(drop=True)


def alerts_fired(cur, *, start: datetime, end: datetime) -> pd.DataFrame:
    """Thermal alerts that fired in ``[start, end)``: rule, severity, alerts, racks,
    peak (in the rule's unit), unit."""
    return cur.execute(_ALERTS_SQL, {"start": start, "end": end}).df()


def alert_racks(cur, *, start: datetime, end: datetime, limit: int = 5) -> pd.DataFrame:
    """Racks with the most alerts fired in ``[start, end)``: rack, alerts."""
    return cur.execute(_ALERT_RACKS_SQL, {"start": start, "end": end, "limit": limit}).df()


def _failure_carbon(cur, energy: dict, *, start: datetime, end: datetime,
                    opts: Options) -> dict:
    """Facility kWh and kg CO2e of the GPU-hours lost to the week's failures:
    the Energy page's figures (warehouse/queries/energy.py:failure_carbon: each at its
    run's energy per GPU-hour, else the fleet's per reporting GPU-hour of the week; issue
    17: the report priced each run over the week only, a run begun before it otherwise
    than the page and the Job page)."""
    df = qe.failure_carbon(cur, start=start, end=end, opts=opts, by="category",
                           fleet=(energy["facility_kwh_per_gpu_h"], energy["kg_per_gpu_h"]))
    return {"lost_kwh": float(df["lost_kwh"].sum()),
            "lost_carbon_kg": float(df["lost_carbon_kg"].sum())}


def idle_figures(cur, *, start: datetime, end: datetime, idle_util_pct: float) -> dict:
    """The Energy page's idle split (:func:`warehouse.queries.energy.idle_energy`) as
    scalars: unallocated_gpu_h / _kwh and idle_allocated_gpu_h / _kwh (GPU-hours, kWh)."""
    df = qe.idle_energy(cur, start=start, end=end, idle_util_pct=idle_util_pct)
    df = df.set_index("state")

    def get(state: str, col: str) -> float:
        return _f(df.loc[state, col]) if state in df.index else 0.0

    return {"unallocated_gpu_h": get("unallocated", "gpu_hours"),
            "unallocated_kwh": get("unallocated", "gpu_kwh"),
            "idle_allocated_gpu_h": get("allocated_idle", "gpu_hours"),
            "idle_allocated_kwh": get("allocated_idle", "gpu_kwh")}


def week_numbers(reader: Callable, *, start: datetime, end: datetime, now: datetime,
                 opts: Options | None = None, large_job_gpus: int | None = None,
                 top: int = default("reports.top"),
                 gpus_per_node: int | None = None) -> dict:
    """Every figure of one report week ``[start, end)`` (clipped at ``now``), by section:
    ``fleet``, ``reliability``, ``thermal``, ``energy``; scalars plus small frames.
    ``gpus_per_node`` (None: read from the warehouse) scales the failure rate and MTTF;
    ``large_job_gpus`` (None: the setting, ``opts.large_job_gpus``) defines large jobs."""
    opts = opts or Options()
    if large_job_gpus is None:
        large_job_gpus = opts.large_job_gpus
    end = min(end, max(now, start))
    w = {"start": start, "end": end}
    fleet = _fleet_section(reader, opts, **w)
    fleet.update(placement_figures(reader, now=now, min_gpus=large_job_gpus, **w))
    reliability = _reliability_section(reader, opts, now=now, top=top,
                                       large_job_gpus=large_job_gpus,
                                       gpus_per_node=gpus_per_node, **w)
    thermal = _thermal_section(reader, fleet, top=top, **w)
    energy = _energy_section(reader, opts, fleet, top=top, **w)
    return {"start": start, "end": end, "fleet": fleet, "reliability": reliability,
            "thermal": thermal, "energy": energy,
            "over_time": qu.allocated_vs_used(reader(), **w)}


def placement_figures(reader: Callable, *, start: datetime, end: datetime, now: datetime,
                      min_gpus: int) -> dict:
    """The Placement page's figures for the week (warehouse/placement.py, issue 15): the
    GPU-hour weighted placement score of multi-node runs, their GPU-hours spread over more
    racks or zones than needed, the mean stranded GPUs (hourly), and the large jobs (at
    least ``min_gpus`` GPUs) that waited while enough GPUs were free but scattered."""
    w = {"start": start, "end": end, "now": now}
    s = placement_runs.placed_runs(reader(), rows=0, **w).summary
    frag = placement.fleet_fragmentation(reader(), **w)
    waits = placement_waits.waits_summary(placement_waits.waits_while_scattered(
        reader(), min_gpus=min_gpus, frag=frag, **w))
    return {"placement_score": None if np.isnan(s["mean_score"]) else s["mean_score"],
            "misplaced_gpu_h": s["misplaced_gpu_hours"], "multi_node_runs": s["runs"],
            "misplaced_runs": s["misplaced_runs"],
            "stranded_gpus": float(frag["stranded_gpus"].mean()) if len(frag) else None,
            "scattered_waits": waits["scattered"], "large_waits": waits["waited"]}


def _fleet_section(reader: Callable, opts: Options, *, start: datetime, end: datetime) -> dict:
    """GPU-hours of the week (:func:`fleet_hours`, :func:`idle_figures`) and the shares
    derived from them, percent."""
    w = {"start": start, "end": end}
    fleet = fleet_hours(reader(), **w)
    fleet.update(idle_figures(reader(), idle_util_pct=opts.idle_util_pct, **w))
    fleet.update(utilisation_shares(fleet, hours=(end - start).total_seconds() / 3600))
    return fleet


def utilisation_shares(fleet: dict, *, hours: float) -> dict:
    """The shares of :func:`fleet_hours` over a window of ``hours``: hours,
    allocated_share_pct (scheduled of installed GPU-hours), util_of_allocated_pct
    (utilised of allocated) and coverage_pct (reporting of installed), percent; None
    where the base is 0. The one definition for the report and the fleet view."""
    hours = max(hours, 0.0)
    installed_h = fleet["gpus"] * hours
    return {
        "hours": hours,
        "allocated_share_pct": (100 * fleet["scheduled_gpu_h"] / installed_h
                                if installed_h else None),
        "util_of_allocated_pct": (100 * fleet["utilised_gpu_h"] / fleet["allocated_gpu_h"]
                                  if fleet["allocated_gpu_h"] else None),
        "coverage_pct": 100 * fleet["reporting_gpu_h"] / installed_h if installed_h else None,
    }


def _reliability_section(reader: Callable, opts: Options, *, start: datetime, end: datetime,
                         now: datetime, top: int, large_job_gpus: int,
                         gpus_per_node: int | None) -> dict:
    """Failures, GPU-hours lost, the failure rate and MTTF, lemon nodes and the ETTR of
    large jobs in the week. The failed runs are counted from their categories' sums, not
    read (issue 17: 184,000 at 24,576 GPUs), and priced by the energy section."""
    w = {"start": start, "end": end}
    by_category = qf.failures_by(reader(), by="category", **w)
    lost = qg.lost_by(reader(), by="category", **w)
    rate = qf.failure_rate(reader(), gpus_per_node=gpus_per_node, job_gpus=MTTF_JOB_GPUS, **w)
    lemons = qf.lemon_nodes(reader(), min_failures=opts.lemon_min_failures,
                            p_value=opts.lemon_p_value, gpus_per_node=gpus_per_node, **w)
    large = qg.large_jobs(reader(), now=now, opts=opts, min_gpus=large_job_gpus, **w)
    mttf = rate["mttf"].set_index("gpus")["mttf_h"]
    slow = qs.lost_total(reader(), **w)  # stragglers (issue 15)
    return {
        "failures": int(by_category["failures"].sum()),
        "infra_failures": int(rate["failures"]),
        "gpu_hours_lost": float(lost["gpu_hours_lost"].sum()) if len(lost) else 0.0,
        "restarts": int(lost["restarts"].sum()) if len(lost) else 0,
        "slow_gpu_hours_lost": slow["gpu_hours_lost"], "straggler_episodes": slow["episodes"],
        "r_f_per_1000_node_days": rate["r_f_per_1000_node_days"],
        "r_f_low": rate["r_f_low"], "r_f_high": rate["r_f_high"],
        "node_days": rate["node_days"],
        **{f"mttf_{g}_h": float(mttf[g]) for g in MTTF_JOB_GPUS},
        "large_job_gpus": large_job_gpus,
        **{f"large_{k}": v for k, v in qg.ettr_summary(large).items()},
        "by_category": by_category,
        "by_reason": qf.failures_by(reader(), by="reason", **w).head(12),
        "by_rack": qf.failures_by(reader(), by="rack", **w).head(top),
        "nodes": lemons[lemons["infra_failures"] > 0].head(top),
        "lemons": int(lemons["lemon"].sum()),
        "lost_days": qg.lost_per_day(reader(), **w),
        "reasons_frame": qf.breakdowns(reader(), parts=("reasons",), **w)["reasons"],
        "rate": rate,
        "ettr_frame": large,
    }


def _thermal_section(reader: Callable, fleet: dict, *, start: datetime, end: datetime,
                     top: int) -> dict:
    """Alerts fired, throttled GPU-hours and the hottest racks of the week (°C)."""
    w = {"start": start, "end": end}
    alerts = alerts_fired(reader(), **w)
    temps = qt.rack_temperatures(reader(), **w)
    return {
        "alerts_fired": int(alerts["alerts"].sum()) if len(alerts) else 0,
        "critical_alerts": int(alerts.loc[alerts["severity"] == "critical", "alerts"].sum()),
        "alerts": alerts, "alert_racks": alert_racks(reader(), limit=top, **w),
        "throttled_gpu_h": fleet["throttled_gpu_h"],
        "hottest_racks": hottest_racks(temps).head(top),
        "rack_temps": temps,
        "max_temp_c": float(temps["max_c"].max()) if len(temps) else None,
    }


def _energy_section(reader: Callable, opts: Options, fleet: dict, *, start: datetime,
                    end: datetime, top: int) -> dict:
    """Energy (kWh), carbon (kg, t), PUE and intensity of the week; idle energy; the top
    jobs and users; the energy and carbon of the GPU-hours lost to the week's failures."""
    w = {"start": start, "end": end}
    # the week's totals are the sums of its days (one query, issue 17: asking for the
    # fleet and the days took two passes over the week's energy)
    by_day = qe.energy_by(reader(), by="day", opts=opts, **w)
    energy = {k: _f(by_day[k].sum()) if len(by_day) else 0.0
              for k in ("gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg")}
    energy["tco2e"] = energy["carbon_kg"] / 1000
    energy["pue"] = energy["facility_kwh"] / energy["it_kwh"] if energy["it_kwh"] else None
    energy["g_per_kwh"] = (1000 * energy["carbon_kg"] / energy["facility_kwh"]
                           if energy["facility_kwh"] else None)
    energy["facility_kwh_per_gpu_h"], energy["kg_per_gpu_h"] = qe.per_reporting_gpu_hour(
        energy["facility_kwh"], energy["carbon_kg"], fleet["reporting_gpu_h"])
    energy["idle_allocated_kwh"] = fleet["idle_allocated_kwh"]
    energy["unallocated_kwh"] = fleet["unallocated_kwh"]
    energy["idle_kwh"] = fleet["idle_allocated_kwh"] + fleet["unallocated_kwh"]
    runs = qe.run_energy(reader(), opts=opts, **w)
    energy["top_jobs"] = qe.sum_runs(reader(), runs, by="job_id", limit=top)
    users = qe.sum_runs(reader(), runs, by="user_name")  # the tops and the carbon of goodput
    energy["top_users"] = users.head(top).reset_index(drop=True)
    # carbon of goodput (issue 21): the Energy page's definition and numbers
    cluster = gc.cluster_carbon_per_productive_gpu_hour(
        reader(), opts=opts, runs=runs, fleet_carbon_kg=energy["carbon_kg"], **w)
    energy["g_per_productive_gpu_h"] = cluster["g_per_productive_gpu_h"]
    energy["productive_gpu_h"] = cluster["productive_gpu_hours"]
    energy["goodput_carbon_users"] = gc.carbon_per_productive_gpu_hour(
        reader(), by="user_name", opts=opts, sums=users, **w).head(top)
    energy.update(_failure_carbon(reader(), energy, opts=opts, **w))
    energy["by_day"] = by_day
    return energy

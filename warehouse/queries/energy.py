"""Energy and carbon per node, rack, partition, fleet, job run, job and user; idle energy.

- Fleet/rack/node energy reads ``gpu_energy_1h`` (counter deltas, see
  warehouse/energy.py) plus non-GPU node power: measured (``node_power``) where present,
  else ``node_overhead_w`` for every node-hour with GPU data.
- Job energy reads the 1-minute tier (power integral) of the GPUs allocated to each run,
  prorated by the overlap of each minute with the allocation, plus the node's non-GPU
  power shared by GPU-seconds.
- Ranges longer than :data:`MINUTE_TIER_MAX` (2 days) read the 1-hour tier instead
  (``resolution="hour"``; the minute path reads ~60x the rows and its range join grows
  with range x allocations): a GPU-hour only partly allocated gives its unallocated
  seconds the fleet's idle power (the mean power of the range's GPU-hours that stayed
  idle the whole hour) and the rest to its allocations by overlap; an allocated
  GPU-hour is *idle* when the hour's maximum utilisation stayed below the threshold. On a
  seeded cluster the hour path is within 2 % of the minute path for job, user and
  failure energy and within 5 % for idle energy (tests/test_energy_hourly.py).
- IT energy x PUE = facility energy; x grid intensity (warehouse/carbon.py) = carbon.
Units: kWh, gCO2e / kgCO2e, GPU-hours; ranges ``[start, end)`` naive UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse import carbon
from warehouse.analytics import Options
from warehouse.queries.utilisation import MINUTE_TIER_MAX

GROUPS = {"fleet": "'fleet'", "rack": "n.rack", "node": "e.node", "partition": "n.partition",
          "hour": "e.ts", "day": "date_trunc('day', e.ts)"}

_HOURLY_SQL = """
WITH g AS (
    SELECT ts, node, sum(energy_j) AS gpu_j FROM gpu_energy_1h
    WHERE ts >= $start AND ts < $end GROUP BY ts, node
),
measured AS (
    SELECT date_trunc('hour', ts) AS ts, node, avg(other_power_w) AS w FROM node_power
    WHERE ts >= $start AND ts < $end GROUP BY ALL
),
buckets AS (SELECT DISTINCT ts FROM g),
{ctes},
e AS (
    SELECT g.ts, g.node, g.gpu_j, coalesce(m.w, $node_w) * 3600.0 AS other_j,
           p.pue, i.g_co2_per_kwh, i.intensity_source
    FROM g LEFT JOIN measured m USING (ts, node)
    JOIN pue_of p USING (ts) JOIN intensity i USING (ts)
)
SELECT {group} AS "{by}",
       sum(e.gpu_j) / 3.6e6 AS gpu_kwh, sum(e.other_j) / 3.6e6 AS other_kwh,
       sum(e.gpu_j + e.other_j) / 3.6e6 AS it_kwh,
       sum((e.gpu_j + e.other_j) * e.pue) / 3.6e6 AS facility_kwh,
       sum((e.gpu_j + e.other_j) * e.pue * e.g_co2_per_kwh) / 3.6e9 AS carbon_kg,
       list(DISTINCT e.intensity_source) AS intensity_sources
FROM e LEFT JOIN nodes n USING (node)
GROUP BY 1 ORDER BY 1
"""

def run_energy_tail(src: str) -> str:
    """The end of every per-run energy query: intensity and PUE per bucket (``{ctes}``,
    filled by the caller with carbon.intensity_ctes()) and the sums per run over the CTE
    ``src`` (columns job_id, run_index, ts, gpu_j, other_j joules, gpu_s seconds).
    Returns gpu_hours, gpu_kwh, it_kwh, facility_kwh and carbon_kg per run."""
    return f"""buckets AS (SELECT DISTINCT ts FROM {src}),
{{ctes}}
SELECT p.job_id, p.run_index, sum(p.gpu_s) / 3600.0 AS gpu_hours,
       sum(p.gpu_j) / 3.6e6 AS gpu_kwh, sum(p.gpu_j + p.other_j) / 3.6e6 AS it_kwh,
       sum((p.gpu_j + p.other_j) * f.pue) / 3.6e6 AS facility_kwh,
       sum((p.gpu_j + p.other_j) * f.pue * i.g_co2_per_kwh) / 3.6e9 AS carbon_kg
FROM {src} p JOIN pue_of f USING (ts) JOIN intensity i USING (ts)
GROUP BY ALL
"""


_RUN_SQL = """
WITH a AS (
    SELECT a.job_id, a.run_index, a.node, a.gpu_index,
           greatest(a.start_ts, $start) AS s, least(coalesce(a.end_ts, $end), $end) AS e
    FROM allocations a
    WHERE a.start_ts < $end AND coalesce(a.end_ts, $end) > $start
      AND ($runs::VARCHAR[] IS NULL OR a.job_id || ':' || a.run_index IN (SELECT unnest($runs)))
),
m AS (
    SELECT a.job_id, a.run_index, m.ts,
           greatest(0, epoch_us(least(m.ts + INTERVAL 1 MINUTE, a.e))
                       - epoch_us(greatest(m.ts, a.s))) / 1e6 AS overlap_s,
           m.energy_j / 60.0 AS j_per_s, coalesce(n.gpus, 8) AS node_gpus
    FROM a JOIN gpu_samples_1m m ON m.node = a.node AND m.gpu_index = a.gpu_index
     AND m.ts >= date_trunc('minute', a.s) AND m.ts < a.e
    LEFT JOIN nodes n ON n.node = a.node
),
per_min AS (
    SELECT job_id, run_index, ts, sum(overlap_s * j_per_s) AS gpu_j,
           sum(overlap_s * $node_w / node_gpus) AS other_j, sum(overlap_s) AS gpu_s
    FROM m GROUP BY ALL
),
""" + run_energy_tail("per_min")

_IDLE_SQL = """
WITH alloc AS (
    SELECT node, gpu_index, date_trunc('minute', start_ts) AS s, coalesce(end_ts, $end) AS e
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
m AS (
    SELECT m.ts, m.energy_j, m.covered_s, m.util_pct_max, coalesce(m.ts < a.e, false)
           AS allocated
    FROM (SELECT * FROM gpu_samples_1m WHERE ts >= $start AND ts < $end) m
    ASOF LEFT JOIN alloc a ON a.node = m.node AND a.gpu_index = m.gpu_index AND m.ts >= a.s
)
SELECT CASE WHEN NOT allocated THEN 'unallocated'
            WHEN coalesce(util_pct_max, 0) < $idle_pct THEN 'allocated_idle'
            ELSE 'busy' END AS state,
       sum(covered_s) / 3600.0 AS gpu_hours, sum(energy_j) / 3.6e6 AS gpu_kwh,
       sum(energy_j) / nullif(sum(covered_s), 0) AS mean_power_w
FROM m GROUP BY 1 ORDER BY 1
"""


# -------------------------------------------------- the 1-hour tier (ranges over 2 days)

#: Per GPU-hour of ``[start, end)`` (``{join}``: LEFT for every GPU-hour, INNER for the
#: allocated ones): the hour's energy and data seconds inside the range, the seconds
#: allocations held it (``alloc_s``, at most the data seconds) and ``free_j``, the energy
#: of its unallocated seconds at the fleet's idle power.
_HOUR_SPLIT_CTES = """
a AS (
    SELECT job_id, run_index, node, gpu_index,
           greatest(start_ts, $start) AS s, least(coalesce(end_ts, $end), $end) AS e
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
ao AS (  -- each allocation once per hour it touches: an equi-join with the hour tier
    SELECT job_id, run_index, node, gpu_index, ts,
           (epoch_us(least(ts + INTERVAL 1 HOUR, e)) - epoch_us(greatest(ts, s))) / 1e6
           AS overlap_s
    FROM (SELECT *, unnest(range(date_trunc('hour', s), e, INTERVAL 1 HOUR)) AS ts
          FROM a WHERE e > s)
),
held AS (SELECT node, gpu_index, ts, sum(overlap_s) AS held_s FROM ao GROUP BY ALL),
hours AS (
    SELECT ts, node, gpu_index, util_pct_max,
           least(coalesce(covered_s, 0), 3600.0) * w AS data_s, coalesce(energy_j, 0) * w AS j
    FROM (SELECT *, CASE WHEN ts < $start THEN (epoch_us(ts + INTERVAL 1 HOUR)
                          - epoch_us($start)) / 3.6e9 ELSE 1.0 END AS w
          FROM gpu_samples_1h WHERE ts > $start - INTERVAL 1 HOUR AND ts < $end)
),
idle_power AS (  -- W: the mean power of GPU-hours idle the whole hour
    SELECT sum(j) / nullif(sum(data_s), 0) AS w FROM hours
    WHERE coalesce(util_pct_max, 0) < $idle_pct AND data_s > 0
),
g AS (
    SELECT h.*, coalesce(held.held_s, 0) AS held_s,
           least(coalesce(held.held_s, 0), h.data_s) AS alloc_s
    FROM hours h {join} JOIN held USING (node, gpu_index, ts)
),
split AS (
    SELECT g.*, CASE WHEN alloc_s <= 0 THEN j WHEN alloc_s >= data_s THEN 0.0
                     ELSE least(j, (data_s - alloc_s) * coalesce(p.w, j / data_s)) END
                AS free_j
    FROM g, idle_power p
)"""

_IDLE_HOUR_SQL = f"""
WITH {_HOUR_SPLIT_CTES.replace("{join}", "LEFT")},
parts AS (
    SELECT 'unallocated' AS state, data_s - alloc_s AS s, free_j AS j
    FROM split WHERE data_s > alloc_s
    UNION ALL
    SELECT CASE WHEN coalesce(util_pct_max, 0) < $idle_pct THEN 'allocated_idle'
                ELSE 'busy' END, alloc_s, j - free_j
    FROM split WHERE alloc_s > 0
)
SELECT state, sum(s) / 3600.0 AS gpu_hours, sum(j) / 3.6e6 AS gpu_kwh,
       sum(j) / nullif(sum(s), 0) AS mean_power_w
FROM parts GROUP BY 1 ORDER BY 1
"""

_RUN_HOUR_SQL = """
WITH {split},
per_h AS (  -- an allocation's share of the GPU-hour's allocated seconds and energy
    SELECT ao.job_id, ao.run_index, ao.ts,
           x.alloc_s * ao.overlap_s / x.held_s AS gpu_s,
           (x.j - x.free_j) * ao.overlap_s / x.held_s AS gpu_j, coalesce(n.gpus, 8) AS node_gpus
    FROM ao JOIN split x USING (node, gpu_index, ts) LEFT JOIN nodes n ON n.node = ao.node
    WHERE x.held_s > 0
      AND ($runs::VARCHAR[] IS NULL OR ao.job_id || ':' || ao.run_index IN (SELECT unnest($runs)))
),
per_run_h AS (
    SELECT job_id, run_index, ts, sum(gpu_j) AS gpu_j,
           sum(gpu_s * $node_w / node_gpus) AS other_j, sum(gpu_s) AS gpu_s
    FROM per_h GROUP BY ALL
),
""" + run_energy_tail("per_run_h")

RESOLUTIONS = ("minute", "hour")


def resolution(start: datetime, end: datetime) -> str:
    """``"minute"`` for ranges up to :data:`MINUTE_TIER_MAX`, else ``"hour"``."""
    return "minute" if end - start <= MINUTE_TIER_MAX else "hour"


def _resolve(res: str | None, start: datetime, end: datetime) -> str:
    if res is None:
        return resolution(start, end)
    if res not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {RESOLUTIONS}, not {res!r}")
    return res


def _carbon_params(opts: Options, width: timedelta) -> dict:
    return carbon.intensity_params(region=opts.region, fallback_g=opts.fallback_g_per_kwh,
                                   max_age_h=opts.max_age_h, pue=opts.pue, width=width)


def energy_by(cur, *, start: datetime, end: datetime, by: str = "rack",
              opts: Options | None = None) -> pd.DataFrame:
    """Energy (kWh: gpu, other = non-GPU node power, it, facility = it x PUE) and carbon
    (kg) grouped by fleet, rack, node, partition, hour or day, from counter-based hourly
    GPU energy."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    opts = opts or Options()
    sql = _HOURLY_SQL.format(ctes=carbon.intensity_ctes().strip(), group=GROUPS[by], by=by)
    params = {"start": start, "end": end, "node_w": opts.node_overhead_w,
              **_carbon_params(opts, timedelta(hours=1))}
    return cur.execute(sql, params).df()


def run_energy(cur, *, start: datetime, end: datetime, opts: Options | None = None,
               resolution: str | None = None,
               runs: list[tuple[str, int]] | None = None) -> pd.DataFrame:
    """Energy and carbon of each job run within ``[start, end)``: gpu_hours, gpu_kwh,
    it_kwh (with the node's non-GPU share), facility_kwh, carbon_kg, embodied_kg.

    ``resolution``: ``"minute"`` or ``"hour"`` tier (default by the range, see
    :func:`resolution`); ``runs``: only these ``(job_id, run_index)``."""
    opts = opts or Options()
    res = _resolve(resolution, start, end)
    ctes = carbon.intensity_ctes().strip()
    if res == "minute":
        sql, width = _RUN_SQL.format(ctes=ctes), timedelta(minutes=1)
    else:
        sql = _RUN_HOUR_SQL.format(split=_HOUR_SPLIT_CTES.strip().replace("{join}", "INNER"),
                                  ctes=ctes)
        width = timedelta(hours=1)
    params = {"start": start, "end": end, "node_w": opts.node_overhead_w,
              "runs": None if runs is None else [f"{j}:{int(r)}" for j, r in runs],
              **({"idle_pct": float(opts.idle_util_pct)} if res == "hour" else {}),
              **_carbon_params(opts, width)}
    df = cur.execute(sql, params).df()
    g = carbon.embodied_g_per_gpu_hour(opts.embodied_kg_per_gpu, opts.gpu_lifetime_years)
    df["embodied_kg"] = df["gpu_hours"] * g / 1000.0
    return df


def job_energy(cur, *, start: datetime, end: datetime, by: str = "job_id",
               opts: Options | None = None, resolution: str | None = None) -> pd.DataFrame:
    """:func:`run_energy` summed per job (``by="job_id"``), ``user_name`` or
    ``partition``, with the job's identity."""
    runs = run_energy(cur, start=start, end=end, opts=opts, resolution=resolution)
    jobs = cur.execute("SELECT job_id, name, user_name, account, partition, job_type, gpus"
                       " FROM jobs WHERE job_id IN (SELECT unnest($ids::VARCHAR[]))",
                       {"ids": runs["job_id"].unique().tolist()}).df()
    df = runs.merge(jobs, on="job_id", how="left")
    cols = ["gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg", "embodied_kg"]
    keys = ["job_id", "name", "user_name", "partition", "job_type"] if by == "job_id" else [by]
    out = df.groupby(keys, dropna=False)[cols].sum().reset_index()
    return out.sort_values("carbon_kg", ascending=False).reset_index(drop=True)


def idle_energy(cur, *, start: datetime, end: datetime, idle_util_pct: float = 5.0,
                resolution: str | None = None) -> pd.DataFrame:
    """GPU-hours and energy (kWh) of unallocated, allocated-but-idle (maximum utilisation
    of the minute, or of the whole hour on the hour tier, below ``idle_util_pct``) and
    busy GPUs: state, gpu_hours, gpu_kwh, mean_power_w."""
    sql = _IDLE_SQL if _resolve(resolution, start, end) == "minute" else _IDLE_HOUR_SQL
    return cur.execute(sql, {"start": start, "end": end,
                             "idle_pct": float(idle_util_pct)}).df()


def failure_carbon(cur, *, start: datetime, end: datetime, opts: Options | None = None,
                   resolution: str | None = None) -> pd.DataFrame:
    """Energy and carbon of the GPU-hours lost to each classified failure in
    ``[start, end)``: lost_kwh = gpu_hours_lost x the run's facility kWh per GPU-hour,
    carbon in proportion. Columns: job_id, run_index, category, reason, gpu_hours_lost,
    lost_kwh, lost_carbon_kg."""
    fails = cur.execute("SELECT job_id, run_index, category, reason, gpu_hours_lost, start_ts"
                        " FROM failures WHERE end_ts >= $start AND end_ts < $end",
                        {"start": start, "end": end}).df()
    if fails.empty:
        return fails.assign(lost_kwh=[], lost_carbon_kg=[])
    lo = min(pd.Timestamp(fails["start_ts"].min()).to_pydatetime(), start)
    keys = list(zip(fails["job_id"], fails["run_index"], strict=True))
    runs = run_energy(cur, start=lo, end=end, opts=opts, resolution=resolution, runs=keys)
    df = fails.merge(runs, on=["job_id", "run_index"], how="left")
    per_h = df["gpu_hours"].where(df["gpu_hours"] > 0)
    df["lost_kwh"] = df["gpu_hours_lost"] * df["facility_kwh"] / per_h
    df["lost_carbon_kg"] = df["gpu_hours_lost"] * df["carbon_kg"] / per_h
    return df[["job_id", "run_index", "category", "reason", "gpu_hours_lost", "lost_kwh",
               "lost_carbon_kg"]]

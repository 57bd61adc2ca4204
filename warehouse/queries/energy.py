"""Energy and carbon per node, rack, partition, fleet, job run, job and user; idle energy.

- Fleet/rack/node energy reads ``gpu_energy_1h`` (counter deltas, see
  warehouse/energy.py) plus non-GPU node energy per node-hour: ``other_power_w`` where a
  source knows it; else, where the BMC keeps an energy counter (Redfish ``EnergykWh``,
  ``energy_j``), the counter's deltas in the node-hour scaled to the hour, minus the GPUs'
  energy (never below 0; a counter that did not move while the BMC read power is taken
  as too coarse for that hour); else, where the BMC measured the node's power
  (``total_power_w``, issue 21), the BMC's mean power x 1 h minus the GPUs' energy; else
  ``node_overhead_w`` x 1 h. ``bmc_node_hours`` (``bmc_counter_node_hours`` from the
  counter) of ``node_hours`` says how much of a group the BMC covered (docs/analytics.md).
- Job energy is the 1-minute tier (energy counter deltas, else the power integral:
  warehouse/rollups.py) of the GPUs allocated to each run,
  prorated by the overlap of each minute with the allocation, plus the node's non-GPU
  power shared by GPU-seconds; idle energy splits the same GPU-seconds into unallocated,
  allocated-but-idle and busy. Whole hours are read from ``gpu_usage_1h``, where the
  analytics refresh keeps exactly these per-minute sums per hour, node and run (the
  per-run energy from ``run_usage_1h``, the same summed per hour, run and node GPU count,
  while it serves: warehouse/run_usage.py); the rest of the range is computed live from
  the 1-minute tier (warehouse/usage.py:plan). A range's parts are summed in one
  statement (warehouse/usage.py:union).
  Carbon intensity and PUE apply per minute on live minutes, per hour on table hours.
- Where the 1-minute tier does not reach (retention), or with ``resolution="hour"``,
  the 1-hour tier is read instead: a GPU-hour only partly allocated gives its
  unallocated seconds the fleet's idle power (the mean power of the range's GPU-hours
  that stayed idle the whole hour) and the rest to its allocations by overlap; an
  allocated GPU-hour is *idle* when the hour's maximum utilisation stayed below the
  threshold. On a seeded cluster the hour path is within 2 % of the minute path for job,
  user and failure energy and within 5 % for idle energy (tests/test_energy_hourly.py).
  ``resolution="minute"`` computes the whole range live from the 1-minute tier.
- IT energy x PUE = facility energy; x grid intensity (warehouse/carbon.py) = carbon.
Units: kWh, gCO2e / kgCO2e, GPU-hours; ranges ``[start, end)`` naive UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from gpulens.settings import default
from warehouse import carbon, fleet_hours, hour_usage, node_energy, run_usage, usage
from warehouse.analytics import Options
from warehouse.clock import floor_hour
from warehouse.db import fill, own_cursor, transaction
from warehouse.queries import fleet

MAX_NODE_W = node_energy.MAX_NODE_W  # W: a BMC counter step above it is skipped

GROUPS = {"fleet": "'fleet'", "rack": "n.rack", "node": "e.node", "partition": "n.partition",
          "hour": "e.ts", "day": "date_trunc('day', e.ts)"}
#: The groups read from ``nodes`` (``n``): the others are not joined to it (issue 17: the
#: join was ~10 ms of CPU a 24,576-GPU week).
_NODE_GROUPS = {"rack", "partition"}

#: Per node-hour of the range (``nh``, warehouse/node_energy.py): live over [$start, $end)
#: (``_LIVE_NH``), or the hours the refresh keeps in [$kept_lo, $kept_hi) and live over
#: [$start, $end) for the rest (``_KEPT_NH``, $start then the last kept hour's end).
_LIVE_NH = fill(node_energy.NODE_HOURS, name="nh")
_KEPT_NH = fill(node_energy.NODE_HOURS, name="nh_live") + """,
nh AS (
    SELECT ts, node, gpu_j, w, bmc_w, counter_j FROM node_energy_1h
    WHERE ts >= $kept_lo AND ts < $kept_hi
    UNION ALL
    SELECT * FROM nh_live
)"""

#: Energy and carbon per ``{group}`` over the node-hours ``{nh}``; the hours priced are
#: every hour from $buckets_lo (floored) to $end, a superset of the node-hours' (read
#: from ``nh``, it was kept whole in memory for a second pass: issue 17, ~10 ms of a
#: 24,576-GPU week); ``{join}``: ``nodes`` joined as ``n`` where the group needs it.
_HOURLY_SQL = """
WITH {nh},
buckets AS (
    SELECT unnest(range(time_bucket(INTERVAL 1 HOUR, $buckets_lo::TIMESTAMP), $end::TIMESTAMP,
                        INTERVAL 1 HOUR)) AS ts
),
{ctes},
e AS (
    SELECT m.ts, m.node, m.gpu_j,
           CASE WHEN m.w IS NOT NULL THEN m.w * 3600.0
                WHEN m.counter_j IS NOT NULL THEN greatest(m.counter_j - m.gpu_j, 0.0)
                WHEN m.bmc_w IS NOT NULL THEN greatest(m.bmc_w * 3600.0 - m.gpu_j, 0.0)
                ELSE $node_w * 3600.0 END AS other_j,
           CASE WHEN m.w IS NOT NULL THEN 'measured'
                WHEN m.counter_j IS NOT NULL THEN 'bmc_counter'
                WHEN m.bmc_w IS NOT NULL THEN 'bmc' ELSE 'overhead' END AS node_source,
           p.pue, i.g_co2_per_kwh, i.intensity_source
    FROM nh m JOIN pue_of p USING (ts) JOIN intensity i USING (ts)
)
SELECT {group} AS "{by}",
       sum(e.gpu_j) / 3.6e6 AS gpu_kwh, sum(e.other_j) / 3.6e6 AS other_kwh,
       sum(e.gpu_j + e.other_j) / 3.6e6 AS it_kwh,
       sum((e.gpu_j + e.other_j) * e.pue) / 3.6e6 AS facility_kwh,
       sum((e.gpu_j + e.other_j) * e.pue * e.g_co2_per_kwh) / 3.6e9 AS carbon_kg,
       list(DISTINCT e.intensity_source) AS intensity_sources,
       count(*) AS node_hours,
       count(*) FILTER (e.node_source IN ('bmc', 'bmc_counter')) AS bmc_node_hours,
       count(*) FILTER (e.node_source = 'bmc_counter') AS bmc_counter_node_hours
FROM e {join}
GROUP BY 1 ORDER BY 1
"""

def run_energy_tail(src: str) -> str:
    """The end of every per-run energy query: intensity and PUE per bucket (``{ctes}``,
    filled by the caller with carbon.intensity_ctes()) and the sums per run over the CTE
    ``src`` (columns job_id, run_index, ts; gpu_j, the GPUs' joules; it_j, those plus the
    node's non-GPU share, NULL where either part is; gpu_s seconds; any
    number of rows per run and bucket: each row is priced at its bucket's PUE and
    intensity, so ``src`` need not be grouped per bucket first, issue 17).
    The buckets are every ``$width`` from ``$start`` (floored to it) to ``$end``, a
    superset of the rows' (each path's rows lie in that range, on bucket starts): read
    from the rows, ``src`` was kept whole in memory for a second pass (issue 17: ~10 % of
    a 7-day query at 24,576 GPUs). Returns gpu_hours, gpu_kwh, it_kwh, facility_kwh and
    carbon_kg per run, or per the job keys :func:`_run_sql` fills in (``{group}``,
    ``{join}``)."""
    return fill("""buckets AS (
    SELECT unnest(range(time_bucket($width, $start::TIMESTAMP), $end::TIMESTAMP, $width)) AS ts
),
{ctes}
SELECT {group}, sum(p.gpu_s) / 3600.0 AS gpu_hours,
       sum(p.gpu_j) / 3.6e6 AS gpu_kwh, sum(p.it_j) / 3.6e6 AS it_kwh,
       sum(p.it_j * f.pue) / 3.6e6 AS facility_kwh,
       sum(p.it_j * f.pue * i.g_co2_per_kwh) / 3.6e9 AS carbon_kg
FROM {src} p JOIN pue_of f USING (ts) JOIN intensity i USING (ts) {join}
GROUP BY ALL
""", src=src)


#: Per run over a usage source ``u`` (warehouse/usage.py: live minutes or the table's
#: hours): GPU energy, the node's non-GPU power shared by GPU-seconds, GPU-seconds. Each
#: usage row is priced as it is (no grouping per run and bucket before the sums per run:
#: that grouping was half of the query at 24,576 GPUs, issue 17).
_RUN_USAGE_SQL = fill("""
WITH {source},
per_b AS (
    SELECT u.job_id, u.run_index, u.ts, u.energy_j AS gpu_j,
           u.energy_j + u.gpu_s * $node_w / {node_gpus} AS it_j, u.gpu_s
    FROM u LEFT JOIN nodes n USING (node) WHERE u.job_id IS NOT NULL
),
""", node_gpus=fleet.NODE_GPUS_SQL) + run_energy_tail("per_b")

#: The three states of the GPU-seconds of a usage source ``u``: no allocation held them,
#: allocated in a minute whose maximum utilisation stayed below $idle_pct, busy.
_IDLE_USAGE_SQL = """
WITH {source},
t AS (
    SELECT sum(gpu_s) FILTER (job_id IS NULL) AS free_s,
           sum(energy_j) FILTER (job_id IS NULL) AS free_j,
           sum(idle_s) FILTER (job_id IS NOT NULL) AS idle_s,
           sum(idle_j) FILTER (job_id IS NOT NULL) AS idle_j,
           sum(gpu_s - idle_s) FILTER (job_id IS NOT NULL) AS busy_s,
           sum(energy_j - idle_j) FILTER (job_id IS NOT NULL) AS busy_j
    FROM u
)
SELECT unnest(['unallocated', 'allocated_idle', 'busy']) AS state,
       unnest([free_s, idle_s, busy_s]) / 3600.0 AS gpu_hours,
       unnest([free_j, idle_j, busy_j]) / 3.6e6 AS gpu_kwh
FROM t
"""


# -------------------------------------------------- the 1-hour tier (ranges over 2 days)

#: Allocations (``a``), each once per hour it touches with its overlap (``ao``: an
#: equi-join with the hour tier), and per GPU-hour of ``[start, end)`` the hour's energy
#: and data seconds inside the range (``hours``), the fleet's idle power in W
#: (``idle_power``: the mean power of GPU-hours idle the whole hour) and the seconds
#: allocations held each GPU-hour (``held``).
#: Allocations of ``{allocations}`` (the table, or a job's rows:
#: warehouse/queries/job_minutes.py) clipped to ``[$start, $end)`` whose rows pass
#: ``{runs}`` (``a``) and the seconds each held in each GPU-hour x its share of the GPU
#: (``ao``: ``overlap_s``; shards and MPS; MIG instances count whole here, issue 21); also
#: read by warehouse/queries/energy_method.py.
ALLOC_HOUR_CTES = """
a AS (
    SELECT job_id, run_index, node, gpu_index,
           greatest(start_ts, $start) AS s, least(coalesce(end_ts, $end), $end) AS e,
           least(greatest(coalesce(share, 1.0), 0.0), 1.0) AS frac  -- shards, MPS (issue 21)
    FROM {allocations} WHERE start_ts < $end AND coalesce(end_ts, $end) > $start AND {runs}
),
ao AS MATERIALIZED (
    SELECT job_id, run_index, node, gpu_index, ts,
           (epoch_us(least(ts + INTERVAL 1 HOUR, e)) - epoch_us(greatest(ts, s))) / 1e6 * frac
           AS overlap_s
    FROM (SELECT *, unnest(range(date_trunc('hour', s), e, INTERVAL 1 HOUR)) AS ts
          FROM a WHERE e > s)
)"""

_HOUR_CTES = fill(ALLOC_HOUR_CTES, runs="TRUE", allocations="allocations") + """,
hours AS (
    SELECT ts, node, gpu_index, util_pct_max,
           least(coalesce(covered_s, 0), 3600.0) * w AS data_s, coalesce(energy_j, 0) * w AS j
    FROM (SELECT *, CASE WHEN ts < $start THEN (epoch_us(ts + INTERVAL 1 HOUR)
                          - epoch_us($start)) / 3.6e9 ELSE 1.0 END AS w
          FROM gpu_samples_1h WHERE ts > $start - INTERVAL 1 HOUR AND ts < $end)
),
idle_power AS (
    SELECT sum(j) / nullif(sum(data_s), 0) AS w FROM hours
    WHERE coalesce(util_pct_max, 0) < $idle_pct AND data_s > 0
),
held AS (  -- per GPU-hour, the seconds all allocations held it (a grouped pass: a window
           -- over the same partition took ~2/3 of the query, issue 17)
    SELECT node, gpu_index, ts, sum(overlap_s) AS held_s FROM ao GROUP BY ALL
)"""

#: The energy of a GPU-hour's unallocated seconds (``data_s - alloc_s``) at the fleet's
#: idle power ``p.w``, never more than the hour's energy ``j``.
_FREE_J = """CASE WHEN alloc_s <= 0 THEN j WHEN alloc_s >= data_s THEN 0.0
                     ELSE least(j, (data_s - alloc_s) * coalesce(p.w, j / data_s)) END"""

_IDLE_HOUR_SQL = fill("""
WITH {hour_ctes},
g AS (  -- every GPU-hour with the seconds allocations held it (at most its data seconds)
    SELECT h.*, least(coalesce(held.held_s, 0), h.data_s) AS alloc_s
    FROM hours h LEFT JOIN held USING (node, gpu_index, ts)
),
split AS (SELECT g.*, {free_j} AS free_j FROM g, idle_power p),
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
""", hour_ctes=_HOUR_CTES, free_j=_FREE_J)

#: Per run, hour and node (``per_h``: gpu_s, gpu_j) with the node's non-GPU power shared
#: by GPU-seconds: the hour paths' rows priced by :func:`run_energy_tail`.
_PER_RUN_H = fill("""per_run_h AS (  -- the node's non-GPU power shared by GPU-seconds
    SELECT p.job_id, p.run_index, p.ts, p.gpu_j,
           p.gpu_j + p.gpu_s * $node_w / {node_gpus} AS it_j, p.gpu_s
    FROM per_h p LEFT JOIN nodes n USING (node)
),""", node_gpus=fleet.NODE_GPUS_SQL)

_RUN_HOUR_SQL = fill("""
WITH {wanted}, {hour_ctes},
aw AS (  -- the seconds all allocations held the GPU-hour, beside each allocation
    SELECT ao.*, held.held_s FROM ao JOIN held USING (node, gpu_index, ts)
),
x AS (  -- one join of allocations with the hour tier
    SELECT aw.job_id, aw.run_index, aw.ts, aw.node, aw.overlap_s / aw.held_s AS share,
           h.j, h.data_s, least(aw.held_s, h.data_s) AS alloc_s
    FROM aw JOIN hours h USING (node, gpu_index, ts)
    WHERE aw.held_s > 0
      AND {runs}
),
per_h AS (  -- an allocation's share of the GPU-hour's allocated seconds and energy
    SELECT job_id, run_index, ts, node, alloc_s * share AS gpu_s,
           (j - {free_j}) * share AS gpu_j
    FROM x, idle_power p
),
{per_run_h}
""", wanted=usage.WANTED, hour_ctes=_HOUR_CTES, free_j=_FREE_J, per_run_h=_PER_RUN_H,
    runs=fill(usage.RUNS, alias="aw.")) + run_energy_tail("per_run_h")

#: :data:`_RUN_USAGE_SQL` over the table's hours kept per hour and run
#: (warehouse/run_usage.py, issue 17): the same sums from 603,217 rows instead of
#: 1,500,307 joined to ``nodes`` in a 24,576-GPU week (with the sums per key, energy by
#: user's 7-day query 0.13-0.2 -> 0.09-0.15 s).
_RUN_KEPT_SQL = fill("""
WITH {wanted},
per_b AS (
    SELECT job_id, run_index, ts, energy_j AS gpu_j,
           it_j + it_s * $node_w / {node_gpus} AS it_j, gpu_s
    FROM run_usage_1h WHERE ts >= $start AND ts < $end AND {runs}
),
""", wanted=usage.WANTED, node_gpus=fill(fleet.GPUS_OR_TYPICAL, gpus="gpus"),
    runs=fill(usage.RUNS, alias="")) + run_energy_tail("per_b")
_KEPT = "runtable"

#: Each query per part path (warehouse/usage.py:plan): the table's hours (``runtable``:
#: from their sums per run where run_usage.serves), live minutes, or the 1-hour tier's
#: approximation.
#: ``hourtable``: the 1-hour tier's path over its hours kept by the analytics refresh
#: (warehouse/hour_usage.py, issue 17).
_RUN = {"table": fill(_RUN_USAGE_SQL, source=usage.TABLE), _KEPT: _RUN_KEPT_SQL,
        "minute": fill(_RUN_USAGE_SQL, source=usage.minutes(free=False)),
        "hour": _RUN_HOUR_SQL,
        hour_usage.PATH: fill(hour_usage.RUN_SQL + "\n{per_run_h}\n", free_j=_FREE_J,
                              per_run_h=_PER_RUN_H, runs=fill(usage.RUNS, alias=""))
        + run_energy_tail("per_run_h")}
_IDLE = {"table": fill(_IDLE_USAGE_SQL, source=usage.TABLE),
         "minute": fill(_IDLE_USAGE_SQL, source=usage.minutes(free=True)),
         "hour": _IDLE_HOUR_SQL, hour_usage.PATH: fill(hour_usage.IDLE_SQL, free_j=_FREE_J)}
_WIDTH = {"table": timedelta(hours=1), _KEPT: timedelta(hours=1),
          "minute": timedelta(minutes=1),
          "hour": timedelta(hours=1),
          hour_usage.PATH: timedelta(hours=1)}  # time buckets of carbon intensity and PUE
_RUN_COLS = ["gpu_hours", "gpu_kwh", "it_kwh", "facility_kwh", "carbon_kg"]
#: :func:`_run_statement` of a range without parts: no rows, the columns' types.
_NO_KEYS = ("SELECT {keys}, " + ", ".join(fill("NULL::DOUBLE AS {c}", c=c) for c in _RUN_COLS)
            + " WHERE FALSE")
_NO_RUNS = fill(_NO_KEYS, keys="NULL::VARCHAR AS job_id, NULL::INTEGER AS run_index")
_KEY_TYPES = {"gpus": "INTEGER"}  # the job keys that are not text
_NO_SCOPE = {"partition": None, "rack": None}

RESOLUTIONS = ("minute", "hour")


def _check(res: str | None) -> str | None:
    if res is not None and res not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {RESOLUTIONS}, not {res!r}")
    return res


def _carbon_params(opts: Options, width: timedelta) -> dict:
    return carbon.intensity_params(region=opts.region, fallback_g=opts.fallback_g_per_kwh,
                                   max_age_h=opts.max_age_h, pue=opts.pue, width=width)


def energy_by(cur, *, start: datetime, end: datetime, by: str = "rack",
              opts: Options | None = None) -> pd.DataFrame:
    """Energy (kWh: gpu, other = non-GPU node power, it, facility = it x PUE) and carbon
    (kg) grouped by fleet, rack, node, partition, hour or day, from counter-based hourly
    GPU energy. The whole hours' node values are read where the analytics refresh keeps
    them (warehouse/node_energy.py:serves), else computed live; the same answers (sums
    in another order)."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    opts = opts or Options()
    kept = node_energy.serves(cur, start, end)
    sql = fill(_HOURLY_SQL, nh=_LIVE_NH if kept is None else _KEPT_NH,
               ctes=carbon.intensity_ctes().strip(), group=GROUPS[by], by=by,
               join="LEFT JOIN nodes n USING (node)" if by in _NODE_GROUPS else "")
    params = {"start": start, "end": end, "buckets_lo": start, "node_w": opts.node_overhead_w,
              "max_node_w": MAX_NODE_W, **_carbon_params(opts, timedelta(hours=1))}
    if kept is not None:  # the kept whole hours; live from the last one's end
        params.update(start=kept[1], kept_lo=kept[0], kept_hi=kept[1])
    return cur.execute(sql, params).df()


def _parts(cur, start: datetime, end: datetime, resolution: str | None, idle_pct: float,
           usage_idle_pct: float | None = None) -> list[usage.Part]:
    """The parts of a range (warehouse/usage.py:plan; ``usage_idle_pct`` as its
    ``idle_pct``), the 1-hour tier's whole hours read from the table the refresh keeps
    where it serves them with ``idle_pct`` (warehouse/hour_usage.py); a forced
    ``resolution`` computes live."""
    res = _check(resolution)
    if res is not None:
        return usage.plan(cur, start, end, resolution=res)
    return hour_usage.substitute(
        cur, usage.plan(cur, start, end, idle_pct=usage_idle_pct), idle_pct)


def _run_sql(path: str, keys: list[str] | None = None) -> str:
    """The per-run energy query of a part path (:data:`_RUN`): its sums per run, or per
    ``keys`` (columns of ``jobs``, :data:`JOB_KEYS`) with the job joined to each row
    (issue 17: summed per run first, then per user, energy by user took ~0.18 s over a
    24,576-GPU week, ~0.1 s without the 470,169 runs' sums)."""
    if keys is None:
        by = {"group": "p.job_id, p.run_index", "join": ""}
    else:
        by = {"group": ", ".join("p.job_id" if k == "job_id" else fill("j.{k}", k=k)
                                 for k in keys),
              "join": "LEFT JOIN jobs j ON j.job_id = p.job_id"}
    return fill(_RUN[path], ctes=carbon.intensity_ctes().strip(), **by)


def _run_statement(cur, *, start: datetime, end: datetime, opts: Options,
                   resolution: str | None, runs: list[tuple[str, int]] | None = None,
                   wanted: tuple[str, dict] | None = None,
                   keys: list[str] | None = None) -> tuple[str, dict]:
    """The per-run energy query of ``[start, end)`` as one statement ``(sql, params)``
    (columns job_id, run_index, or ``keys``, and :data:`_RUN_COLS`): each part's query
    (warehouse/usage.py:plan, :func:`_run_sql`) summed per run (or key) across the parts
    (usage.union), so callers wrap it in SQL; ``wanted``: the runs as a statement's rows
    (usage.wanted_from) and its parameters, not ``runs``."""
    params = {"node_w": opts.node_overhead_w, "idle_pct": float(opts.idle_util_pct),
              "runs": None if runs is None else [f"{j}:{int(r)}" for j, r in runs],
              **_NO_SCOPE}
    if wanted is not None:
        params = {**params, **wanted[1], "runs": []}
    statements, kept = [], None
    for p in _parts(cur, start, end, resolution, opts.idle_util_pct):
        path = p.path
        if path == "table":  # the table's hours from their sums per run where kept
            kept = run_usage.serves(cur) if kept is None else kept
            path = _KEPT if kept else path
        sql = _run_sql(path, keys)
        if wanted is not None:
            assert sql.count(usage.WANTED) == 1
            sql = sql.replace(usage.WANTED, usage.wanted_from(wanted[0]))
        statements.append(usage.bind(sql, start=p.start, end=p.end, **params,
                                     **_carbon_params(opts, _WIDTH[path])))
    if keys is not None:
        return usage.union(statements, keys, _RUN_COLS, empty=fill(_NO_KEYS, keys=", ".join(
            fill("NULL::{t} AS {k}", t=_KEY_TYPES.get(k, "VARCHAR"), k=k) for k in keys)))
    return usage.union(statements, ["job_id", "run_index"], _RUN_COLS, empty=_NO_RUNS)


def _embodied(df: pd.DataFrame, opts: Options) -> pd.DataFrame:
    g = carbon.embodied_g_per_gpu_hour(opts.embodied_kg_per_gpu, opts.gpu_lifetime_years)
    df["embodied_kg"] = df["gpu_hours"] * g / 1000.0
    return df


def run_energy(cur, *, start: datetime, end: datetime, opts: Options | None = None,
               resolution: str | None = None,
               runs: list[tuple[str, int]] | None = None,
               wanted: tuple[str, dict] | None = None) -> pd.DataFrame:
    """Energy and carbon of each job run within ``[start, end)``: gpu_hours, gpu_kwh,
    it_kwh (with the node's non-GPU share), facility_kwh, carbon_kg, embodied_kg.

    By default whole hours come from ``gpu_usage_1h`` (or ``run_usage_1h``, its sums per
    run, while it serves: warehouse/run_usage.py) and the rest live (see
    warehouse/usage.py:plan); ``resolution`` ``"minute"`` or ``"hour"`` computes the
    whole range live from that tier. ``runs``: only these ``(job_id, run_index)``;
    ``wanted``: only the runs a statement gives (:func:`_run_statement`)."""
    opts = opts or Options()
    with own_cursor(cur) as own, transaction(own):  # the kept rows run_usage.serves checked
        df = own.execute(*_run_statement(own, start=start, end=end, opts=opts,
                                         resolution=resolution, runs=runs,
                                         wanted=wanted)).df()
    return _embodied(df, opts)


#: The job columns :func:`job_energy` groups by: ``by="job_id"`` keeps the job's identity.
JOB_KEYS = {"job_id": ["job_id", "name", "user_name", "partition", "job_type"],
            **{k: [k] for k in ("name", "user_name", "account", "partition", "job_type",
                                "gpus")}}

#: Per job (with its name, user, partition, type and GPUs) or per user, the sums of the
#: per-run energy registered as ``energy_runs`` (:func:`sum_runs`), most facility kWh
#: first, ties by the group (users without a name last); 0 where none is known. ``fsum``:
#: equal totals are equal whatever order the rows are added in, so ties keep that order.
_SUM_RUNS_SQL = {by: fill("""
SELECT {keys}, coalesce(fsum(r.gpu_hours), 0) AS gpu_hours,
       coalesce(fsum(r.facility_kwh), 0) AS facility_kwh,
       coalesce(fsum(r.carbon_kg), 0) AS carbon_kg
FROM energy_runs r LEFT JOIN jobs j USING (job_id)
GROUP BY ALL ORDER BY facility_kwh DESC, {order} LIMIT $limit
""", keys=keys, order=order) for by, keys, order in (
    ("job_id", ", ".join(["r.job_id", *(f"j.{k}" for k in [*JOB_KEYS["job_id"][1:], "gpus"])]),
     "job_id"),
    ("user_name", "j.user_name", "user_name NULLS LAST"))}


def sum_runs(cur, runs: pd.DataFrame, *, by: str = "job_id",
             limit: int | None = None) -> pd.DataFrame:
    """:func:`run_energy`'s ``runs`` summed per job (``by="job_id"``: job_id, name,
    user_name, partition, job_type, gpus) or per user (``"user_name"``): gpu_hours,
    facility_kwh, carbon_kg (GPU-hours, kWh, kg CO2e); most facility energy first, the
    first ``limit`` (None: all). Summed and named in DuckDB, on a cursor of its own
    (issue 17: a 24,576-GPU week's 421,000 runs grouped in pandas and their 400,000 jobs
    named took the weekly report ~250 MiB above its base)."""
    if by not in _SUM_RUNS_SQL:
        raise ValueError(f"by must be one of {sorted(_SUM_RUNS_SQL)}, not {by!r}")
    with own_cursor(cur) as own:
        own.register("energy_runs", runs)  # the columns it reads, without a copy
        return own.execute(_SUM_RUNS_SQL[by], {"limit": limit}).df()


def job_energy(cur, *, start: datetime, end: datetime, by: str = "job_id",
               opts: Options | None = None, resolution: str | None = None) -> pd.DataFrame:
    """:func:`run_energy` summed per job (``by="job_id"``: job_id, name, user_name,
    partition, job_type), or per ``user_name``, ``partition`` or another column of
    :data:`JOB_KEYS`, largest carbon first."""
    if by not in JOB_KEYS:
        raise ValueError(f"by must be one of {sorted(JOB_KEYS)}, not {by!r}")
    opts = opts or Options()
    keys = JOB_KEYS[by]
    with own_cursor(cur) as own, transaction(own):  # the kept rows run_usage.serves checked
        out = own.execute(*_run_statement(own, start=start, end=end, opts=opts,
                                          resolution=resolution, keys=keys)).df()
    cols = _RUN_COLS
    out[cols] = out[cols].fillna(0.0)  # a key without any energy sums to 0, as in pandas
    out = _embodied(out, opts)
    return out.sort_values("carbon_kg", ascending=False).reset_index(drop=True)


def idle_energy(cur, *, start: datetime, end: datetime,
                idle_util_pct: float = default("energy.idle_util_pct"),
                resolution: str | None = None) -> pd.DataFrame:
    """GPU-hours and energy (kWh) of unallocated, allocated-but-idle (maximum utilisation
    of the minute, or of the whole hour on the hour tier, below ``idle_util_pct``) and
    busy GPUs: state, gpu_hours, gpu_kwh, mean_power_w (W); a state without GPU-seconds
    is left out. Whole hours come from ``gpu_usage_1h`` where it was computed with this
    threshold; ``resolution`` forces one live tier (see :func:`run_energy`)."""
    res = _check(resolution)
    params = {"idle_pct": float(idle_util_pct), "runs": None, **_NO_SCOPE}
    frames = [cur.execute(*usage.bind(_IDLE[p.path], start=p.start, end=p.end, **params))
              .df()[["state", "gpu_hours", "gpu_kwh"]]
              for p in _parts(cur, start, end, res, idle_util_pct, idle_util_pct)]
    df = usage.combine(frames, ["state"], ["gpu_hours", "gpu_kwh"])
    df = df[df["gpu_hours"] > 0].sort_values("state").reset_index(drop=True)
    return df.assign(mean_power_w=df["gpu_kwh"] * 1000.0 / df["gpu_hours"])


#: The failures that ended in [$fail_start, $fail_end): their columns ``{cols}``.
_FAILURES_IN = ("SELECT {cols} FROM failures"
                " WHERE end_ts >= $fail_start AND end_ts < $fail_end")
#: Their runs, as the runs filter's rows (issue 17: the 28,530 of a day at 24,576 GPUs
#: went from a frame to a list of texts in Python, then into each statement as a
#: parameter).
_FAILED_RUNS = fill(_FAILURES_IN, cols="job_id, run_index")
#: Those failures (``{fails}`` of :data:`_LOST_SQL`).
_FAILED = "(" + fill(_FAILURES_IN, cols="job_id, run_index, category, reason, "
                                         "gpu_hours_lost") + ")"
_FIRST_START_SQL = fill(_FAILURES_IN, cols="min(start_ts), count(*)")

#: The GPU-hours lost to each failure of ``{fails}`` (rows of job_id, run_index,
#: gpu_hours_lost, ...) priced at its run's facility kWh and kg CO2e per GPU-hour
#: (``{runs}``: per run gpu_hours, facility_kwh, carbon_kg); a run without energy or
#: without GPU-hours takes $fleet_kwh and $fleet_kg per GPU-hour (NULL: the figure is
#: NULL). The one definition of lost_kwh and lost_carbon_kg (:func:`failure_carbon`: the
#: Energy page's failures and the weekly report's).
_LOST_SQL = """
SELECT f.*,
       coalesce(f.gpu_hours_lost * r.facility_kwh / r.per_h,
                f.gpu_hours_lost * $fleet_kwh::DOUBLE) AS lost_kwh,
       coalesce(f.gpu_hours_lost * r.carbon_kg / r.per_h,
                f.gpu_hours_lost * $fleet_kg::DOUBLE) AS lost_carbon_kg
FROM {fails} f
LEFT JOIN (SELECT job_id, run_index, facility_kwh::DOUBLE AS facility_kwh,
                  carbon_kg::DOUBLE AS carbon_kg,
                  CASE WHEN gpu_hours::DOUBLE > 0 THEN gpu_hours::DOUBLE END AS per_h
           FROM {runs}) r USING (job_id, run_index)
"""

#: :data:`_LOST_SQL` per failure, or summed per category (issue 17: 201,296 failed runs
#: of a 24,576-GPU week went to pandas twice, as failures and as run energy, and were
#: merged there only for the Energy page to sum them per category).
_LOST_BY = {
    None: "SELECT job_id, run_index, category, reason, gpu_hours_lost, lost_kwh, "
          "lost_carbon_kg FROM ({lost}) ORDER BY job_id, run_index",
    "category": "SELECT category, sum(gpu_hours_lost) AS gpu_hours_lost, "
                "coalesce(sum(lost_kwh), 0.0) AS lost_kwh, "
                "coalesce(sum(lost_carbon_kg), 0.0) AS lost_carbon_kg "
                "FROM ({lost}) GROUP BY category ORDER BY category",
}


def per_reporting_gpu_hour(facility_kwh: float, carbon_kg: float,
                           reporting_gpu_h: float) -> tuple[float, float]:
    """The fleet's facility kWh and kg CO2e per GPU-hour of telemetry (``reporting_gpu_h``,
    warehouse/fleet_hours.py): what a failed run without energy of its own is priced at
    (:data:`_LOST_SQL`), the one definition the weekly report and the Energy page use
    (0 without telemetry)."""
    if not reporting_gpu_h:
        return 0.0, 0.0
    return facility_kwh / reporting_gpu_h, carbon_kg / reporting_gpu_h


def fleet_per_gpu_hour(cur, *, start: datetime, end: datetime,
                       opts: Options | None = None) -> tuple[float, float]:
    """:func:`per_reporting_gpu_hour` of ``[start, end)``: the fleet's energy
    (:func:`energy_by`) over its reporting GPU-hours."""
    fleet = energy_by(cur, start=start, end=end, by="fleet", opts=opts)
    reporting = fleet_hours.fleet_hours(cur, start=start, end=end)["reporting_gpu_h"]
    return per_reporting_gpu_hour(float(fleet["facility_kwh"].sum()),
                                  float(fleet["carbon_kg"].sum()), reporting)


def failure_carbon(cur, *, start: datetime, end: datetime, opts: Options | None = None,
                   resolution: str | None = None, by: str | None = None,
                   fleet: tuple[float, float] | None = None) -> pd.DataFrame:
    """Energy and carbon of the GPU-hours lost to each classified failure that ended in
    ``[start, end)``: lost_kwh = gpu_hours_lost x the run's facility kWh per GPU-hour,
    carbon in proportion; a run without energy or GPU-hours of its own at the fleet's
    figures per GPU-hour (``fleet``: (kWh, kg CO2e) per GPU-hour; None: those of the
    window, :func:`fleet_per_gpu_hour`), as the weekly report prices it (:data:`_LOST_SQL`;
    before, the page counted such runs as 0 and the report did not: 14,766 of a
    24,576-GPU week's 513,064 GPU-hours lost, issue 17). Columns: job_id, run_index,
    category, reason, gpu_hours_lost, lost_kwh, lost_carbon_kg; with ``by="category"``:
    category, gpu_hours_lost, lost_kwh, lost_carbon_kg, summed per category."""
    if by not in _LOST_BY:
        raise ValueError(f"by must be one of {sorted(map(str, _LOST_BY))}, not {by!r}")
    window = {"fail_start": start, "fail_end": end}
    opts = opts or Options()
    with own_cursor(cur) as own, transaction(own):  # the kept rows run_usage.serves checked
        first, n = own.execute(_FIRST_START_SQL, window).fetchall()[0]
        if not n:
            cols = {None: ["job_id", "run_index", "category", "reason"],
                    "category": ["category"]}
            return pd.DataFrame(columns=cols[by] + ["gpu_hours_lost", "lost_kwh",
                                                   "lost_carbon_kg"])
        # from the hour of the earliest run's start: a run has no usage outside its
        # allocations, and whole hours are read from the usage table (issue 17: the
        # earliest runs' partial hour was computed per minute, and priced per minute)
        lo = min(floor_hour(first), start) if first is not None else start
        fleet_kwh, fleet_kg = fleet if fleet is not None else fleet_per_gpu_hour(
            own, start=start, end=end, opts=opts)
        runs, params = _run_statement(own, start=lo, end=end, opts=opts,
                                      resolution=resolution, wanted=(_FAILED_RUNS, window))
        sql = fill(_LOST_BY[by], lost=fill(_LOST_SQL, fails=_FAILED, runs=f"({runs})"))
        return own.execute(sql, {**params, **window, "fleet_kwh": fleet_kwh,
                                 "fleet_kg": fleet_kg}).df()

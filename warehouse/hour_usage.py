"""The 1-hour tier's job and idle energy per hour, kept (``gpu_usage_from_1h``, issue 17).

Where no ``gpu_usage_1h`` hour exists (history older than the 1-minute tier, imported
hour rows), job and idle energy take the 1-hour tier's path of
warehouse/queries/energy.py: every allocation-hour joined with every GPU-hour of the
range, which for a 24,576-GPU week took ~11 s of CPU. The analytics refresh
(warehouse/fleet_hours.py) keeps the same figures per hour for such hours, in parts
that do not depend on the range, so a query sums ~5,000 rows an hour instead:

- ``held``: per hour, node, run and idle flag, the allocated seconds and energy of the
  GPU-hours an allocation's share holds whole (or that have no data seconds);
- ``free``: per hour and node, the data seconds and energy of GPU-hours no allocation held;
- ``idle_power``: per hour, the data seconds and energy of GPU-hours idle the whole hour
  (the query's fleet idle power is their sums over the range);
- ``part`` (per GPU-hour) and ``part_run`` (per allocation of it): GPU-hours held for only
  part of their data seconds, whose unallocated seconds take the range's idle power: the
  hour's energy, data and allocated seconds (and the allocation's share) as they are.

A query reads these for a part of its range that covers whole hours, every one of which
the refresh computed with its idle threshold from unchanged inputs (``fleet_hours_1h``'s
row: samples, the allocations' GPU-microseconds, time moment and GPU-weighted
microseconds (warehouse/fleet_hours.py:MOMENTS), ``energy_idle_pct``); otherwise it
computes the part live as before (:func:`substitute`). The answers are the live path's (sums in
another order: tests/test_hour_usage.py). Units: seconds, joules; naive UTC.
"""

from __future__ import annotations

from datetime import datetime

from warehouse.db import fill
from warehouse.usage import HOUR, WANTED, Part, floor_hour

#: The path :func:`substitute` gives a part the table serves (warehouse/queries/energy.py).
PATH = "hourtable"

_COLUMNS = ("ts, node, kind, job_id, run_index, gpu_index, idle, gpu_s, energy_j, share, "
            "hour_j, data_s, alloc_s")


def insert_sql(hour_ctes: str) -> str:
    """The rows of the hours of [$start, $end) (whole hours) that have no
    ``gpu_usage_hours`` row, from the 1-hour tier's CTEs ``hour_ctes`` (``ao``, ``hours``,
    ``held`` of warehouse/queries/energy.py). Parameters: $start, $end, $idle_pct."""
    return fill("""
INSERT INTO gpu_usage_from_1h ({columns})
WITH {hour_ctes},
g AS (
    SELECT h.ts, h.node, h.gpu_index, h.j, h.data_s, coalesce(held.held_s, 0) AS held_s,
           least(coalesce(held.held_s, 0), h.data_s) AS alloc_s,
           coalesce(h.util_pct_max, 0) < $idle_pct AS idle
    FROM hours h LEFT JOIN held USING (node, gpu_index, ts)
    WHERE h.ts NOT IN (SELECT ts FROM gpu_usage_hours WHERE ts >= $start AND ts < $end)
),
x AS (
    SELECT ao.job_id, ao.run_index, g.*, ao.overlap_s / g.held_s AS share,
           g.alloc_s > 0 AND g.alloc_s < g.data_s AS partial
    FROM ao JOIN g USING (node, gpu_index, ts) WHERE g.held_s > 0
)
SELECT ts, node, 'held', job_id, run_index, NULL, idle, sum(alloc_s * share),
       sum(CASE WHEN alloc_s <= 0 THEN 0.0 ELSE j END * share), NULL, NULL, NULL, NULL
FROM x WHERE NOT partial GROUP BY ts, node, job_id, run_index, idle
UNION ALL
SELECT ts, node, 'part_run', job_id, run_index, gpu_index, idle, NULL, NULL, share, j,
       data_s, alloc_s
FROM x WHERE partial
UNION ALL
SELECT ts, node, 'free', NULL, NULL, NULL, NULL, sum(data_s), sum(j), NULL, NULL, NULL, NULL
FROM g WHERE alloc_s <= 0 AND data_s > 0 GROUP BY ts, node
UNION ALL
SELECT ts, node, 'part', NULL, NULL, gpu_index, idle, NULL, NULL, NULL, j, data_s, alloc_s
FROM g WHERE alloc_s > 0 AND alloc_s < data_s
UNION ALL
SELECT ts, NULL, 'idle_power', NULL, NULL, NULL, NULL, sum(data_s), sum(j), NULL, NULL,
       NULL, NULL
FROM g WHERE idle AND data_s > 0 GROUP BY ts
""", columns=_COLUMNS, hour_ctes=hour_ctes)


#: The range's idle power ``p.w`` (W) from the table's hours of [$start, $end).
_IDLE_POWER = """
p AS (
    SELECT sum(energy_j) / nullif(sum(gpu_s), 0) AS w FROM gpu_usage_from_1h
    WHERE kind = 'idle_power' AND ts >= $start AND ts < $end
),
t AS (SELECT * FROM gpu_usage_from_1h WHERE ts >= $start AND ts < $end)"""

#: Per run, hour and node over the table (``per_h``: job_id, run_index, ts, node, gpu_s,
#: gpu_j), the runs filtered by ``{runs}``; ``{free_j}`` is the energy of a GPU-hour's
#: unallocated seconds (columns j, data_s, alloc_s and the idle power p.w).
RUN_SQL = fill("""
WITH {wanted}, {idle_power},
per_h AS (
    SELECT job_id, run_index, ts, node, gpu_s, energy_j AS gpu_j
    FROM t WHERE kind = 'held' AND {runs}
    UNION ALL
    SELECT job_id, run_index, ts, node, alloc_s * share AS gpu_s,
           (j - {free_j}) * share AS gpu_j
    FROM (SELECT *, hour_j AS j FROM t WHERE kind = 'part_run' AND {runs}), p
),""", wanted=WANTED, idle_power=_IDLE_POWER)

#: The three states' seconds and energy over the table, as the live hour path's ``parts``.
IDLE_SQL = fill("""
WITH {idle_power},
parts AS (
    SELECT 'unallocated' AS state, gpu_s AS s, energy_j AS j FROM t WHERE kind = 'free'
    UNION ALL
    SELECT CASE WHEN idle THEN 'allocated_idle' ELSE 'busy' END, gpu_s, energy_j
    FROM t WHERE kind = 'held'
    UNION ALL
    SELECT 'unallocated', data_s - alloc_s, {free_j}
    FROM (SELECT *, hour_j AS j FROM t WHERE kind = 'part'), p
    UNION ALL
    SELECT CASE WHEN idle THEN 'allocated_idle' ELSE 'busy' END, alloc_s, j - {free_j}
    FROM (SELECT *, hour_j AS j FROM t WHERE kind = 'part'), p
)
SELECT state, sum(s) / 3600.0 AS gpu_hours, sum(j) / 3.6e6 AS gpu_kwh,
       sum(j) / nullif(sum(s), 0) AS mean_power_w
FROM parts GROUP BY 1 ORDER BY 1
""", idle_power=_IDLE_POWER)


#: The hours of [$start, $end) kept with $idle_pct (the shares' microseconds, kept and
#: now, are compared by fleet_hours.table_serves: a changed share, same microseconds).
_SERVES_SQL = """
SELECT count(alloc_share_us) FROM fleet_hours_1h
WHERE ts >= $start AND ts < $end AND energy_idle_pct = $idle_pct
"""


def serves(cur, start: datetime, end: datetime, idle_pct: float | None) -> bool:
    """Whether the table holds every hour of ``[start, end)`` (whole hours), computed with
    ``idle_pct`` from the inputs the 1-hour tier and the allocations hold now (their
    samples, allocated microseconds, time moments and GPUs (fleet_hours.MOMENTS, summed
    from ``run_nodes``: fleet_hours.RUN_NODE_MOMENTS), and
    shares: the energy splits a shared GPU-hour by them). ``idle_pct`` None: only
    whether ``fleet_hours_1h``'s rows of the hours were computed from those inputs
    (their energy rows aside)."""
    from warehouse import fleet_hours  # the ledger's checks (fleet_hours imports this)

    if not fleet_hours.table_serves(cur, start, end, shares=True):  # also: the tables
        return False                                                   # exist here
    if idle_pct is None:
        return True
    n = cur.execute(_SERVES_SQL, {"start": start, "end": end,
                                  "idle_pct": float(idle_pct)}).fetchall()[0][0]
    return n == int((end - start) / HOUR)


def substitute(cur, parts: list[Part], idle_pct: float) -> list[Part]:
    """``parts`` (warehouse/usage.py:plan) with each 1-hour tier part that covers whole
    hours the table serves (:func:`serves`) read from it (path :data:`PATH`)."""
    out = []
    for p in parts:
        whole = p.start == floor_hour(p.start) and p.end == floor_hour(p.end)
        if p.path == "hour" and whole and p.start < p.end and serves(cur, p.start, p.end,
                                                                     idle_pct):
            p = Part(PATH, p.start, p.end)
        out.append(p)
    return out

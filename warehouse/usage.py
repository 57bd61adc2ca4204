"""GPU usage per hour, node and job run (``gpu_usage_1h``), and how queries read it.

Which allocation held each GPU, minute by minute, is what the energy-by-job, idle-energy
and utilisation-by-user queries need; re-deriving it per query from the 1-minute tier
reads ~60 rows per GPU-hour and joins them with every allocation. ``refresh_usage`` does
it once per hour, incrementally, into ``gpu_usage_1h``: per hour, node and job run

- ``gpu_s``: GPU-seconds, each allocation's overlap with the minutes that have telemetry;
  the row with ``job_id`` NULL holds what no allocation held: per minute the covered
  seconds minus the allocated seconds, never below 0;
- ``util_s``: those seconds x utilisation / 100 (the minute's mean);
- ``energy_j``: joules, each minute's energy prorated by overlap / 60 s (the unallocated
  row: the rest of the minute's energy, never below 0);
- ``idle_s``, ``idle_j``: the part of ``gpu_s`` and ``energy_j`` in minutes whose maximum
  utilisation stayed below the idle threshold (``idle_pct``).

The same per-minute rows, computed live (:func:`minutes`), serve the parts of a range the
table does not hold, so a query sums table hours and live minutes of one definition.
The ledger ``gpu_usage_hours`` records, per computed hour, what it was computed from;
an hour the 1-minute tier reaches is recomputed (:func:`due_hours`) when it has no
ledger row, when the idle threshold changed, when its samples (``sum(samples)`` of the
1-hour tier) changed, or when its allocations changed: within ``recheck_days`` exactly
(an order-independent hash-sum of the allocations clipped to the hour), before that by
the allocated GPU-microseconds and exact moments (warehouse/kept_hours.py:ALLOC_MOMENTS,
migrations 22 and 23) of its day, a chunk of 2 days per refresh (kept_hours.heal_window).

Units: seconds, joules, percent; timestamps naive UTC, ranges ``[start, end)``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from warehouse import meta, run_usage
from warehouse.clock import HOUR, ceil_hour, floor_hour
from warehouse.db import fill, transaction
from warehouse.kept_hours import (
    ALLOC_MOMENTS,
    SIGNATURES,
    due_from,
    heal_window,
    in_slices,
    move_heal_cursor,
    recheck_start,
)
from warehouse.rollups import MINUTE_CUTOFF_KEY, merge_ranges
from warehouse.writer import yield_to_urgent

SLICE = timedelta(hours=6)  # hours recomputed per transaction
#: Hours one refresh recomputes at most, the newest first: a first backfill of the minute
#: tier's 90 days then takes many refreshes instead of holding the writer for minutes
#: (~0.6 s an hour at 24,576 GPUs), and the pages read the hours not yet computed live.
MAX_HOURS = 48
MINUTE_TIER_MAX = timedelta(days=2)  # longer live parts read the 1-hour tier

#: Scope on ``nodes n``: optional partition and rack, as parameters.
SCOPE = ("($partition::VARCHAR IS NULL OR n.partition = $partition) "
         "AND ($rack::VARCHAR IS NULL OR n.rack = $rack)")
_NODES = fill("($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL"
              " OR node IN (SELECT node FROM nodes n WHERE {scope}))", scope=SCOPE)
#: The runs ``$runs`` ('job_id:run_index' texts) as rows of job id (the text before the
#: last ':') and run index (the rest, when it is an integer as SQL writes one: '7', '-3',
#: not '07', ' 7', '7.0' or '-0'; else NULL, matching nothing, as the texts compared
#: before did not), once per statement: each use of a list parameter in a statement costs
#: its conversion again (~20 ms for the 28,530 failed runs of a day at 24,576 GPUs, issue
#: 17). A statement using :data:`RUNS` starts its ``WITH`` with it.
WANTED = """wanted_runs AS MATERIALIZED (
    SELECT job_id, CASE WHEN regexp_full_match(tail, '0|-?[1-9][0-9]*')
                        THEN TRY_CAST(tail AS INTEGER) END AS run_index
    FROM (SELECT substr(run, 1, length(run) - strpos(reverse(run), ':')) AS job_id,
                 substr(run, length(run) - strpos(reverse(run), ':') + 2) AS tail
          FROM (SELECT unnest($runs::VARCHAR[]) AS run))
)"""


def wanted_from(rows: str) -> str:
    """:data:`WANTED` whose runs are the rows of the statement ``rows`` (columns
    ``job_id`` and ``run_index``) instead of ``$runs``, for a statement given ``$runs``
    as an empty list (not NULL, so that :data:`RUNS` filters)."""
    return fill("wanted_runs AS MATERIALIZED ({rows})", rows=rows)


#: Only the runs ``$runs`` (NULL: all; the CTE :data:`WANTED`), matched on job id and run
#: index (issue 17: the text of job and run built for each usage row and matched took
#: ~0.13 s of the energy of failures over a 24,576-GPU week, 0.22 -> 0.16 s).
RUNS = ("($runs::VARCHAR[] IS NULL"
        " OR ({alias}job_id, {alias}run_index) IN (SELECT job_id, run_index FROM wanted_runs))")
_RUNS = fill(RUNS, alias="")

#: The measures of a usage row from its seconds, joules, utilisation and idle flag.
_MEASURES = """gpu_s, gpu_s * util / 100.0 AS util_s, energy_j,
           CASE WHEN idle THEN gpu_s ELSE 0.0 END AS idle_s,
           CASE WHEN idle THEN energy_j ELSE 0.0 END AS idle_j"""

#: Seconds of allocation ``a`` (clipped to ``[a.s, a.e)``) in minute ``m``.
_OVERLAP_S = ("greatest(0, epoch_us(least(m.ts + INTERVAL 1 MINUTE, a.e))"
              " - epoch_us(greatest(m.ts, a.s))) / 1e6")

#: Per MIG GPU instance and minute of the GPUs MIG allocations hold (``mw``): its
#: fraction of the GPU's activity (issue 21): SM activity (else graphics-engine
#: activity) x the instance's compute slices, over the GPU's instances; when every
#: instance was idle, its memory used over theirs; when none used memory, its slices
#: over theirs (``frac``); and its slices over theirs (``hold``, the part of the GPU it
#: is). Per MIG allocation and minute (``mf``): the sums over its instances.
_MIG_FRACTIONS = """
mi AS (
    SELECT date_trunc('minute', s.ts) AS ts, s.node, s.gpu_index, s.gpu_i_id,
           coalesce(avg(coalesce(s.sm_active_pct, s.gr_active_pct)), 0) AS act,
           coalesce(avg(s.mem_used_mib), 0) AS mem,
           coalesce(TRY_CAST(regexp_extract(any_value(s.gpu_i_profile), '^([0-9]+)g[.]', 1)
                             AS INTEGER), 1) AS slices
    FROM gpu_mig_samples s
    WHERE s.ts >= date_trunc('minute', $start::TIMESTAMP) AND s.ts < $end
      AND EXISTS (SELECT 1 FROM ua0 WHERE ua0.gpu_i_ids IS NOT NULL
                  AND ua0.node = s.node AND ua0.gpu_index = s.gpu_index)
    GROUP BY ALL
),
mw AS (
    SELECT ts, node, gpu_index, gpu_i_id,
           CASE WHEN sum(act * slices) OVER g > 0 THEN act * slices / sum(act * slices) OVER g
                WHEN sum(mem) OVER g > 0 THEN mem / sum(mem) OVER g
                ELSE slices / sum(slices) OVER g END AS frac,
           slices / sum(slices) OVER g AS hold
    FROM mi WINDOW g AS (PARTITION BY ts, node, gpu_index)
),
mf AS (
    SELECT a.job_id, a.run_index, a.node, a.gpu_index, a.s, a.e, w.ts,
           sum(w.frac) AS frac, sum(w.hold) AS hold
    FROM ua0 a JOIN mw w ON w.node = a.node AND w.gpu_index = a.gpu_index
     AND list_contains(a.gpu_i_ids, w.gpu_i_id)
     AND w.ts >= date_trunc('minute', a.s) AND w.ts < a.e
    WHERE a.gpu_i_ids IS NOT NULL
    GROUP BY ALL
)"""

#: Whole GPUs and shares (``ua``) per minute of telemetry they held in [$start, $end).
_WHOLE = """
    SELECT m.ts, a.node, a.gpu_index, a.job_id, a.run_index, a.shared,
           {overlap_s} AS gpu_s, coalesce(m.energy_j, 0) AS minute_j,
           a.frac, a.frac AS hold,
           coalesce(m.util_pct_avg, 0) AS util,
           coalesce(m.util_pct_max, 0) < $idle_pct AS idle
    FROM ua a JOIN gpu_samples_1m m ON m.node = a.node AND m.gpu_index = a.gpu_index
     AND m.ts >= date_trunc('minute', a.s) AND m.ts < a.e
    WHERE m.ts >= date_trunc('minute', $start::TIMESTAMP) AND m.ts < $end  -- zone maps
      AND a.gpu_i_ids IS NULL"""

#: Per allocation and minute of telemetry in [$start, $end): the allocation's seconds in
#: the minute and its share of the minute's energy (``um``). Each allocation weighs its
#: seconds x its fraction of the GPU (``frac``): 1 for a whole GPU; its ``share`` for
#: Slurm shards and MPS; its MIG instances' fraction of the GPU's activity (``mf``; a
#: minute without instance samples gives it nothing); and gets energy x weight / max(60 s,
#: the weights of the shared allocations on the GPU in the minute), or where unshared ones
#: hold part of the minute (``un``: at their first and last minute) its weight's part of
#: what they left (60 s - their weight). A GPU held by one allocation at a time
#: gives it energy x overlap x frac / 60 s. A shared GPU (time-slicing, MPS: allocations of
#: other runs overlapping on the same GPU, issue 21) is split by weight, so the
#: allocations never sum to more than the GPU's energy (two whole-GPU jobs holding a whole
#: minute get half each; each once got all of it): time-sliced processes share one
#: activity reading, so equal shares per second held is the split it can support. What
#: no allocation was given (idle shards, idle MIG instances) stays with the unallocated
#: row (``uf``): attributed + unattributed = the GPU's energy. ``gpu_s`` is the seconds
#: held x the part of the GPU held (``hold``: the share; for MIG the instances' slices
#: over the GPU's instances'), so the parts nobody held are unallocated GPU-seconds too.
#: Shared allocations are found among all allocations of the scope on the GPUs the runs
#: held (every weight of a run's split is on its GPU), so a query for some runs gives
#: them the same shares as the table.
_ALLOCATED = fill("""{wanted},
ua_all AS MATERIALIZED (  -- allocations clipped to the range ([s, e); as held:
                         -- [start_ts, end_ts)); ``frac``: a share's part of the GPU
    SELECT job_id, run_index, node, gpu_index, gpu_i_ids, start_ts, end_ts,
           least(greatest(coalesce(share, 1.0), 0.0), 1.0) AS frac,
           greatest(start_ts, $start::TIMESTAMP) AS s,
           least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS e,
           {runs} AS wanted  -- per allocation, not per minute joined (issue 17)
    FROM allocations
    WHERE start_ts < $end AND coalesce(end_ts, $end) > $start AND {nodes}
),
ua0 AS MATERIALIZED (  -- those on the GPUs the runs held (issue 17: the shares of the
                      -- range's every allocation were worked out for a few runs)
    SELECT * FROM ua_all
    WHERE $runs::VARCHAR[] IS NULL
       OR (node, gpu_index) IN (SELECT node, gpu_index FROM ua_all WHERE wanted)
),
ua AS (  -- shared when another run's allocation overlaps on the GPU
    SELECT a.*, EXISTS (SELECT 1 FROM ua0 b  -- an overlap of a is in the range and on a
                                             -- node of the scope: in ua0 (issue 17)
                        WHERE b.node = a.node AND b.gpu_index = a.gpu_index
                          AND b.start_ts < a.e AND coalesce(b.end_ts, a.e) > a.s
                          AND (b.job_id <> a.job_id OR b.run_index <> a.run_index)) AS shared
    FROM ua0 a
),{mig},
um_solo AS ({whole}  -- the runs' unshared allocations: no other weighs (issue 17:
                     -- apart, the many rows of these are not materialised for the split)
      AND NOT a.shared AND a.wanted
),
um0 AS (  -- shared whole GPUs and shares; then MIG allocations in the minutes their GPU
          -- reported
    {whole} AND a.shared
    UNION ALL  -- weighed as shared: alone on its GPU it gets the same (its weight <= 60 s)
    SELECT m.ts, a.node, a.gpu_index, a.job_id, a.run_index, TRUE,
           {overlap_s}, coalesce(m.energy_j, 0), a.frac, a.hold,
           coalesce(m.util_pct_avg, 0), coalesce(m.util_pct_max, 0) < $idle_pct
    FROM mf a JOIN gpu_samples_1m m ON m.node = a.node AND m.gpu_index = a.gpu_index
     AND m.ts = a.ts
    WHERE m.ts >= date_trunc('minute', $start::TIMESTAMP) AND m.ts < $end
),
un AS (  -- the seconds x part held of unshared allocations in the first and last minute
         -- of each (only those can also hold shared ones), on GPUs with shared ones
    SELECT ts, node, gpu_index, sum(greatest(0, epoch_us(least(ts + INTERVAL 1 MINUTE, e))
                                              - epoch_us(greatest(ts, s))) / 1e6 * frac) AS un_w
    FROM (SELECT *, unnest(list_distinct([date_trunc('minute', s),
                                          date_trunc('minute', e - INTERVAL 1 MICROSECOND)]))
                        AS ts
          FROM ua WHERE NOT shared AND gpu_i_ids IS NULL AND e > s
            AND (node, gpu_index) IN (SELECT node, gpu_index FROM ua WHERE shared
                                      UNION SELECT node, gpu_index FROM ua
                                      WHERE gpu_i_ids IS NOT NULL))
    GROUP BY ALL
),
um AS (
    SELECT ts, node, gpu_index, job_id, run_index, {measures}
    FROM (SELECT ts, node, gpu_index, job_id, run_index, gpu_s * hold AS gpu_s, util, idle,
                 gpu_s * frac * minute_j / 60.0 AS energy_j
          FROM um_solo
          UNION ALL  -- the shared split what unshared allocations left of the minute
          SELECT ts, node, gpu_index, job_id, run_index, gpu_s * hold, util, idle,
                 CASE WHEN un_w > 0
                      THEN gpu_s * frac * minute_j / 60.0
                           * coalesce(least(1.0, greatest(0.0, 60.0 - un_w)
                                                 / nullif(held_w, 0)), 0.0)
                      ELSE gpu_s * frac * minute_j / greatest(60.0, held_w) END
          FROM (SELECT *, sum(gpu_s * frac) OVER (PARTITION BY ts, node, gpu_index) AS held_w
                FROM um0 LEFT JOIN un USING (ts, node, gpu_index) WHERE shared)
          WHERE {runs})
)""", whole=fill(_WHOLE, overlap_s=_OVERLAP_S), wanted=WANTED, nodes=_NODES, runs=_RUNS,
                  measures=_MEASURES, overlap_s=_OVERLAP_S,
                  mig=_MIG_FRACTIONS)

#: Per minute of telemetry in [$start, $end): what no allocation held (``uf``).
_FREE = fill("""
uf AS (
    SELECT ts, node, gpu_index, NULL::VARCHAR AS job_id, NULL::INTEGER AS run_index,
           {measures}
    FROM (SELECT m.ts, m.node, m.gpu_index,
                 greatest(0, coalesce(m.covered_s, 0) - coalesce(h.held_s, 0)) AS gpu_s,
                 greatest(0, coalesce(m.energy_j, 0) - coalesce(h.held_j, 0)) AS energy_j,
                 coalesce(m.util_pct_avg, 0) AS util,
                 coalesce(m.util_pct_max, 0) < $idle_pct AS idle
          FROM gpu_samples_1m m
          LEFT JOIN (SELECT ts, node, gpu_index, sum(gpu_s) AS held_s, sum(energy_j) AS held_j
                     FROM um GROUP BY ALL) h USING (ts, node, gpu_index)
          WHERE m.ts >= $start AND m.ts < $end AND {nodes})
)""", measures=_MEASURES, nodes=_NODES)

_COLUMNS = "ts, node, job_id, run_index, gpu_s, util_s, energy_j, idle_s, idle_j"

#: A usage source ``u`` (columns of :data:`_COLUMNS`) read from the table.
TABLE = fill("""{wanted},
u AS (
    SELECT {columns} FROM gpu_usage_1h
    WHERE ts >= $start AND ts < $end AND {nodes} AND {runs}
)""", wanted=WANTED, columns=_COLUMNS, nodes=_NODES, runs=_RUNS)


def minutes(*, free: bool) -> str:
    """A usage source ``u`` computed live from the 1-minute tier, one row per minute:
    the allocated rows, and with ``free`` the unallocated ones (job_id NULL).
    Parameters: $start, $end, $idle_pct, $partition, $rack, $runs (None: all)."""
    if free:
        return fill("{allocated},{free},\nu AS (SELECT {columns} FROM um"
                    " UNION ALL SELECT {columns} FROM uf)",
                    allocated=_ALLOCATED, free=_FREE, columns=_COLUMNS)
    return fill("{allocated},\nu AS (SELECT {columns} FROM um)",
                allocated=_ALLOCATED, columns=_COLUMNS)


def bind(sql: str, **params) -> tuple[str, dict]:
    """``(sql, params)`` with only the parameters the statement names (DuckDB refuses
    others), so every path of a query can be given one set."""
    return sql, {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql)}


# ------------------------------------------------------------------ reading: the plan

@dataclass(frozen=True)
class Part:
    """A piece of a query range and where it is read from: ``"table"``
    (``gpu_usage_1h``), ``"minute"`` (live, 1-minute tier) or ``"hour"`` (live, the
    1-hour tier's approximation)."""

    path: str
    start: datetime
    end: datetime


def split(start: datetime, end: datetime, *, table: tuple[datetime, datetime] | None,
          reach: datetime | None) -> list[Part]:
    """Pure: ``[start, end)`` as parts. ``table``: the whole hours ``[A, B)`` the table
    holds; ``reach``: the hour from which the 1-minute tier is complete (None: no minute
    rows). Live parts before ``reach`` read the 1-hour tier, later ones the 1-minute tier
    (or the 1-hour tier when longer than :data:`MINUTE_TIER_MAX`)."""
    spans = [("live", start, end)]
    if table is not None:
        spans = [("live", start, table[0]), ("table", *table), ("live", table[1], end)]
    parts = []
    for kind, lo, hi in spans:
        if kind == "table":
            parts.append(Part("table", lo, hi))
            continue
        cut = min(max(reach, lo), hi) if reach is not None else hi
        if lo < cut:
            parts.append(Part("hour", lo, cut))
        if cut < hi:
            parts.append(Part("minute" if hi - cut <= MINUTE_TIER_MAX else "hour", cut, hi))
    return [p for p in parts if p.start < p.end]


def minute_reach(cur) -> datetime | None:
    """The hour from which the 1-minute tier is complete: its first row's hour, or the
    next hour when the 1-hour tier reaches further back (retention cut the minute tier
    inside that hour), and never before the first whole hour after retention's minute
    cutoff (``rollups.MINUTE_CUTOFF_KEY``): a backfill older than ``minute_days`` holds
    minute rows of its own GPUs only until the next retention, and hours recomputed
    from them lost every other GPU's usage. None without minute rows. Both minima come
    from statistics."""
    first_m, first_h = cur.execute(
        "SELECT (SELECT min(ts) FROM gpu_samples_1m), (SELECT min(ts) FROM gpu_samples_1h)"
    ).fetchall()[0]  # fetched to the end: the writer's connection registers views next
    if first_m is None:
        return None
    hour = floor_hour(first_m)
    reach = hour if first_h is None or first_h >= hour else ceil_hour(first_m)
    cutoff = meta.get(cur, MINUTE_CUTOFF_KEY)
    return reach if cutoff is None else max(reach, ceil_hour(datetime.fromisoformat(cutoff)))


_LEDGER_SQL = """
SELECT ts FROM gpu_usage_hours
WHERE ts >= $lo AND ts < $hi AND ($idle_pct::DOUBLE IS NULL OR idle_pct = $idle_pct)
ORDER BY ts
"""


def table_hours(cur, start: datetime, end: datetime,
                idle_pct: float | None = None) -> tuple[datetime, datetime] | None:
    """The latest contiguous run ``[A, B)`` of computed hours inside ``[start, end)``
    (computed with ``idle_pct``, if given); None when there is none."""
    lo, hi = ceil_hour(start), floor_hour(end)
    if lo >= hi:
        return None
    hours = [r[0] for r in cur.execute(_LEDGER_SQL, {"lo": lo, "hi": hi, "idle_pct": (
        None if idle_pct is None else float(idle_pct))}).fetchall()]
    if not hours:
        return None
    first = hours[-1]
    for ts in reversed(hours[:-1]):
        if ts != first - HOUR:
            break
        first = ts
    return first, hours[-1] + HOUR


def plan(cur, start: datetime, end: datetime, *, resolution: str | None = None,
         idle_pct: float | None = None) -> list[Part]:
    """The parts of ``[start, end)``: the table's hours, live minutes around them, the
    1-hour tier where the 1-minute tier does not reach. ``resolution`` ("minute" or
    "hour") forces one live path for the whole range, as before the table existed."""
    if resolution is not None:
        return [Part(resolution, start, end)]
    return split(start, end, table=table_hours(cur, start, end, idle_pct),
                 reach=minute_reach(cur))


def combine(frames: list[pd.DataFrame], keys: list[str], cols: list[str]) -> pd.DataFrame:
    """The parts' frames summed per ``keys`` (every column in ``cols`` is additive);
    a sum of nothing but NULLs stays NULL, as in SQL."""
    frames = [f for f in frames if len(f)] or frames[:1]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=keys + cols)
    if len(frames) == 1:
        return df
    return df.groupby(keys, dropna=False, sort=False)[cols].sum(min_count=1).reset_index()


#: The parts' statements as one (:func:`union`): their rows summed per key.
_UNION_SQL = "SELECT {keys}, {sums} FROM ({parts}) GROUP BY ALL"


def union(statements: list[tuple[str, dict]], keys: list[str], cols: list[str], *,
          empty: str) -> tuple[str, dict]:
    """The parts' statements (each ``(sql, params)``, from :func:`bind`; each gives one
    row per key) as one ``(sql, params)`` whose rows are theirs summed per ``keys`` (every
    column in ``cols`` is additive; a sum of nothing but NULLs stays NULL), so that a
    caller can wrap a range's whole answer in SQL (a ratio per key, a sum per group)
    instead of combining frames in pandas (:func:`combine`; issue 17). Each part's
    parameters are renamed ``$name_p<i>`` (the parts give the same names other values),
    one part's too, so a caller's own parameters never meet theirs; a part's string
    literals must hold no ``$name`` of its parameters. One part is not summed again (its
    rows are one per key already: a second pass over 470,169 runs cost ~0.1 s of CPU);
    none: ``empty`` (a statement of no rows with the columns' types)."""
    if not statements:
        return empty, {}
    sqls, params = [], {}
    for i, (sql, prm) in enumerate(statements):
        sqls.append("(" + re.sub(r"\$(\w+)\b", lambda m, i=i, prm=prm: (
            f"${m[1]}_p{i}" if m[1] in prm else m[0]), sql) + ")")
        params.update({f"{k}_p{i}": v for k, v in prm.items()})
    if len(sqls) == 1:
        return sqls[0][1:-1], params
    sums = ", ".join(fill("sum({c}) AS {c}", c=c) for c in cols)
    return fill(_UNION_SQL, keys=", ".join(keys), sums=sums,
                parts="\nUNION ALL\n".join(sqls)), params


# ---------------------------------------------------------------- writing: the refresh

#: The hours of [$first, $hi) to recompute: no ledger row; another idle threshold;
#: within the recheck window [$lo, $hi) other samples or allocations (``sig``); before
#: it other samples, and in [$heal_lo, $heal_hi) (a chunk of days before the window,
#: :func:`heal_window`) other allocated GPU-microseconds or moments
#: (warehouse/kept_hours.py:ALLOC_MOMENTS) in the hour's day. Every day at once cost
#: ~0.25 s of CPU per 2 days of a 24,576-GPU fleet's allocations, ~11 s per refresh over
#: the minute tier's 90 days. A day with a ledger row kept before
#: migration 22 (no moments) compares its microseconds only, and one with a row kept
#: before migration 23 (or before migration 26 with keys another DuckDB hashed) no
#: allocation key, until
#: its hours are recomputed or leave the minute tier: the upgrade does not make the
#: history due.
_DUE_SQL = fill("""
WITH {signatures},
hours AS (SELECT unnest(range($first::TIMESTAMP, $hi::TIMESTAMP, INTERVAL 1 HOUR)) AS ts),
old_samples AS (
    SELECT ts, sum(samples) AS samples FROM gpu_samples_1h
    WHERE ts >= $first AND ts < $lo GROUP BY ts
),
old_days AS (
    SELECT d, sum(epoch_us(e) - epoch_us(s)) AS alloc_us, {day_moments}
    FROM (SELECT *, greatest(start_ts, d, $heal_lo::TIMESTAMP) AS s,
                 least(coalesce(end_ts, $heal_hi::TIMESTAMP), d + INTERVAL 1 DAY,
                       $heal_hi::TIMESTAMP) AS e
          FROM (SELECT *,
                       unnest(range(date_trunc('day', greatest(start_ts,
                                                               $heal_lo::TIMESTAMP)),
                                    least(coalesce(end_ts, $heal_hi::TIMESTAMP),
                                          $heal_hi::TIMESTAMP),
                                    INTERVAL 1 DAY)) AS d
                FROM allocations
                WHERE start_ts < $heal_hi AND coalesce(end_ts, $heal_hi) > $heal_lo))
    GROUP BY d
),
ledger_days AS (
    SELECT date_trunc('day', ts) AS d, sum(alloc_us) AS alloc_us, count(*) AS n,
           count(alloc_m2) AS filled, sum(alloc_m2) AS m2, sum(alloc_gpu_us) AS gpu_us,
           count(alloc_key_us) AS keyed, sum(alloc_key_us) AS key_us
    FROM gpu_usage_hours WHERE ts >= $heal_lo AND ts < $heal_hi GROUP BY d
)
SELECT h.ts FROM hours h
LEFT JOIN gpu_usage_hours l USING (ts) LEFT JOIN sig s USING (ts)
LEFT JOIN old_samples o USING (ts)
LEFT JOIN ledger_days ld ON ld.d = date_trunc('day', h.ts)
LEFT JOIN old_days od ON od.d = date_trunc('day', h.ts)
WHERE l.ts IS NULL OR l.idle_pct IS DISTINCT FROM $idle_pct
   OR h.ts >= $lo AND (l.samples IS DISTINCT FROM s.samples
                       OR l.alloc_sig IS DISTINCT FROM s.alloc_sig)
   OR h.ts < $lo AND l.samples IS DISTINCT FROM coalesce(o.samples, 0)
   OR h.ts >= $heal_lo AND h.ts < $heal_hi  -- the chunk of days compared this time
      AND (coalesce(ld.alloc_us, 0) <> coalesce(od.alloc_us, 0)
           OR ld.n = ld.filled  -- every row of the day has moments
              AND (ld.m2 <> coalesce(od.m2, 0) OR ld.gpu_us <> coalesce(od.gpu_us, 0))
           OR ld.n = ld.keyed  -- and its allocation key (migration 23)
              AND ld.key_us <> coalesce(od.key_us, 0))
ORDER BY h.ts
""", signatures=SIGNATURES, day_moments=fill(ALLOC_MOMENTS, s="s", e="e"))

_INSERT_USAGE_SQL = fill("""
INSERT INTO gpu_usage_1h
WITH {usage}
SELECT date_trunc('hour', ts) AS ts, node, job_id, run_index, sum(gpu_s), sum(util_s),
       sum(energy_j), sum(idle_s), sum(idle_j)
FROM u GROUP BY ALL
""", usage=minutes(free=True))

_INSERT_LEDGER_SQL = fill("""
INSERT INTO gpu_usage_hours (ts, samples, alloc_sig, alloc_us, idle_pct, computed_at,
                             alloc_m2, alloc_gpu_us, alloc_key_us)
WITH {signatures}
SELECT ts, samples, alloc_sig, alloc_us, $idle_pct, $now, alloc_m2, alloc_gpu_us,
       alloc_key_us FROM sig
""", signatures=SIGNATURES)


def due_hours(con, now: datetime, *, recheck_days: float, idle_pct: float,
              heal: tuple[datetime, datetime] | None = None) -> list[datetime]:
    """The complete hours (``ts + 1h <= now``) the minute tier reaches that have no
    ledger row, were computed with another ``idle_pct``, or whose inputs changed: within
    ``recheck_days`` their samples or clipped allocations (exact, per hour), before that
    their samples, and in ``heal`` (``[lo, hi)``; None: all of it) the allocated
    GPU-seconds or moments of their day (history written or imported late: the service
    writes its history while the refresh runs; an allocation moved with its length kept,
    or GPU time moved to another GPU, node, job or run)."""
    return due_from(con, _DUE_SQL, minute_reach(con), now, recheck_days=recheck_days,
                    idle_pct=idle_pct, heal=heal)


HEAL_KEY = "usage_heal_until"  # meta: where the ledger's next chunk of days ends (ISO)

#: Ledger rows without an allocation key moment (kept before migration 23, or set aside
#: by warehouse/fleet_hours.py:resign_after_upgrade) one refresh signs at most, the
#: newest first (:func:`fill_keys`).
MAX_KEY_HOURS = 336

#: Only rows from $first (the minute tier's reach) on: the day check (:data:`_DUE_SQL`)
#: reads no older row, and one there whose allocations changed since keeps no key, so
#: every refresh looked at it again for as long as the 1-hour tier keeps it.
_TO_KEY_SQL = """
SELECT ts FROM gpu_usage_hours
WHERE alloc_key_us IS NULL AND alloc_m2 IS NOT NULL AND ts >= $first
ORDER BY ts DESC LIMIT $n
"""

#: Sign the ledger rows of [$lo, $hi) listed in $hours that lack the allocation key
#: moment, where the hour's allocated microseconds and other moments are those the row
#: was computed from (a row that differs keeps none: its day is compared without it).
_KEY_SQL = fill("""
UPDATE gpu_usage_hours l SET alloc_key_us = s.alloc_key_us
FROM (WITH {signatures} SELECT * FROM sig) s
WHERE l.ts = s.ts AND list_contains($hours, l.ts) AND l.alloc_key_us IS NULL
  AND l.alloc_us = s.alloc_us AND l.alloc_m2 = s.alloc_m2
  AND l.alloc_gpu_us = s.alloc_gpu_us
""", signatures=SIGNATURES)


def fill_keys(con, *, max_hours: int = MAX_KEY_HOURS) -> int:
    """Give the newest ``max_hours`` ledger rows that lack it their allocation key moment
    (warehouse/kept_hours.py:ALLOC_MOMENTS' ``key_us``) where their other moments show the
    allocations unchanged, a slice of :data:`SLICE` per transaction, from the hour the minute tier
    reaches (:func:`minute_reach`). Returns the hours looked at."""
    first = minute_reach(con)
    if first is None:
        return 0
    hours = [r[0] for r in con.execute(_TO_KEY_SQL, {"n": max(0, max_hours),
                                                     "first": floor_hour(first)}).fetchall()]
    for lo, hi in merge_ranges([(t, t) for t in hours], HOUR):
        while lo < hi:
            step = min(hi, lo + SLICE)
            with transaction(con):
                con.execute(_KEY_SQL, {"lo": lo, "hi": step, "hours": hours})
            lo = step
            yield_to_urgent()
    return len(hours)


def refresh_usage(con, now: datetime, *, recheck_days: float, idle_pct: float,
                  max_hours: int = MAX_HOURS) -> dict:
    """Recompute the due hours of ``gpu_usage_1h`` (:func:`due_hours`), the newest
    ``max_hours`` of them, and their ledger rows, a slice of at most :data:`SLICE` per
    transaction, on the writer's connection. Returns ``usage_hours`` (hours recomputed),
    ``usage_pending`` (due hours left for the next refresh) and ``usage_s`` (seconds).
    First it signs ledger rows that lack the allocation key moment (:func:`fill_keys`)."""
    t0 = time.perf_counter()
    fill_keys(con)
    first = minute_reach(con)
    top = recheck_start(first, now, recheck_days) if first is not None else now
    heal_lo, heal_hi, heal_next = heal_window(con, first, top, HEAL_KEY)
    due = due_hours(con, now, recheck_days=recheck_days, idle_pct=idle_pct,
                    heal=(heal_lo, heal_hi))
    todo = due[-max_hours:] if max_hours > 0 else due
    params = {"now": now, "idle_pct": float(idle_pct), "partition": None, "rack": None,
              "runs": None}
    for lo, hi in merge_ranges([(t, t) for t in todo], HOUR):
        # live collection waits one slice, not the whole refresh
        in_slices(lo, hi, SLICE, lambda a, b: _recompute(
            con, {**params, "lo": a, "hi": b, "start": a, "end": b}))
    move_heal_cursor(con, HEAL_KEY, heal_next, (heal_lo, heal_hi), due[:len(due) - len(todo)])
    run_usage.refresh(con)  # the kept run rows of hours a changed node held (rare)
    return {"usage_hours": len(todo), "usage_pending": len(due) - len(todo),
            "usage_s": round(time.perf_counter() - t0, 3)}


def _recompute(con, params: dict) -> None:
    with transaction(con):
        for table in ("gpu_usage_1h", "gpu_usage_hours"):
            con.execute(fill("DELETE FROM {table} WHERE ts >= $lo AND ts < $hi", table=table),
                        {"lo": params["lo"], "hi": params["hi"]})
        con.execute(*bind(_INSERT_USAGE_SQL, **params))
        con.execute(*bind(_INSERT_LEDGER_SQL, **params))
        run_usage.write_hours(con, params["lo"], params["hi"])  # kept per run (issue 17)

"""The fleet's GPU-hours per hour (``fleet_hours_1h``): reporting, allocated, utilised and
throttled GPU-seconds of the 1-hour tier, kept by the analytics refresh (issue 17).

    nums = fleet_hours(cur, start=start, end=end)   # GPU-hours of [start, end)

The weekly report and the fleet view ask these of a whole week. Computed live, each asks
the 1-hour tier's GPU-hours joined with every allocation-hour of the week (3.4 s of CPU
for a 24,576-GPU week); the same sums per hour, kept once by :func:`refresh_fleet_hours`,
are ~170 rows a week. Definitions, per GPU-hour of the 1-hour tier (``cov`` its covered
seconds, ``af`` the fraction of the hour its allocations held it, at most 1):

- reporting = cov; allocated = af x cov; utilised = af x cov x utilisation / 100;
- throttled = the seconds it was thermally throttled.

:func:`fleet_hours` reads the table's whole hours inside ``[start, end)`` and computes the
ragged ends live with the same SQL (:data:`_HOURLY_SQL`). Every hour of the range must
have a row that still matches its inputs, else the whole range is computed live: its
``samples`` equal ``sum(samples)`` of the 1-hour tier in that hour, and the rows'
allocated GPU-microseconds sum to the allocations' in the range (history written late,
an allocation's end learnt late). The refresh computes hours without a row, the newest
:data:`MAX_HOURS` first, and within ``recheck_days`` hours whose samples or clipped
allocations changed (the signatures of warehouse/usage.py), and deletes the rows of hours
the 1-hour tier no longer holds (retention). The table is not exported to the lake: it is
derived from tables that are, and a lake's reader computes the sums live.

Each row also keeps the Energy page's method card's seconds of its hour (``held_s``,
``counter_s`` and what they came from, ``energy_sig``: warehouse/queries/energy_method.py,
migration 20); an hour whose ``gpu_energy_1h`` rows changed is recomputed like one whose
samples did.

Units: seconds in the table, GPU-hours from :func:`fleet_hours`; naive UTC, ``[start, end)``.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from warehouse import hour_usage
from warehouse.db import fill, transaction
from warehouse.rollups import merge_ranges
from warehouse.usage import _SIGNATURES, HOUR, bind, ceil_hour, due_from, floor_hour
from warehouse.writer import yield_to_urgent

#: Hours one refresh computes at most (the newest first): a first backfill of the 1-hour
#: tier's two years takes many refreshes instead of holding the writer.
MAX_HOURS = 168
SLICE = timedelta(hours=24)  # hours computed per transaction

#: Per hour of [$start, $end) with rows in the 1-hour tier: the four sums, in seconds.
_HOURLY_SQL = """
WITH al AS (
    SELECT node, gpu_index, greatest(start_ts, $start::TIMESTAMP) AS lo,
           least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP) AS hi
    FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start
),
alb AS (  -- each allocation once per hour it touches: an equi-join with the hour tier
    SELECT al.*, unnest(range(date_trunc('hour', lo), hi, INTERVAL 1 HOUR)) AS ts
    FROM al WHERE hi > lo
),
ah AS (
    SELECT node, gpu_index, ts,
           least(3600.0, sum(epoch(least(hi, ts + INTERVAL 1 HOUR))
                             - epoch(greatest(lo, ts)))) / 3600.0 AS af
    FROM alb GROUP BY ALL
),
h AS (
    SELECT h.ts, coalesce(h.covered_s, 0) AS cov, coalesce(h.util_pct_avg, 0) AS util,
           coalesce(h.throttle_thermal_s, 0) AS thr, coalesce(a.af, 0) AS af
    FROM gpu_samples_1h h LEFT JOIN ah a USING (node, gpu_index, ts)
    WHERE h.ts >= $start AND h.ts < $end
)
SELECT ts, sum(cov) AS reporting_s, sum(af * cov) AS allocated_s,
       sum(af * cov * util / 100) AS utilised_s, sum(thr) AS throttled_s
FROM h GROUP BY ts
"""

_SUMS = """
SELECT coalesce(sum(reporting_s), 0) / 3600 AS reporting_gpu_h,
       coalesce(sum(allocated_s), 0) / 3600 AS allocated_gpu_h,
       coalesce(sum(utilised_s), 0) / 3600 AS utilised_gpu_h,
       coalesce(sum(throttled_s), 0) / 3600 AS throttled_gpu_h
FROM ({hours})
"""
_LIVE_SQL = fill(_SUMS, hours=_HOURLY_SQL)
_TABLE_SQL = fill(_SUMS, hours="SELECT * FROM fleet_hours_1h WHERE ts >= $start AND ts < $end")

#: Whether the table may serve [$start, $end) (whole hours): the hours whose row holds the
#: 1-hour tier's samples (all of them, or the table misses or mistakes one), and the
#: rows' and the allocations' GPU-microseconds in the range.
_CHECK_SQL = """
SELECT (SELECT count(*) FROM fleet_hours_1h t
        LEFT JOIN (SELECT ts, sum(samples) AS samples FROM gpu_samples_1h
                   WHERE ts >= $start AND ts < $end GROUP BY ts) l USING (ts)
        WHERE t.ts >= $start AND t.ts < $end
          AND t.samples = coalesce(l.samples, 0)) AS fresh,
       (SELECT coalesce(sum(alloc_us), 0) FROM fleet_hours_1h
        WHERE ts >= $start AND ts < $end) AS table_us,
       (SELECT coalesce(sum(epoch_us(least(coalesce(end_ts, $end), $end))
                            - epoch_us(greatest(start_ts, $start))), 0)
        FROM allocations WHERE start_ts < $end AND coalesce(end_ts, $end) > $start) AS live_us
"""

_EXISTS_SQL = ("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'fleet_hours_1h' "
               "AND schema_name = current_schema() AND database_name = current_database()")


def _live(cur, start: datetime, end: datetime) -> list[float]:
    return list(cur.execute(_LIVE_SQL, {"start": start, "end": end}).fetchall()[0])


def _table_serves(cur, start: datetime, end: datetime) -> bool:
    if not cur.execute(_EXISTS_SQL).fetchall()[0][0]:
        return False  # a lake or an older copy without the table
    fresh, table_us, live_us = cur.execute(_CHECK_SQL, {"start": start, "end": end}
                                           ).fetchall()[0]
    return fresh == int((end - start) / HOUR) and table_us == live_us


def fleet_hours(cur, *, start: datetime, end: datetime) -> dict:
    """Reporting, allocated, utilised and throttled GPU-hours of ``[start, end)`` (keys
    ``reporting_gpu_h``, ``allocated_gpu_h``, ``utilised_gpu_h``, ``throttled_gpu_h``):
    the table's whole hours where it holds them all unchanged, the rest live."""
    lo, hi = ceil_hour(start), floor_hour(end)
    if lo < hi and _table_serves(cur, lo, hi):
        parts = [cur.execute(_TABLE_SQL, {"start": lo, "end": hi}).fetchall()[0]]
        parts += [_live(cur, a, b) for a, b in ((start, lo), (hi, end)) if a < b]
        sums = [sum(col) for col in zip(*parts, strict=True)]
    else:
        sums = _live(cur, start, end)
    keys = ("reporting_gpu_h", "allocated_gpu_h", "utilised_gpu_h", "throttled_gpu_h")
    return dict(zip(keys, (float(v) for v in sums), strict=True))


# ---------------------------------------------------------------- writing: the refresh

#: Per hour of [{lo}, {hi}) what its ``gpu_energy_1h`` rows are: a sum of hashes of each
#: GPU's samples, counter samples and method (the energy method's seconds kept in
#: ``held_s``, ``counter_s``: warehouse/queries/energy_method.py).
ENERGY_SIG = """
SELECT ts, sum(hash(node, gpu_index, samples, counter_samples, method)) AS energy_sig
FROM gpu_energy_1h WHERE ts >= {lo} AND ts < {hi} GROUP BY ts
"""

#: The hours of [$first, $hi) to compute: no row; no energy rows with $idle_pct where
#: ``gpu_usage_1h`` does not hold the hour; within [$lo, $hi) other samples, other
#: clipped allocations (``sig``) or other energy rows than the row was computed from.
_DUE_SQL = fill("""
WITH {signatures},
hours AS (SELECT unnest(range($first::TIMESTAMP, $hi::TIMESTAMP, INTERVAL 1 HOUR)) AS ts),
esig AS ({energy_sig})
SELECT h.ts FROM hours h
LEFT JOIN fleet_hours_1h t USING (ts) LEFT JOIN sig s USING (ts)
LEFT JOIN gpu_usage_hours u USING (ts) LEFT JOIN esig e USING (ts)
WHERE t.ts IS NULL
   OR u.ts IS NULL AND t.energy_idle_pct IS DISTINCT FROM $idle_pct
   OR t.alloc_share_us IS NULL  -- kept before migration 18
   OR t.energy_sig IS NULL  -- kept before migration 20
   OR h.ts >= $lo AND (t.samples IS DISTINCT FROM s.samples
                       OR t.alloc_sig IS DISTINCT FROM s.alloc_sig
                       OR t.energy_sig IS DISTINCT FROM coalesce(e.energy_sig, 0))
ORDER BY h.ts
""", signatures=_SIGNATURES, energy_sig=fill(ENERGY_SIG, lo="$lo", hi="$hi"))

#: An allocation's fraction of its GPU (shard/MPS share, as the energy queries clamp it)
#: in millionths, an integer: microseconds x it summed per hour add up to the range's sum
#: exactly, so the read check (:func:`warehouse.hour_usage.serves`) compares them.
SHARE_PPM = "CAST(least(greatest(coalesce(share, 1.0), 0.0), 1.0) * 1000000 AS BIGINT)"

_INSERT_SQL = fill("""
INSERT INTO fleet_hours_1h (ts, reporting_s, allocated_s, utilised_s, throttled_s, samples,
                            alloc_sig, alloc_us, energy_idle_pct, computed_at, alloc_share_us)
WITH {signatures}, f AS ({hourly}),
shares AS (SELECT ts, sum((epoch_us(e) - epoch_us(s))::HUGEINT * {share_ppm}) AS share_us
           FROM sig_clipped GROUP BY ts)
SELECT sig.ts, coalesce(f.reporting_s, 0), coalesce(f.allocated_s, 0),
       coalesce(f.utilised_s, 0), coalesce(f.throttled_s, 0), sig.samples, sig.alloc_sig,
       sig.alloc_us, CASE WHEN u.ts IS NULL THEN $idle_pct END, $now,
       coalesce(shares.share_us, 0)
FROM sig LEFT JOIN f USING (ts) LEFT JOIN gpu_usage_hours u USING (ts)
LEFT JOIN shares USING (ts)
""", signatures=_SIGNATURES, hourly=_HOURLY_SQL, share_ppm=SHARE_PPM)


def due_hours(con, now: datetime, *, recheck_days: float,
              idle_pct: float) -> list[datetime]:
    """The complete hours (``ts + 1h <= now``) from the 1-hour tier's first that have no
    row (or one kept before migration 18, without ``alloc_share_us``), whose energy rows
    (:mod:`warehouse.hour_usage`, where ``gpu_usage_1h`` does not hold the hour) were
    computed with another ``idle_pct``, or within ``recheck_days`` whose samples or
    clipped allocations changed."""
    first = con.execute("SELECT min(ts) FROM gpu_samples_1h").fetchall()[0][0]
    return due_from(con, _DUE_SQL, first, now, recheck_days=recheck_days,
                    idle_pct=idle_pct)


def refresh_fleet_hours(con, now: datetime, *, recheck_days: float, idle_pct: float,
                        max_hours: int = MAX_HOURS) -> dict:
    """Compute the due hours of ``fleet_hours_1h`` (:func:`due_hours`), the newest
    ``max_hours`` of them, a slice of at most :data:`SLICE` per transaction, on the
    writer's connection, after deleting the rows of hours before the 1-hour tier's first
    (its retention is the table's). With each hour, its rows of ``gpu_usage_from_1h``
    where ``gpu_usage_1h`` does not hold it (warehouse/hour_usage.py, ``idle_pct``).
    Returns ``fleet_hours`` (hours computed), ``fleet_pending`` (due hours left for the
    next refresh) and ``fleet_s`` (seconds)."""
    from warehouse.queries.energy import _HOUR_CTES  # it imports the analytics: lazily
    from warehouse.queries.energy_method import KEEP_SQL

    t0 = time.perf_counter()

    insert_energy = hour_usage.insert_sql(_HOUR_CTES)
    with transaction(con):  # retention: the hours the 1-hour tier no longer holds go too
        for table in ("fleet_hours_1h", "gpu_usage_from_1h"):
            con.execute(fill("DELETE FROM {table} WHERE ts < coalesce((SELECT date_trunc("
                             "'hour', min(ts)) FROM gpu_samples_1h), 'infinity'::TIMESTAMP)",
                             table=table))
    due = due_hours(con, now, recheck_days=recheck_days, idle_pct=idle_pct)
    todo = due[-max_hours:] if max_hours > 0 else due
    for lo, hi in merge_ranges([(t, t) for t in todo], HOUR):
        while lo < hi:
            step = min(hi, lo + SLICE)
            params = {"lo": lo, "hi": step, "start": lo, "end": step, "now": now,
                      "idle_pct": float(idle_pct)}
            with transaction(con):
                for table in ("fleet_hours_1h", "gpu_usage_from_1h"):
                    con.execute(fill("DELETE FROM {table} WHERE ts >= $lo AND ts < $hi",
                                     table=table), {"lo": lo, "hi": step})
                con.execute(*bind(_INSERT_SQL, **params))
                con.execute(*bind(insert_energy, **params))
                con.execute(*bind(KEEP_SQL, **params))  # the energy method's seconds
            lo = step
            yield_to_urgent()  # live collection waits one slice, not the whole refresh
    return {"fleet_hours": len(todo), "fleet_pending": len(due) - len(todo),
            "fleet_s": round(time.perf_counter() - t0, 3)}

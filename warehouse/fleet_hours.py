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
allocated GPU-microseconds, time moments and GPU-weighted microseconds (:data:`MOMENTS`,
exact integers) sum to the allocations' in the range (history written late, an
allocation's end learnt late, its times moved with its length kept, GPU time moved to
another GPU, node, job or run), summed from ``run_nodes``, which the writer keeps with
the allocations (:data:`RUN_NODE_MOMENTS`). The refresh fills rows kept before
migrations 21 and 23 where their allocations are unchanged (:func:`fill_rows`), computes
hours without a row, the newest :data:`MAX_HOURS` first, within ``recheck_days`` hours
whose samples or clipped allocations changed (the signatures of
warehouse/kept_hours.py), before it every hour of a day whose rows' moments differ from
the allocations' now, and deletes the rows of hours the 1-hour tier no longer holds
(retention). The table is not exported to the lake: it is
derived from tables that are, and a lake's reader computes the sums live.

Each row also keeps the Energy page's method card's seconds of its hour (``held_s``,
``counter_s`` and what they came from, ``energy_sig``: warehouse/queries/energy_method.py,
migration 20); an hour whose ``gpu_energy_1h`` rows changed is recomputed like one whose
samples did. With each hour the refresh keeps its tensor activity per job
(``tensor_hours_1h``, warehouse/queries/tensor.py, migration 25; ``tensor_kept`` says so:
an hour whose row lacks it is due again). The three tables (:data:`KEPT_TABLES`) are
computed, dropped and deleted together, so this table's read check is theirs.

Units: seconds in the table, GPU-hours from :func:`fleet_hours`; naive UTC, ``[start, end)``.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from warehouse import allocation_hours, hour_usage, kept_hours, meta
from warehouse.clock import HOUR, ceil_hour, floor_hour
from warehouse.db import fill, transaction
from warehouse.kept_hours import (
    ALLOC_MOMENTS,
    SHARE_PPM,
    SIGNATURES,
    due_from,
    recheck_start,
)
from warehouse.rollups import merge_ranges
from warehouse.usage import bind
from warehouse.writer import yield_to_urgent

#: Hours one refresh computes at most (the newest first): a first backfill of the 1-hour
#: tier's two years takes many refreshes instead of holding the writer.
MAX_HOURS = 168
#: The tables the refresh computes per hour together (this module's, warehouse/hour_usage.py's
#: and warehouse/queries/tensor.py's): deleted, kept and dropped together.
KEPT_TABLES = ("fleet_hours_1h", "gpu_usage_from_1h", "tensor_hours_1h")
SLICE = timedelta(hours=24)  # hours computed per transaction

#: Per hour of [$start, $end) with rows in the 1-hour tier: the four sums, in seconds.
_HOURLY_SQL = fill("""
WITH alb AS (  -- each allocation once per hour it touches: an equi-join with the hour tier
{cut}
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
""", cut=allocation_hours.cut("node, gpu_index"))

_SUMS = """
SELECT coalesce(sum(reporting_s), 0) / 3600 AS reporting_gpu_h,
       coalesce(sum(allocated_s), 0) / 3600 AS allocated_gpu_h,
       coalesce(sum(utilised_s), 0) / 3600 AS utilised_gpu_h,
       coalesce(sum(throttled_s), 0) / 3600 AS throttled_gpu_h
FROM ({hours})
"""
_LIVE_SQL = fill(_SUMS, hours=_HOURLY_SQL)
_TIER_SPAN_SQL = "SELECT min(ts), max(ts) FROM gpu_samples_1h WHERE ts >= $start AND ts < $end"
_TABLE_SQL = fill(_SUMS, hours="SELECT * FROM fleet_hours_1h WHERE ts >= $start AND ts < $end")

#: Exact integers of the allocations clipped to [{s}, {e}) (timestamps), summed: their
#: GPU-microseconds (``us``), those x their fraction of the GPU in millionths
#: (``share_us``, :data:`SHARE_PPM`), the time moment sum(epoch_us(e)^2 - epoch_us(s)^2)
#: (``m2``: an allocation moved in time, even with its length kept) and the
#: microseconds x ``gpu_index`` (``gpu_us``: one moved to another GPU of the same times).
#: Additive over time: the hours' sums are the range's exactly (migrations 18, 21).
_MOMENTS = """
sum((epoch_us({e}) - epoch_us({s})){n})::HUGEINT AS us,
sum((epoch_us({e}) - epoch_us({s}))::HUGEINT * {share_ppm}) AS share_us,"""
MOMENTS = fill(_MOMENTS, n="") + ALLOC_MOMENTS
#: :data:`MOMENTS` from ``run_nodes`` rows (kept_hours.RUN_NODE_MOMENTS), their shares
#: in millionths summed per row (``share_ppm_sum``): the read check's (issue 17: its
#: pass over the allocations was most of the check's 100-165 ms on each kept 7-day read
#: at 24,576 GPUs).
RUN_NODE_MOMENTS = (fill(_MOMENTS, n=" * gpus", share_ppm="share_ppm_sum")
                    + kept_hours.RUN_NODE_MOMENTS)

#: Whether the table may serve [$start, $end) (whole hours): the hours whose row holds the
#: 1-hour tier's samples (all of them, or the table misses or mistakes one) and has its
#: moments (kept since migration 21), and the rows' and the allocations' GPU-microseconds,
#: time moments and GPU-weighted microseconds in the range, then their share-weighted
#: microseconds (:data:`MOMENTS`). The allocations' are summed from ``run_nodes``, which
#: the writer keeps with them in each batch's transaction (:data:`RUN_NODE_MOMENTS`, the
#: same integers from ~4x fewer rows and no text: issue 17, the whole check 100-165 ->
#: 32-45 ms for a 24,576-GPU week); a writer that changes ``allocations`` otherwise
#: rebuilds it (warehouse/run_nodes.py), as for every other reader of it.
_CHECK_SQL = fill("""
SELECT * FROM
(SELECT count(*) AS fresh FROM fleet_hours_1h t
 LEFT JOIN (SELECT ts, sum(samples) AS samples FROM gpu_samples_1h
            WHERE ts >= $start AND ts < $end GROUP BY ts) l USING (ts)
 WHERE t.ts >= $start AND t.ts < $end
   AND t.samples = coalesce(l.samples, 0) AND t.alloc_key_us IS NOT NULL),
(SELECT coalesce(sum(alloc_us), 0), coalesce(sum(alloc_m2), 0),
        coalesce(sum(alloc_gpu_us), 0), coalesce(sum(alloc_key_us), 0),
        coalesce(sum(alloc_share_us), 0)
 FROM fleet_hours_1h WHERE ts >= $start AND ts < $end),
(SELECT coalesce(sum(us), 0), coalesce(sum(m2), 0), coalesce(sum(gpu_us), 0),
        coalesce(sum(key_us), 0), coalesce(sum(share_us), 0)
 FROM (SELECT {moments} FROM run_nodes
       WHERE start_ts < $end AND coalesce(end_ts, $end) > $start))
""", moments=fill(RUN_NODE_MOMENTS, s="greatest(start_ts, $start::TIMESTAMP)",
                  e="least(coalesce(end_ts, $end::TIMESTAMP), $end::TIMESTAMP)"))

_EXISTS_SQL = ("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'fleet_hours_1h' "
               "AND schema_name = current_schema() AND database_name = current_database()")


def _live(cur, start: datetime, end: datetime) -> list[float]:
    return list(cur.execute(_LIVE_SQL, {"start": start, "end": end}).fetchall()[0])


#: Per kept hour of [$start, $end), in order: whether its row holds the 1-hour tier's
#: samples now and its moments (as :data:`_CHECK_SQL` asks of every hour) and its tensor
#: activity rows are kept.
_FRESH_SQL = """
SELECT t.ts, t.samples = coalesce(l.samples, 0) AND t.alloc_key_us IS NOT NULL
             AND coalesce(t.tensor_kept, FALSE) AS fresh
FROM fleet_hours_1h t
LEFT JOIN (SELECT ts, sum(samples) AS samples FROM gpu_samples_1h
           WHERE ts >= $start AND ts < $end GROUP BY ts) l USING (ts)
WHERE t.ts >= $start AND t.ts < $end
ORDER BY t.ts
"""


def fresh_until(cur, start: datetime, end: datetime) -> datetime | None:
    """The end of the hours from ``start`` (whole hours, up to ``end``) whose rows are
    kept one after another with the 1-hour tier's samples as they are now, and their
    tensor activity rows (warehouse/queries/tensor.py): the span :func:`table_serves`
    may then serve. The newest hours of a range are often not kept yet, or have had
    samples rolled up since (the refresh runs every few minutes): a range up to now
    reads the hours before them from the table and only those live. None: the first
    hour is not such."""
    if not has_table(cur):
        return None
    rows = cur.execute(_FRESH_SQL, {"start": start, "end": end}).fetchall()
    until = start
    for ts, fresh in rows:
        if ts != until or not fresh:
            break
        until = ts + HOUR
    return until if until > start else None


def has_table(cur) -> bool:
    """Whether the warehouse of ``cur`` has the kept tables (not a lake's reader or a
    copy made before migration 16)."""
    return bool(cur.execute(_EXISTS_SQL).fetchall()[0][0])


def table_serves(cur, start: datetime, end: datetime, *, shares: bool = False) -> bool:
    """Whether the rows of [start, end) (whole hours) were computed from what the 1-hour
    tier and the allocations hold now (:data:`_CHECK_SQL`: the allocations' moments summed
    from ``run_nodes``); ``shares``: their shares' microseconds too
    (warehouse/hour_usage.py:serves; the same pass, not a second one, issue 17). The kept
    tables' read check (:data:`KEPT_TABLES`)."""
    if not has_table(cur):
        return False  # a lake or an older copy without the table
    fresh, *sums = cur.execute(_CHECK_SQL, {"start": start, "end": end}).fetchall()[0]
    table, live = sums[:5], sums[5:]
    if not shares:
        table, live = table[:4], live[:4]
    return fresh == int((end - start) / HOUR) and table == live


def held_span(cur, start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The hours of ``[start, end)`` (whole hours) from the 1-hour tier's first row in it to
    its last, or None where it has none. The hours around them add nothing, live or kept
    (:data:`_HOURLY_SQL` reads the tier's rows), so the table need only serve this span: a
    week that begins before the telemetry, or whose last hours had none, is still read
    from the table (issue 17: the first such week was computed live, 2.7 s at 24,576
    GPUs)."""
    first, last = cur.execute(_TIER_SPAN_SQL, {"start": start, "end": end}).fetchall()[0]
    return None if first is None else (first, last + HOUR)


def fleet_hours(cur, *, start: datetime, end: datetime) -> dict:
    """Reporting, allocated, utilised and throttled GPU-hours of ``[start, end)`` (keys
    ``reporting_gpu_h``, ``allocated_gpu_h``, ``utilised_gpu_h``, ``throttled_gpu_h``):
    the table's whole hours where it holds them all unchanged (:func:`held_span`), the
    rest live."""
    lo, hi = ceil_hour(start), floor_hour(end)
    span = held_span(cur, lo, hi) if lo < hi else None
    if span and table_serves(cur, *span):
        parts = [cur.execute(_TABLE_SQL, {"start": span[0], "end": span[1]}).fetchall()[0]]
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

#: Per hour of [$lo, $hi) (the CTE ``sig_clipped`` of warehouse/kept_hours.py) the
#: allocations' :data:`MOMENTS`.
_HOUR_MOMENTS = fill("SELECT ts, {moments} FROM sig_clipped GROUP BY ts",
                     moments=fill(MOMENTS, s="s", e="e", share_ppm=SHARE_PPM))

#: The hours of [$first, $hi) to compute: no row, or one kept before migration 25 (no
#: tensor activity rows, ``tensor_kept`` NULL); no energy rows with $idle_pct where
#: ``gpu_usage_1h`` does not hold the hour; within [$lo, $hi) other samples, other
#: clipped allocations (``sig``) or other energy rows than the row was computed from;
#: in [$heal_lo, $heal_hi) (before $lo), every hour of a day whose rows' allocation
#: moments (:data:`MOMENTS`) differ from the allocations' now (a day with an hour still
#: to be computed or filled, :func:`fill_rows`, waits for it).
_DUE_SQL = fill("""
WITH {signatures},
hours AS (SELECT unnest(range($first::TIMESTAMP, $hi::TIMESTAMP, INTERVAL 1 HOUR)) AS ts),
esig AS ({energy_sig}),
old_allocs AS (
    SELECT d, {day_moments} FROM (
        SELECT *, unnest(range(date_trunc('day', greatest(start_ts, $heal_lo::TIMESTAMP)),
                               least(coalesce(end_ts, $heal_hi::TIMESTAMP),
                                     $heal_hi::TIMESTAMP), INTERVAL 1 DAY)) AS d
        FROM allocations
        WHERE start_ts < $heal_hi AND coalesce(end_ts, $heal_hi) > $heal_lo)
    GROUP BY d
),
old_rows AS (
    SELECT date_trunc('day', ts) AS d, count(*) AS n,
           count(alloc_m2 + alloc_key_us) AS filled,
           sum(alloc_us)::HUGEINT AS us, sum(alloc_share_us) AS share_us,
           sum(alloc_m2) AS m2, sum(alloc_gpu_us) AS gpu_us, sum(alloc_key_us) AS key_us
    FROM fleet_hours_1h WHERE ts >= $heal_lo AND ts < $heal_hi GROUP BY d
),
stale_days AS (
    SELECT d FROM old_rows r LEFT JOIN old_allocs a USING (d)
    WHERE r.n = r.filled  -- every hour of the day kept and filled (else it waits)
      AND r.n = (epoch(least(d + INTERVAL 1 DAY, $heal_hi::TIMESTAMP))
                 - epoch(greatest(d, $heal_lo::TIMESTAMP))) / 3600
      AND (r.us IS DISTINCT FROM coalesce(a.us, 0)
           OR r.share_us IS DISTINCT FROM coalesce(a.share_us, 0)
           OR r.m2 IS DISTINCT FROM coalesce(a.m2, 0)
           OR r.gpu_us IS DISTINCT FROM coalesce(a.gpu_us, 0)
           OR r.key_us IS DISTINCT FROM coalesce(a.key_us, 0))
)
SELECT h.ts FROM hours h
LEFT JOIN fleet_hours_1h t USING (ts) LEFT JOIN sig s USING (ts)
LEFT JOIN gpu_usage_hours u USING (ts) LEFT JOIN esig e USING (ts)
WHERE t.ts IS NULL OR t.tensor_kept IS NULL
   OR u.ts IS NULL AND t.energy_idle_pct IS DISTINCT FROM $idle_pct
   OR h.ts >= $lo AND (t.samples IS DISTINCT FROM s.samples
                       OR t.alloc_sig IS DISTINCT FROM s.alloc_sig
                       OR t.energy_sig IS DISTINCT FROM coalesce(e.energy_sig, 0))
   OR h.ts >= $heal_lo AND h.ts < $heal_hi
      AND date_trunc('day', h.ts) IN (SELECT d FROM stale_days)
ORDER BY h.ts
""", signatures=SIGNATURES, energy_sig=fill(ENERGY_SIG, lo="$lo", hi="$hi"),
    day_moments=fill(MOMENTS, s="greatest(start_ts, d, $heal_lo::TIMESTAMP)",
                     e="least(coalesce(end_ts, $heal_hi::TIMESTAMP), d + INTERVAL 1 DAY, "
                       "$heal_hi::TIMESTAMP)", share_ppm=SHARE_PPM))

_INSERT_SQL = fill("""
INSERT INTO fleet_hours_1h (ts, reporting_s, allocated_s, utilised_s, throttled_s, samples,
                            alloc_sig, alloc_us, energy_idle_pct, computed_at, alloc_share_us,
                            alloc_m2, alloc_gpu_us, alloc_key_us, tensor_kept)
WITH {signatures}, f AS ({hourly}), m AS ({moments})
SELECT sig.ts, coalesce(f.reporting_s, 0), coalesce(f.allocated_s, 0),
       coalesce(f.utilised_s, 0), coalesce(f.throttled_s, 0), sig.samples, sig.alloc_sig,
       sig.alloc_us, CASE WHEN u.ts IS NULL THEN $idle_pct END, $now,
       coalesce(m.share_us, 0), coalesce(m.m2, 0), coalesce(m.gpu_us, 0),
       coalesce(m.key_us, 0), TRUE
FROM sig LEFT JOIN f USING (ts) LEFT JOIN gpu_usage_hours u USING (ts)
LEFT JOIN m USING (ts)
""", signatures=SIGNATURES, hourly=_HOURLY_SQL, moments=_HOUR_MOMENTS)

#: Rows kept before migrations 18, 20 or 21 (or re-signed after a DuckDB upgrade) lack a
#: column the read check or the method card needs; the refresh fills them at most this
#: many hours (the newest first) per refresh, a slice of :data:`SLICE` per transaction
#: (~0.8 s of CPU a day at 24,576 GPUs, mostly the method card's join: about what
#: :data:`MAX_HOURS` of computing costs), instead of computing every hour of the history
#: again (the 1-hour tier's energy path, ~1.6 s a day, ~100 refreshes for two years).
MAX_FILL_HOURS = 336

_TO_FILL_SQL = """
SELECT ts FROM fleet_hours_1h
WHERE alloc_share_us IS NULL OR alloc_m2 IS NULL OR alloc_gpu_us IS NULL
   OR alloc_key_us IS NULL OR energy_sig IS NULL
ORDER BY ts DESC LIMIT $n
"""

#: Per hour of [$lo, $hi) to fill: whether its row was computed from the allocations
#: held now. A row with moments (migration 21) says so exactly; an older one by its
#: ``alloc_sig`` (the hashes of warehouse/usage.py, of the same DuckDB) and
#: microseconds, and its share microseconds where it has them. With the values to store.
_FILL_SQL = fill("""
WITH {signatures}, m AS ({moments}),
now_sig AS (
    SELECT sig.ts, sig.alloc_sig, sig.alloc_us::HUGEINT AS us,
           coalesce(m.share_us, 0) AS share_us, coalesce(m.m2, 0) AS m2,
           coalesce(m.gpu_us, 0) AS gpu_us, coalesce(m.key_us, 0) AS key_us
    FROM sig LEFT JOIN m USING (ts)
)
SELECT t.ts, c.alloc_sig, c.share_us, c.m2, c.gpu_us, c.key_us,
       coalesce(CASE WHEN t.alloc_m2 IS NOT NULL
                     THEN t.alloc_us = c.us AND t.alloc_share_us = c.share_us
                          AND t.alloc_m2 = c.m2 AND t.alloc_gpu_us = c.gpu_us
                          AND coalesce(t.alloc_key_us = c.key_us, TRUE)
                     ELSE t.alloc_sig = c.alloc_sig AND t.alloc_us = c.us
                          AND coalesce(t.alloc_share_us = c.share_us, TRUE) END,
                FALSE) AS same,
       t.energy_sig IS NULL AS unsigned,
       t.alloc_key_us IS NULL AND coalesce(t.tensor_kept, FALSE) AS rekey
FROM fleet_hours_1h t JOIN now_sig c USING (ts)
WHERE t.ts >= $lo AND t.ts < $hi AND list_contains($hours, t.ts)
""", signatures=SIGNATURES, moments=_HOUR_MOMENTS)

#: A kept table's rows of the hours [$lo, $hi) (``{table}``: one of :data:`KEPT_TABLES`).
_DELETE_RANGE_SQL = "DELETE FROM {table} WHERE ts >= $lo AND ts < $hi"

_SIGN_SQL = """
UPDATE fleet_hours_1h SET alloc_sig = $sig, alloc_share_us = $share_us, alloc_m2 = $m2,
                          alloc_gpu_us = $gpu_us, alloc_key_us = $key_us
WHERE ts = $ts
"""

#: meta's key for the DuckDB whose hash() signed the kept rows (``alloc_sig``,
#: ``energy_sig``): another DuckDB may hash otherwise, and every kept hour would then
#: look changed (the read check failing for good before the recheck window).
HASH_KEY = "fleet_hours_hash_duckdb"

#: meta's key for the DuckDB on which migration 26 stored the allocations' keys
#: (``allocations.alloc_key``), until the first :func:`resign_after_upgrade` after it:
#: the key moments kept before were summed with the keys the DuckDB of
#: :data:`HASH_KEY` hashed, the same ones only where the two are the same DuckDB.
KEYS_KEY = "alloc_key_duckdb"


def resign_after_upgrade(con) -> bool:
    """When the DuckDB version differs from the one meta records for the rows' hashes,
    mark every row's ``energy_sig`` missing (so :func:`fill_rows` signs it again, with
    ``alloc_sig``, where the exact moments show the allocations unchanged), and record
    the version. The allocation key moments (``alloc_key_us``) stay: they weight the
    allocations by their stored key (migration 26), which no DuckDB upgrade changes, so
    GPU time given to another job at the same node, GPU and times between an hour's
    computing and an upgrade still drops the hour and computes it again, its energy
    rows and tensor rows with it. Only key moments kept before migration 26 by another
    DuckDB than the one the migration ran on (:data:`KEYS_KEY`) are marked missing, the
    usage ledger's too, and signed again the same way (a day of ``gpu_usage_hours``
    with one missing keeps the other moments' check until recomputed). Run by the
    analytics refresh before either table's refresh. Returns whether the version
    changed."""
    version = con.execute("SELECT library_version FROM pragma_version()").fetchall()[0][0]
    signed, keyed = meta.get(con, HASH_KEY), meta.get(con, KEYS_KEY)
    if signed == version and keyed is None:
        return False
    changed = signed is not None and signed != version  # None: no row signed yet
    with transaction(con):
        if changed:
            con.execute("UPDATE fleet_hours_1h SET energy_sig = NULL")
        if keyed is not None and signed is not None and keyed != signed:
            con.execute("UPDATE fleet_hours_1h SET alloc_key_us = NULL")
            con.execute("UPDATE gpu_usage_hours SET alloc_key_us = NULL")
        con.execute("DELETE FROM meta WHERE key = $k", {"k": KEYS_KEY})
        meta.put(con, HASH_KEY, version)
    return changed


def fill_rows(con, *, max_hours: int = MAX_FILL_HOURS) -> dict:
    """Fill the rows that lack a column (kept before migrations 18, 20 or 21, or whose
    hashes another DuckDB made), the newest ``max_hours``: where the hour's allocations
    are those its row was computed from, their moments, ``alloc_sig`` and the method
    card's seconds (``held_s``, ``counter_s``, ``energy_sig`` from the energy rows now);
    else the row goes (with its ``gpu_usage_from_1h`` and ``tensor_hours_1h`` rows) and
    the hour is due again. A row signed without its allocation key moment (another
    DuckDB before migration 26, :func:`resign_after_upgrade`) cannot show GPU time given
    to another job at the same node, GPU and times: its tensor activity per job is kept
    again from the allocations now (~0.7 s a day at 24,576 GPUs; the
    ``gpu_usage_from_1h`` rows are not: their per-run energy keeps that gap, rather than
    computing the whole history again). Returns ``fleet_filled`` and ``fleet_dropped``
    (hours)."""
    from warehouse.queries import tensor  # both import this: lazily
    from warehouse.queries.energy_method import KEEP_SQL

    resign_after_upgrade(con)
    hours = [r[0] for r in con.execute(_TO_FILL_SQL, {"n": max(0, max_hours)}).fetchall()]
    filled = dropped = 0
    for lo, hi in merge_ranges([(t, t) for t in hours], HOUR):
        while lo < hi:
            step = min(hi, lo + SLICE)
            params = {"lo": lo, "hi": step, "hours": hours}
            with transaction(con):
                rows = con.execute(*bind(_FILL_SQL, **params)).fetchall()
                for ts, sig, share_us, m2, gpu_us, key_us, same, _, _ in rows:
                    if same:
                        con.execute(_SIGN_SQL, {"ts": ts, "sig": sig, "share_us": share_us,
                                                "m2": m2, "gpu_us": gpu_us,
                                                "key_us": key_us})
                        continue
                    for table in KEPT_TABLES:
                        con.execute(fill("DELETE FROM {table} WHERE ts = $ts", table=table),
                                    {"ts": ts})
                kept = [r[0] for r in rows if r[6]]
                unsigned = [r[0] for r in rows if r[6] and r[7]]  # the method card's
                for a, b in merge_ranges([(t, t) for t in unsigned], HOUR):  # seconds too
                    con.execute(*bind(KEEP_SQL, start=a, end=b))
                rekey = [r[0] for r in rows if r[6] and r[8]]  # per-job rows: again
                for a, b in merge_ranges([(t, t) for t in rekey], HOUR):
                    con.execute(fill(_DELETE_RANGE_SQL, table="tensor_hours_1h"),
                                {"lo": a, "hi": b})
                    con.execute(*bind(tensor.KEEP_SQL, start=a, end=b))
                filled += len(kept)
                dropped += len(rows) - len(kept)
            lo = step
            yield_to_urgent()
    return {"fleet_filled": filled, "fleet_dropped": dropped}


def due_hours(con, now: datetime, *, recheck_days: float, idle_pct: float,
              heal: tuple[datetime, datetime] | None = None) -> list[datetime]:
    """The complete hours (``ts + 1h <= now``) from the 1-hour tier's first that have no
    row or one without tensor activity rows (kept before migration 25), whose energy
    rows (:mod:`warehouse.hour_usage`, where ``gpu_usage_1h`` does not hold the hour)
    were computed with another ``idle_pct``, within ``recheck_days`` whose samples,
    clipped allocations or energy rows changed, and in ``heal`` (``[lo, hi)`` before
    the recheck window; None: all of it) those of a day whose allocations' moments
    changed (not its samples or energy rows: the read check computes such hours
    live)."""
    return due_from(con, _DUE_SQL, _first(con), now, recheck_days=recheck_days,
                    idle_pct=idle_pct, heal=heal)


def _first(con) -> datetime | None:
    return con.execute("SELECT min(ts) FROM gpu_samples_1h").fetchall()[0][0]


#: Days before the recheck window whose allocations one refresh compares with the rows
#: (:func:`due_hours`; warehouse/kept_hours.py:heal_window): two years at 2 days each
#: take a year of refreshes, ~30 hours at the default 300-s interval.
HEAL_DAYS = kept_hours.HEAL_DAYS
HEAL_KEY = "fleet_hours_heal_until"  # meta: where the next chunk ends (ISO)


def _heal_window(con, now: datetime,
                 recheck_days: float) -> tuple[datetime, datetime, datetime]:
    """The next chunk ``[lo, hi)`` of days before the recheck window to compare, and
    where meta's cursor goes past it."""
    first = _first(con)
    top = recheck_start(first, now, recheck_days) if first is not None else now
    return kept_hours.heal_window(con, first, top, HEAL_KEY, HEAL_DAYS)


def refresh_fleet_hours(con, now: datetime, *, recheck_days: float, idle_pct: float,
                        max_hours: int = MAX_HOURS) -> dict:
    """Compute the due hours of ``fleet_hours_1h`` (:func:`due_hours`), the newest
    ``max_hours`` of them, a slice of at most :data:`SLICE` per transaction, on the
    writer's connection, after deleting the rows of hours before the 1-hour tier's first
    (its retention is the table's). With each hour, its rows of ``gpu_usage_from_1h``
    where ``gpu_usage_1h`` does not hold it (warehouse/hour_usage.py, ``idle_pct``), the
    energy method card's seconds and its tensor activity per job (``tensor_hours_1h``).
    First it fills the rows kept without a column (:func:`fill_rows`: ``fleet_filled``,
    ``fleet_dropped``). Returns ``fleet_hours`` (hours computed), ``fleet_pending`` (due
    hours left for the next refresh), those two and ``fleet_s`` (seconds)."""
    from warehouse.queries import tensor
    from warehouse.queries.energy import _HOUR_CTES  # it imports the analytics: lazily
    from warehouse.queries.energy_method import KEEP_SQL

    t0 = time.perf_counter()

    insert_energy = hour_usage.insert_sql(_HOUR_CTES)
    with transaction(con):  # retention: the hours the 1-hour tier no longer holds go too
        for table in KEPT_TABLES:
            con.execute(fill("DELETE FROM {table} WHERE ts < coalesce((SELECT date_trunc("
                             "'hour', min(ts)) FROM gpu_samples_1h), 'infinity'::TIMESTAMP)",
                             table=table))
    filled = fill_rows(con)
    heal_lo, heal_hi, heal_next = _heal_window(con, now, recheck_days)
    due = due_hours(con, now, recheck_days=recheck_days, idle_pct=idle_pct,
                    heal=(heal_lo, heal_hi))
    todo = due[-max_hours:] if max_hours > 0 else due
    def compute(lo: datetime, hi: datetime) -> None:
        params = {"lo": lo, "hi": hi, "start": lo, "end": hi, "now": now,
                  "idle_pct": float(idle_pct)}
        with transaction(con):
            for table in KEPT_TABLES:
                con.execute(fill(_DELETE_RANGE_SQL, table=table), {"lo": lo, "hi": hi})
            con.execute(*bind(_INSERT_SQL, **params))
            con.execute(*bind(insert_energy, **params))
            con.execute(*bind(KEEP_SQL, **params))  # the energy method's seconds
            con.execute(*bind(tensor.KEEP_SQL, **params))  # tensor activity per job

    for lo, hi in merge_ranges([(t, t) for t in todo], HOUR):
        # live collection waits one slice, not the whole refresh
        kept_hours.in_slices(lo, hi, SLICE, compute)
    kept_hours.move_heal_cursor(con, HEAL_KEY, heal_next, (heal_lo, heal_hi),
                                due[:len(due) - len(todo)])
    return {"fleet_hours": len(todo), "fleet_pending": len(due) - len(todo), **filled,
            "fleet_s": round(time.perf_counter() - t0, 3)}

"""Energy per GPU per hour from the energy counter, into the derived ``gpu_energy_1h``.

A GPU's energy in a sampling step is the delta of its cumulative counter (``energy_j``,
joules) between consecutive samples. The delta is used when it is trustworthy: both
readings present, not negative (a negative delta is a counter reset: driver reload,
reboot), the gap between the samples at most ``max_gap_s`` and the implied power below
``MAX_PLAUSIBLE_W``. Otherwise the step falls back to ``power_w x interval_s`` (the
integral of power, as the rollups compute it). Steps are attributed to the hour of the
later sample. Hours whose raw samples are gone (retention), and a GPU's hour of which
the raw tier holds fewer samples than its 1-hour rollup row counts (a late batch after
retention), take the 1-hour rollup's energy (``method = 'rollup'``).

Incremental and idempotent: an hour is recomputed when the number of raw samples behind
it differs from the 1-hour rollup's (new, late or repeated deliveries), so running the
refresh after the rollup job keeps the table exact.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from warehouse import node_energy
from warehouse.db import transaction
from warehouse.rollups import MAX_PLAUSIBLE_W, merge_ranges
from warehouse.writer import yield_to_urgent

HOUR = timedelta(hours=1)
SLICE = timedelta(hours=24)  # hours recomputed per statement

_STALE_HOURS_SQL = """
SELECT h.ts FROM (SELECT ts, sum(samples) AS n FROM gpu_samples_1h WHERE ts <= $now
                  GROUP BY ts) h
LEFT JOIN (SELECT ts, sum(samples) AS n FROM gpu_energy_1h GROUP BY ts) e USING (ts)
WHERE e.n IS DISTINCT FROM h.n
ORDER BY h.ts
"""

_FROM_RAW_SQL = """
INSERT INTO gpu_energy_1h
WITH s AS (
    SELECT ts, node, gpu_index, energy_j, power_w, interval_s,
           lag(ts) OVER w AS prev_ts, lag(energy_j) OVER w AS prev_j
    FROM gpu_samples WHERE ts >= $lo - $max_gap AND ts < $hi
    WINDOW w AS (PARTITION BY node, gpu_index ORDER BY ts)
),
d AS (
    SELECT date_trunc('hour', ts) AS ts, node, gpu_index,
           energy_j - prev_j AS delta_j,
           (epoch_us(ts) - epoch_us(prev_ts)) / 1e6 AS gap_s,
           coalesce(power_w, 0) * coalesce(interval_s, 0) AS power_j
    FROM s WHERE ts >= $lo
),
k AS (
    SELECT *, coalesce(delta_j >= 0 AND gap_s <= $max_gap_s
                       AND delta_j <= gap_s * $max_w, false) AS ok
    FROM d
)
SELECT a.* FROM (
    SELECT ts, node, gpu_index, sum(CASE WHEN ok THEN delta_j ELSE power_j END),
           count(*) AS n, sum(ok::INTEGER),
           CASE WHEN bool_and(ok) THEN 'counter' WHEN bool_or(ok) THEN 'mixed'
                ELSE 'power' END
    FROM k GROUP BY ts, node, gpu_index) a
JOIN gpu_samples_1h h ON h.ts = a.ts AND h.node = a.node AND h.gpu_index = a.gpu_index
WHERE a.n >= h.samples
"""

_FROM_ROLLUP_SQL = """
INSERT INTO gpu_energy_1h
SELECT ts, node, gpu_index, energy_j, samples, 0, 'rollup'
FROM gpu_samples_1h h WHERE ts >= $lo AND ts < $hi AND NOT EXISTS (
    SELECT 1 FROM gpu_energy_1h e WHERE e.ts >= $lo AND e.ts < $hi AND e.ts = h.ts
      AND e.node = h.node AND e.gpu_index = h.gpu_index)
"""


def refresh_energy(con, now: datetime, *, max_gap_s: float) -> int:
    """Recompute the stale hours of ``gpu_energy_1h`` (see module doc); each slice in its
    own transaction; then the node-hours kept from them (warehouse/node_energy.py). Runs
    on the writer thread. Returns the hours of ``gpu_energy_1h`` recomputed."""
    stale = [r[0] for r in con.execute(_STALE_HOURS_SQL, {"now": now}).fetchall()]
    _recompute_stale(con, stale, max_gap_s)
    node_energy.refresh(con, now, hours=stale)  # the kept node-hours (issue 17)
    return len(stale)


def _recompute_stale(con, stale: list[datetime], max_gap_s: float) -> None:
    if not stale:
        return
    raw_from = con.execute("SELECT min(ts) FROM gpu_samples").fetchone()[0]
    first_raw_hour = None
    if raw_from is not None:  # the first partial hour of raw data is rollup-only
        first_raw_hour = raw_from.replace(minute=0, second=0, microsecond=0)
        first_raw_hour += HOUR if first_raw_hour < raw_from else timedelta(0)
    for lo, hi in merge_ranges([(t, t) for t in stale], HOUR):
        start = lo
        while start < hi:
            end = min(hi, start + SLICE)
            raw = first_raw_hour is not None and start >= first_raw_hour
            if not raw and first_raw_hour is not None and first_raw_hour < end:
                end = first_raw_hour
            _recompute(con, start, end, raw, max_gap_s)
            start = end
            yield_to_urgent()  # live collection waits one slice, not the whole refresh


#: From raw samples, a GPU's hour is recomputed only where the raw tier holds all its
#: samples (at least as many as its 1-hour rollup row counts; ``_FROM_RAW_SQL`` joins
#: the same way): a row that still agrees with the rollup and whose raw rows retention
#: deleted stays, and one that disagrees takes the rollup's energy (``_FROM_ROLLUP_SQL``
#: fills what is missing). A late batch older than ``retention.raw_days`` (or a
#: re-delivery of part of an hour) thus never reduces a GPU's hour to the few raw rows
#: it brought (issue 17).
_DELETE_RAW_GPUS_SQL = """
DELETE FROM gpu_energy_1h e WHERE ts >= $lo AND ts < $hi AND (
    e.samples IS DISTINCT FROM (
        SELECT h.samples FROM gpu_samples_1h h
        WHERE h.ts = e.ts AND h.node = e.node AND h.gpu_index = e.gpu_index)
    OR EXISTS (
        SELECT 1 FROM gpu_samples_1h h JOIN (
            SELECT date_trunc('hour', ts) AS ts, node, gpu_index, count(*) AS n
            FROM gpu_samples WHERE ts >= $lo AND ts < $hi GROUP BY ALL) r
          ON r.ts = h.ts AND r.node = h.node AND r.gpu_index = h.gpu_index
        WHERE h.ts = e.ts AND h.node = e.node AND h.gpu_index = e.gpu_index
          AND r.n >= h.samples))
"""


def _recompute(con, lo: datetime, hi: datetime, raw: bool, max_gap_s: float) -> None:
    with transaction(con):
        con.execute(_DELETE_RAW_GPUS_SQL if raw else
                    "DELETE FROM gpu_energy_1h WHERE ts >= $lo AND ts < $hi",
                    {"lo": lo, "hi": hi})
        if raw:
            con.execute(_FROM_RAW_SQL, {"lo": lo, "hi": hi, "max_gap_s": float(max_gap_s),
                                        "max_gap": timedelta(seconds=max_gap_s),
                                        "max_w": MAX_PLAUSIBLE_W})
        con.execute(_FROM_ROLLUP_SQL, {"lo": lo, "hi": hi})

"""Incremental rollups of raw samples into 1-minute and 1-hour tables, and retention.

Each samples batch leaves its time range in ``rollup_pending``. ``rollup`` recomputes
exactly the 1-minute buckets those ranges touch (from raw rows, each GPU's minute that
has at least as many raw rows as its stored row: retention may have deleted the
others', see ``_MINUTE_DELETE_SQL``), their per node sums (``gpu_nodes_1m``,
warehouse/node_minutes.py) from the minute rows, and then the 1-hour
buckets (from 1-minute rows), so late or repeated deliveries give the same result as
on-time ones. Averages in the hour tier are weighted by sample counts.

Storage (issue 17): rows are written in ``(ts, node, gpu_index)`` order, so that each
bucket's rows lie together as a scrape's do in the raw tier: DuckDB then stores ``ts``
as runs (RLE) and the GPU columns as a repeating pattern, where the hash aggregate's
order cost 4.7 bytes a row for ``ts`` alone. A bucket's power (``power_w_avg``,
``power_w_max``) is W rounded to 1 mW, the sources' own resolution, as DOUBLE
(migration 017: ALP packs it as an integer, 2.6 bytes a row against 3.3). Its
``energy_j`` is REAL (J, migration 012); a sum REAL cannot hold (beyond
:data:`REAL_MAX`, only from absurd bulk input the live path refuses) is stored as NULL
and counted in ``RollupResult.energy_unstorable`` rather than failing the rollup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from gpulens.settings import default, setting_field
from warehouse import meta, node_minutes
from warehouse.clock import floor_to
from warehouse.db import fill, transaction
from warehouse.writer import yield_to_urgent

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
SLICE = timedelta(hours=6)  # one transaction recomputes at most this much raw time

#: ``meta`` keys: the latest time before which retention deleted raw and minute rows
#: (ISO, naive UTC); minutes (hours) before it may hold fewer raw rows (minutes) than
#: their rows count. Without one (a warehouse whose retention has not run since this
#: was added) every minute and hour is guarded.
RAW_CUTOFF_KEY = "retention.raw_cutoff"
MINUTE_CUTOFF_KEY = "retention.minute_cutoff"

MAX_PLAUSIBLE_W = 3000.0  # a counter delta implying more than this per GPU is garbage
#: Largest magnitude stored in a REAL column (FLOAT's 3.4028235e38, rounded down).
REAL_MAX = 3.4e38
#: Longest gap (s) over which a counter delta is trusted (energy.max_counter_gap_s's default).
COUNTER_GAP_S = default("energy.max_counter_gap_s")

#: Energy of a sampling step (issue 21): the energy counter's delta from the previous
#: sample where trustworthy (both present, not negative: a reset, gap at most
#: COUNTER_GAP_S, below MAX_PLAUSIBLE_W), else power x interval; the same rule as
#: warehouse/energy.py, so job energy from the minute tier follows the counter.
_MINUTE_SQL = fill("""
INSERT INTO gpu_samples_1m
WITH s AS (
    SELECT *, lag(ts) OVER w AS prev_ts, energy_j - lag(energy_j) OVER w AS delta_j
    FROM gpu_samples WHERE ts >= $1 - INTERVAL {gap} SECOND AND ts < $2
    WINDOW w AS (PARTITION BY node, gpu_index ORDER BY ts)
),
k AS (
    SELECT *, CASE WHEN delta_j >= 0 AND gap_s <= {gap} AND delta_j <= gap_s * {max_w}
                   THEN delta_j ELSE coalesce(power_w, 0) * coalesce(interval_s, 0)
              END AS step_j
    FROM (SELECT *, (epoch_us(ts) - epoch_us(prev_ts)) / 1e6 AS gap_s FROM s)
    WHERE ts >= $1
)
SELECT * FROM (
SELECT date_trunc('minute', ts) AS ts, node, gpu_index, any_value(gpu_uuid),
       count(*), sum(coalesce(interval_s, 0)),
       avg(util_pct), max(util_pct), avg(sm_active_pct),
       avg(mem_used_mib), max(mem_used_mib), round(avg(power_w), 3),
       round(max(power_w)::DOUBLE, 3),
       CASE WHEN NOT isfinite(sum(step_j)) OR abs(sum(step_j)) <= {real_max}
            THEN sum(step_j) END,
       avg(temp_c), min(temp_c), max(temp_c), max(mem_temp_c), avg(sm_clock_mhz),
       sum(CASE WHEN throttle_thermal THEN coalesce(interval_s, 0) ELSE 0 END),
       sum(CASE WHEN throttle_power THEN coalesce(interval_s, 0) ELSE 0 END),
       avg(tensor_active_pct), avg(dram_active_pct)
FROM k
GROUP BY ALL) a
WHERE NOT EXISTS (  -- the minutes _MINUTE_DELETE_SQL kept
    SELECT 1 FROM gpu_samples_1m m WHERE m.ts >= $1 AND m.ts < $2 AND m.ts = a.ts
      AND m.node = a.node AND m.gpu_index = a.gpu_index)
ORDER BY 1, 2, 3
""", gap=float(COUNTER_GAP_S), max_w=MAX_PLAUSIBLE_W, real_max=REAL_MAX)


def _wavg(col: str) -> str:
    return fill("sum({col} * samples) / nullif(sum(CASE WHEN {col} IS NOT NULL THEN samples END),"
                " 0)", col=col)


_HOUR_SQL = fill("""
INSERT INTO gpu_samples_1h
SELECT * FROM (
SELECT date_trunc('hour', ts) AS ts, node, gpu_index, any_value(gpu_uuid),
       sum(samples), sum(covered_s),
       {util}, max(util_pct_max), {sm_active},
       {mem_used}, max(mem_used_mib_max), round({power}, 3),
       max(power_w_max),
       CASE WHEN NOT isfinite(sum(energy_j)) OR abs(sum(energy_j)) <= {real_max}
            THEN sum(energy_j) END,
       {temp}, min(temp_c_min), max(temp_c_max), max(mem_temp_c_max),
       {sm_clock}, sum(throttle_thermal_s), sum(throttle_power_s), {tensor}, {dram}
FROM gpu_samples_1m WHERE ts >= $1 AND ts < $2
GROUP BY ALL) a
WHERE NOT EXISTS (  -- the hours _HOUR_DELETE_SQL kept
    SELECT 1 FROM gpu_samples_1h h WHERE h.ts >= $1 AND h.ts < $2 AND h.ts = a.ts
      AND h.node = a.node AND h.gpu_index = a.gpu_index)
ORDER BY 1, 2, 3
""", real_max=REAL_MAX, util=_wavg("util_pct_avg"), sm_active=_wavg("sm_active_pct_avg"),
    mem_used=_wavg("mem_used_mib_avg"), power=_wavg("power_w_avg"), temp=_wavg("temp_c_avg"),
    sm_clock=_wavg("sm_clock_mhz_avg"), tensor=_wavg("tensor_active_pct_avg"),
    dram=_wavg("dram_active_pct_avg"))


@dataclass(frozen=True)
class RollupResult:
    ranges: int  # merged pending ranges processed
    minute_rows: int  # 1-minute rows written
    hour_rows: int
    #: 1-minute rows whose energy REAL could not hold, stored as NULL (see above)
    energy_unstorable: int = 0


def merge_ranges(
    ranges: list[tuple[datetime, datetime]], step: timedelta
) -> list[tuple[datetime, datetime]]:
    """Widen closed ranges [lo, hi] to whole buckets [floor(lo), floor(hi)+step); merge."""
    spans = sorted((floor_to(lo, step), floor_to(hi, step) + step) for lo, hi in ranges)
    merged: list[tuple[datetime, datetime]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


_NULL_ENERGY_SQL = ("SELECT count(*) FROM gpu_samples_1m "
                    "WHERE ts >= $1 AND ts < $2 AND energy_j IS NULL")


#: The minute rows of ``[$1, $2)`` the minute rollup recomputes: after the raw tier's
#: retention cutoff (:data:`RAW_CUTOFF_KEY`) all of them; before it (retention deleted
#: raw rows there) each GPU's minute with at least as many raw rows as the row counts
#: (``_MINUTE_SQL`` then skips the minutes kept; the guard on every minute cost the live
#: rollup ~10 % more CPU): a late batch older than ``retention.raw_days`` adds its own minutes and
#: keeps every other GPU's, and every other minute of its own GPUs, and a partial
#: re-delivery of a rolled-up minute (which the raw tier can no longer recognise as
#: stored) leaves the complete minute as it was.
_MINUTE_DELETE_SQL = "DELETE FROM gpu_samples_1m WHERE ts >= $1 AND ts < $2"
_MINUTE_DELETE_GUARDED_SQL = """
DELETE FROM gpu_samples_1m m USING (
    SELECT date_trunc('minute', ts) AS ts, node, gpu_index, count(*) AS n
    FROM gpu_samples WHERE ts >= $1 AND ts < $2 GROUP BY ALL) r
WHERE m.ts >= $1 AND m.ts < $2 AND m.ts = r.ts AND m.node = r.node
  AND m.gpu_index = r.gpu_index AND m.samples <= r.n
"""
#: The same rule one tier up, for the hours before the minute tier's retention cutoff
#: (:data:`MINUTE_CUTOFF_KEY`): there a GPU's hour is recomputed only where the minute
#: tier holds at least as many of its samples as the hour row counts, so a backfill older
#: than ``retention.minute_days`` keeps the other GPUs' hours (``_HOUR_SQL`` skips those
#: kept). Later hours, whose minutes are all there, are simply recomputed (the guard
#: cost the live rollup ~13 % more CPU).
_HOUR_DELETE_SQL = "DELETE FROM gpu_samples_1h WHERE ts >= $1 AND ts < $2"
_HOUR_DELETE_GUARDED_SQL = """
DELETE FROM gpu_samples_1h h USING (
    SELECT date_trunc('hour', ts) AS ts, node, gpu_index, sum(samples) AS n
    FROM gpu_samples_1m WHERE ts >= $1 AND ts < $2 GROUP BY ALL) r
WHERE h.ts >= $1 AND h.ts < $2 AND h.ts = r.ts AND h.node = r.node
  AND h.gpu_index = r.gpu_index AND h.samples <= r.n
"""


def _recompute(con, delete_sql: str, insert_sql: str, lo: datetime, hi: datetime) -> int:
    con.execute(delete_sql, [lo, hi])
    row = con.execute(insert_sql, [lo, hi]).fetchone()
    return int(row[0]) if row else 0


def _cutoff(con, key: str) -> datetime | None:
    value = meta.get(con, key)
    return datetime.fromisoformat(value) if value else None


def rollup(con: duckdb.DuckDBPyConnection) -> RollupResult:
    """Recompute the buckets touched by pending sample ranges. Runs on the writer thread."""
    pending = con.execute("SELECT rowid, ts_min, ts_max FROM rollup_pending").fetchall()
    if not pending:
        return RollupResult(0, 0, 0)
    minute_spans = merge_ranges([(lo, hi) for _, lo, hi in pending], MINUTE)
    minute_rows = hour_rows = unstorable = 0
    raw_cutoff = _cutoff(con, RAW_CUTOFF_KEY)
    for lo, hi in minute_spans:
        start = lo
        while start < hi:
            end = min(hi, start + SLICE)
            with transaction(con):
                guarded = raw_cutoff is None or start < raw_cutoff
                minute_rows += _recompute(con, _MINUTE_DELETE_GUARDED_SQL if guarded
                                          else _MINUTE_DELETE_SQL, _MINUTE_SQL, start, end)
                # the per node sums of whatever the minute tier now holds there
                node_minutes.refresh(con, start, end)
                # a minute's energy is a sum of non-NULL steps: NULL only when unstorable
                unstorable += con.execute(_NULL_ENERGY_SQL, [start, end]).fetchall()[0][0]
            start = end
            yield_to_urgent()  # live collection waits one slice, not the whole rollup
    cutoff = _cutoff(con, MINUTE_CUTOFF_KEY)
    with transaction(con):
        for lo, hi in merge_ranges([(lo, hi - MINUTE) for lo, hi in minute_spans], HOUR):
            guarded = cutoff is None or lo < cutoff
            hour_rows += _recompute(con, _HOUR_DELETE_GUARDED_SQL if guarded
                                    else _HOUR_DELETE_SQL, _HOUR_SQL, lo, hi)
        con.execute(
            "DELETE FROM rollup_pending WHERE rowid IN (SELECT unnest($1::BIGINT[]))",
            [[r[0] for r in pending]],
        )
    if unstorable:
        log.warning("rollup: %d minute rows' energy beyond REAL stored as NULL", unstorable)
    return RollupResult(len(minute_spans), minute_rows, hour_rows, unstorable)


@dataclass(frozen=True)
class Retention:
    """How long each tier is kept, in days."""

    raw_days: float = setting_field("retention.raw_days")
    mig_days: float = setting_field("retention.mig_days")
    minute_days: float = setting_field("retention.minute_days")
    hour_days: float = setting_field("retention.hour_days")


def retention_cutoffs(now: datetime, keep: Retention) -> dict[str, datetime]:
    """Table -> the time (naive UTC) before which :func:`apply_retention` at ``now``
    deletes its rows. The day of a cutoff is left partial in the warehouse."""
    return {
        "gpu_samples": now - timedelta(days=keep.raw_days),
        # MIG jobs' energy reads the instances' samples when an hour is recomputed
        "gpu_mig_samples": now - timedelta(days=keep.mig_days),
        "gpu_samples_1m": now - timedelta(days=keep.minute_days),
        "gpu_nodes_1m": now - timedelta(days=keep.minute_days),  # its per node sums
        "gpu_nodes_5m": now - timedelta(days=keep.minute_days),  # and their 5-min blocks
        "gpu_samples_1h": now - timedelta(days=keep.hour_days),
        "gpu_energy_1h": now - timedelta(days=keep.hour_days),
        "node_energy_1h": now - timedelta(days=keep.hour_days),  # kept from it
        "node_energy_hours": now - timedelta(days=keep.hour_days),
        "gpu_usage_1h": now - timedelta(days=keep.hour_days),
        "gpu_usage_hours": now - timedelta(days=keep.hour_days),
        "run_usage_1h": now - timedelta(days=keep.hour_days),  # kept from gpu_usage_1h
        "gpu_events": now - timedelta(days=keep.hour_days),
    }


def apply_retention(con: duckdb.DuckDBPyConnection, now: datetime, keep: Retention,
                    keep_raw_from: datetime | None = None) -> dict:
    """Delete rows older than each tier's retention; return rows deleted per table.

    Raw samples the minute rollup still has to read stay: those of the pending ranges'
    first minute on, and the :data:`COUNTER_GAP_S` before it that the counter deltas look
    back to (a backfill of days older than ``raw_days`` is rolled up before it goes).
    ``keep_raw_from`` (naive UTC) holds raw samples from that time on as well: the lake's
    days not yet exported (gpulens/lake_job.py)."""
    cutoffs = retention_cutoffs(now, keep)
    if keep_raw_from is not None:
        cutoffs["gpu_samples"] = min(cutoffs["gpu_samples"], keep_raw_from)
    pending = con.execute("SELECT min(ts_min) FROM rollup_pending").fetchone()[0]
    if pending is not None:
        needed = floor_to(pending, MINUTE) - timedelta(seconds=COUNTER_GAP_S)
        cutoffs["gpu_samples"] = min(cutoffs["gpu_samples"], needed)
    deleted = {}
    with transaction(con):
        for table, cutoff in cutoffs.items():
            row = con.execute(fill("DELETE FROM {table} WHERE ts < $1", table=table),
                              [cutoff]).fetchone()
            deleted[table] = int(row[0]) if row else 0
        # the block the minute tier's cutoff cuts, from the minutes it keeps
        node_minutes.refresh_blocks(con, cutoffs["gpu_nodes_1m"], cutoffs["gpu_nodes_1m"])
        for key, table in ((RAW_CUTOFF_KEY, "gpu_samples"),
                           (MINUTE_CUTOFF_KEY, "gpu_samples_1m")):
            before = _cutoff(con, key)
            if before is None or before < cutoffs[table]:
                meta.put(con, key, cutoffs[table].isoformat())
    return deleted

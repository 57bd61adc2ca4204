"""When the refresh computes a kept hour again: what the usage table's ledger
(warehouse/usage.py) and the fleet's hours (warehouse/fleet_hours.py) share.

Both recompute, per complete hour, what has no row or changed since it was kept:
exactly within the recheck window (``analytics.recheck_days`` before now), and before it
by the allocations' sums of a day, a chunk of :data:`HEAL_DAYS` days per refresh
(:func:`heal_window`, each table with its own cursor in meta).

Timestamps are naive UTC, ranges ``[start, end)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import duckdb

from warehouse.clock import HOUR, floor_hour
from warehouse.db import fill, transaction
from warehouse.writer import yield_to_urgent

log = logging.getLogger(__name__)

#: A 32-bit key of an allocation for :data:`ALLOC_MOMENTS`' ``key_us``: the column
#: ``allocations.alloc_key`` (migration 26), which the writer sets from DuckDB's
#: ``hash()`` of the row's primary key (warehouse/schema.py:ALLOC_KEY_SQL; a stable
#: digest such as md5 cost 20x more: ~1 s of CPU for 726,000 allocations). Hashed on
#: each read it was half of the read check (~90 of ~180 ms over a 24,576-GPU week).
#: Stored, the keys outlive a DuckDB upgrade, and so do the kept key moments
#: (warehouse/fleet_hours.py:resign_after_upgrade). Migration 23.
ALLOC_KEY = "alloc_key"

#: Exact integers of the allocations clipped to [{s}, {e}) (timestamps), summed: the time
#: moment sum(epoch_us(e)^2 - epoch_us(s)^2) (``m2``: an allocation moved in time, even
#: with its length kept), the microseconds x ``gpu_index`` (``gpu_us``: one moved to
#: another GPU at the same times) and the microseconds x :data:`ALLOC_KEY` (``key_us``:
#: GPU time moved to another node, job or run at the same times and GPU index, e.g. a
#: run's tail given to the next run on another node). Additive over time: e^2 - s^2
#: telescopes over the pieces of an allocation, so the hours' sums are their day's (or
#: range's) exactly.
_MOMENTS = """
sum((epoch_us({e}) - epoch_us({s}))::HUGEINT * (epoch_us({e}) + epoch_us({s})){n}) AS m2,
sum((epoch_us({e}) - epoch_us({s}))::HUGEINT * {gpu}) AS gpu_us,
sum((epoch_us({e}) - epoch_us({s}))::HUGEINT * {key}) AS key_us"""
ALLOC_MOMENTS = fill(_MOMENTS, n="", gpu="gpu_index", key=ALLOC_KEY)
#: The same integers from ``run_nodes`` rows (warehouse/run_nodes.py), each standing for
#: ``gpus`` allocations with its times, whose GPU indices and keys sum to
#: ``gpu_index_sum`` and ``key_sum``: every term is the allocation's clipped
#: microseconds times a value, and the row's allocations share those microseconds.
RUN_NODE_MOMENTS = fill(_MOMENTS, n=" * gpus", gpu="gpu_index_sum", key="key_sum")

#: An allocation's fraction of its GPU (shard/MPS share, as the energy queries clamp it)
#: in millionths, an integer: microseconds x it summed per hour add up to the range's sum
#: exactly, so the read check (:func:`warehouse.fleet_hours.table_serves`) compares them.
SHARE_PPM = "CAST(least(greatest(coalesce(share, 1.0), 0.0), 1.0) * 1000000 AS BIGINT)"

#: Per hour of [$lo, $hi) (``sig``): sum(samples) of the 1-hour tier, the hash-sum of the
#: allocations clipped to the hour, their GPU-microseconds in it and their moments
#: (:data:`ALLOC_MOMENTS`). Clipping keeps a running job's past hours unchanged when it
#: ends: only the hour of its end changes.
SIGNATURES = fill("""
sig_hours AS (SELECT unnest(range($lo::TIMESTAMP, $hi::TIMESTAMP, INTERVAL 1 HOUR)) AS ts),
sig_samples AS (
    SELECT ts, sum(samples) AS samples FROM gpu_samples_1h
    WHERE ts >= $lo AND ts < $hi GROUP BY ts
),
sig_clipped AS (
    SELECT ts, job_id, run_index, node, gpu_index, share, gpu_i_ids, alloc_key,
           greatest(start_ts, ts) AS s,
           least(coalesce(end_ts, ts + INTERVAL 1 HOUR), ts + INTERVAL 1 HOUR) AS e
    FROM (SELECT *, unnest(range(greatest(date_trunc('hour', start_ts), $lo::TIMESTAMP),
                                 least(coalesce(end_ts, $hi::TIMESTAMP), $hi::TIMESTAMP),
                                 INTERVAL 1 HOUR)) AS ts
          FROM allocations WHERE start_ts < $hi AND coalesce(end_ts, $hi) > $lo)
),
sig_allocs AS (
    SELECT ts, sum(hash(job_id, run_index, node, gpu_index, s, e, share, gpu_i_ids))
                   AS alloc_sig,
           sum(epoch_us(e) - epoch_us(s)) AS alloc_us, {moments}
    FROM sig_clipped GROUP BY ts
),
sig AS (
    SELECT h.ts, coalesce(s.samples, 0)::BIGINT AS samples,
           coalesce(a.alloc_sig, 0)::HUGEINT AS alloc_sig,
           coalesce(a.alloc_us, 0)::BIGINT AS alloc_us,
           coalesce(a.m2, 0)::HUGEINT AS alloc_m2, coalesce(a.gpu_us, 0)::HUGEINT AS alloc_gpu_us,
           coalesce(a.key_us, 0)::HUGEINT AS alloc_key_us
    FROM sig_hours h LEFT JOIN sig_samples s USING (ts) LEFT JOIN sig_allocs a USING (ts)
)""", moments=fill(ALLOC_MOMENTS, s="s", e="e"))

#: Days before the recheck window whose allocations one refresh compares with the kept
#: hours (the usage ledger's and ``fleet_hours_1h``'s, each with its own cursor in meta),
#: going back a chunk per refresh from the window and starting again from it past the
#: first hour: one pass over all of them would cost more than all the rest (~0.25 s of
#: CPU per 2 days of a 24,576-GPU fleet's allocations). The minute tier's 90 days are
#: compared in 45 refreshes (under 4 hours at the default 300-s interval).
HEAL_DAYS = 2


def recheck_start(first: datetime, now: datetime, recheck_days: float) -> datetime:
    """The recheck window's start (``$lo`` of :func:`due_from`): ``recheck_days`` before
    ``now``, floored to the hour, between ``first`` (floored) and the last complete hour."""
    hi = floor_hour(now)
    return min(hi, max(floor_hour(first), floor_hour(now - timedelta(days=recheck_days))))


def due_from(con, sql: str, first: datetime | None, now: datetime, *,
             recheck_days: float, idle_pct: float,
             heal: tuple[datetime, datetime] | None = None) -> list[datetime]:
    """The hours ``sql`` finds due between ``first`` (floored to the hour) and the last
    complete hour before ``now``, rechecking those within ``recheck_days``: ``sql``
    takes ``$first``, ``$lo`` (the recheck window's start, :func:`recheck_start`),
    ``$hi``, ``$idle_pct`` and ``$heal_lo``, ``$heal_hi`` (``heal``, the chunk of days
    before the window whose allocations it compares; None: all of them) and returns
    the hours."""
    hi = floor_hour(now)
    if first is None or floor_hour(first) >= hi:
        return []
    lo = recheck_start(first, now, recheck_days)
    heal_lo, heal_hi = heal if heal is not None else (floor_hour(first), lo)
    rows = con.execute(sql, {"first": floor_hour(first), "lo": lo, "hi": hi,
                             "idle_pct": float(idle_pct), "heal_lo": heal_lo,
                             "heal_hi": heal_hi}).fetchall()
    return [r[0] for r in rows]


def heal_window(con, first: datetime | None, top: datetime, key: str,
                days: float = HEAL_DAYS) -> tuple[datetime, datetime, datetime]:
    """The next chunk ``[lo, hi)`` of ``days`` days between ``first`` (floored to the
    hour) and ``top`` (the recheck window's start) to compare, read from meta's cursor
    ``key``, and where the cursor goes past it (:func:`move_heal_cursor`)."""
    if first is None:
        return top, top, top
    rows = con.execute("SELECT value FROM meta WHERE key = $k", {"k": key}).fetchall()
    hi = datetime.fromisoformat(rows[0][0]) if rows else top
    if not floor_hour(first) < hi <= top:
        hi = top
    lo = max(floor_hour(first), datetime.combine((hi - timedelta(days=days)).date(),
                                                 datetime.min.time()))
    return lo, hi, (lo if lo > floor_hour(first) else top)


def move_heal_cursor(con, key: str, to: datetime, chunk: tuple[datetime, datetime],
                     left: list[datetime]) -> None:
    """Meta's cursor ``key`` moved to ``to`` (on the writer's connection), unless hours
    of ``chunk`` (``[lo, hi)``) are among ``left``, those due that this refresh did not
    compute (more were due than one refresh computes): the chunk is then compared again
    next time instead of waiting for the next rotation."""
    if any(chunk[0] <= t < chunk[1] for t in left):
        return
    with transaction(con):
        con.execute("INSERT OR REPLACE INTO meta VALUES ($k, $v)",
                    {"k": key, "v": to.isoformat()})


def in_slices(lo: datetime, hi: datetime, step: timedelta,
              compute: Callable[[datetime, datetime], object]) -> None:
    """``compute(a, b)`` over ``[lo, hi)`` (whole hours) in slices of at most ``step``,
    each its own transaction (``compute`` opens it), the writer yielding to urgent work
    between them. A slice that runs out of DuckDB's memory (``memory_limit``, the
    service's ``warehouse.memory_limit_mb``) is rolled back and computed again as two
    halves on the hour, down to one hour, which then raises: at 24,576 GPUs a 6-hour
    slice of the usage table (8.8 M minute rows) did not fit in 512 MiB, and the whole
    refresh failed (issue 17, the full-size `bench/scale.py`)."""
    while lo < hi:
        end = min(hi, lo + step)
        try:
            compute(lo, end)
        except duckdb.OutOfMemoryException:
            if end - lo <= HOUR:
                raise
            log.info("the refresh's slice %s to %s ran out of DuckDB's memory_limit "
                     "(warehouse.memory_limit_mb): computing it in halves", lo, end)
            half = max(HOUR, (end - lo) // 2 // HOUR * HOUR)
            in_slices(lo, end, half, compute)
        lo = end
        yield_to_urgent()

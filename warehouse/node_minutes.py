"""Per node and minute sums of the 1-minute tier (``gpu_nodes_1m``, migration 019).

Charts over a day read every GPU's minute rows: 35 M rows a day at 24,576 GPUs. The
fleet-wide ones (utilisation and throttling over time) only ever sum those rows per
minute, and a job's telemetry sums the rows of the job's GPUs, which are whole nodes
for most jobs. This table holds the same sums per node and minute (a node's GPUs
together: 8x fewer rows on 8-GPU nodes), so those charts sum it instead, with the same
figures (floating-point sums in another order: ~1e-15 relative).

The table is a function of ``gpu_samples_1m`` alone: :func:`refresh` recomputes a time
range's rows from the minute tier's rows of that range, after whatever the rollup did to
them (recomputed, kept by the guard before the raw tier's retention cutoff, re-delivered
late), in the same transaction (warehouse/rollups.py). Retention deletes it with the
minute tier (same cutoff, same minutes). Anything else that writes ``gpu_samples_1m``
and whose charts are read calls :func:`refresh` for what it wrote (bench/dashboard.py's
generated warehouse; bench/analytics.py's partial minute tier feeds no chart).

Columns, per ``(ts, node)`` (ts: minute start, naive UTC):

- ``gpus``: minute rows (GPUs reporting); ``gpu_mask``: bit ``i`` set when GPU index
  ``i`` reported (UBIGINT; NULL when any reporting index is outside 0-63);
- ``samples`` (raw samples), ``covered_s`` (s); ``util_n`` (rows with a utilisation),
  ``util_pct_sum`` (sum of ``util_pct_avg``, percent), ``util_pct_min`` (percent);
- ``power_w_sum`` (sum of ``power_w_avg``, W);
- ``temp_n``, ``temp_c_sum`` (sum of ``temp_c_avg``, °C), ``temp_c_wsum`` (sum of
  ``temp_c_avg x samples``, °C x samples, computed as the thermal chart computes it),
  ``temp_c_max`` (°C);
- ``throttle_thermal_s``, ``throttle_power_s`` (GPU-seconds throttled);
- ``power_n`` (rows with ``power_w_avg``) and ``sm_clock_mhz_min`` (the lowest
  ``sm_clock_mhz_avg``, MHz), migration 027: NULL in rows written before it.

``gpu_nodes_5m`` (migration 028) holds the same sums per node and 5-minute block (``ts``:
the block's start), from this table's rows: ``minutes`` (bit ``i``: the block's minute
``i`` has a row), ``gpu_mask`` OR-ed over the minutes (NULL where any minute's is), and
``power_n`` NULL where any minute's is. :func:`refresh` recomputes the blocks its range
touches, whole; retention deletes the blocks before its cutoff and recomputes the one it
cuts (:func:`refresh_blocks`). A job's telemetry and heat map read a block where the job
held the node all of it (warehouse/queries/job_minutes.py), from meta
:data:`BLOCKS_FROM_KEY` on (the blocks before the migration were not summed).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from warehouse.clock import ceil_to, floor_to
from warehouse.db import fill

#: One GPU index's bit of ``gpu_mask`` (NULL outside 0-63).
MASK_BIT = ("CASE WHEN gpu_index BETWEEN 0 AND 63 THEN (1::UBIGINT << gpu_index::UBIGINT) "
            "END")

#: The sums of the minute tier's rows grouped per ``(ts, node)``, in the table's column
#: order; migration 019 filled an existing warehouse with the same expression (without
#: migration 027's last two columns).
SELECT_SQL = fill("""
SELECT ts, node, count(*)::INTEGER AS gpus,
       CASE WHEN bool_and(gpu_index BETWEEN 0 AND 63) THEN bit_or({bit}) END AS gpu_mask,
       sum(samples) AS samples, sum(covered_s) AS covered_s,
       count(util_pct_avg)::INTEGER AS util_n, sum(util_pct_avg) AS util_pct_sum,
       min(util_pct_avg) AS util_pct_min, sum(power_w_avg) AS power_w_sum,
       count(temp_c_avg)::INTEGER AS temp_n, sum(temp_c_avg) AS temp_c_sum,
       sum(temp_c_avg * samples) AS temp_c_wsum, max(temp_c_max) AS temp_c_max,
       sum(throttle_thermal_s) AS throttle_thermal_s,
       sum(throttle_power_s) AS throttle_power_s,
       count(power_w_avg)::INTEGER AS power_n, min(sm_clock_mhz_avg) AS sm_clock_mhz_min
FROM gpu_samples_1m WHERE ts >= $1 AND ts < $2
GROUP BY ts, node ORDER BY ts, node
""", bit=MASK_BIT)

_DELETE_SQL = "DELETE FROM gpu_nodes_1m WHERE ts >= $1 AND ts < $2"
_INSERT_SQL = "INSERT INTO gpu_nodes_1m " + SELECT_SQL


#: A block of ``gpu_nodes_5m`` (and in seconds).
BLOCK = timedelta(minutes=5)
BLOCK_S = int(BLOCK.total_seconds())
#: meta: the first block ``gpu_nodes_5m`` holds for every node (migration 028), ISO text.
BLOCKS_FROM_KEY = "gpu_nodes_5m.from"

#: The sums of ``gpu_nodes_1m``'s rows grouped per node and 5-minute block, in
#: ``gpu_nodes_5m``'s column order.
BLOCK_SELECT_SQL = """
SELECT time_bucket(INTERVAL 5 MINUTE, ts) AS block, node,
       bit_or(1::UTINYINT << ((epoch(ts) - epoch(time_bucket(INTERVAL 5 MINUTE, ts))) // 60)
              ::UTINYINT) AS minutes,
       sum(gpus)::INTEGER AS gpus,
       CASE WHEN count(gpu_mask) = count(*) THEN bit_or(gpu_mask) END AS gpu_mask,
       sum(samples) AS samples, sum(covered_s) AS covered_s, sum(util_n)::INTEGER AS util_n,
       sum(util_pct_sum) AS util_pct_sum, min(util_pct_min) AS util_pct_min,
       sum(power_w_sum) AS power_w_sum, sum(temp_n)::INTEGER AS temp_n,
       sum(temp_c_sum) AS temp_c_sum, sum(temp_c_wsum) AS temp_c_wsum,
       max(temp_c_max) AS temp_c_max, sum(throttle_thermal_s) AS throttle_thermal_s,
       sum(throttle_power_s) AS throttle_power_s,
       CASE WHEN count(power_n) = count(*) THEN sum(power_n)::INTEGER END AS power_n,
       min(sm_clock_mhz_min) AS sm_clock_mhz_min
FROM gpu_nodes_1m WHERE ts >= $1 AND ts < $2
GROUP BY block, node ORDER BY block, node
"""
_BLOCK_DELETE_SQL = "DELETE FROM gpu_nodes_5m WHERE ts >= $1 AND ts < $2"
_BLOCK_INSERT_SQL = "INSERT INTO gpu_nodes_5m " + BLOCK_SELECT_SQL


def refresh(con, lo: datetime, hi: datetime) -> int:
    """Recompute the rows of ``[lo, hi)`` (naive UTC) from ``gpu_samples_1m``, and the
    blocks of ``gpu_nodes_5m`` they touch; run it inside the transaction that changed the
    minute tier there. Returns the minute rows written."""
    con.execute(_DELETE_SQL, [lo, hi])
    row = con.execute(_INSERT_SQL, [lo, hi]).fetchone()
    refresh_blocks(con, lo, hi)
    return int(row[0]) if row else 0


def refresh_blocks(con, lo: datetime, hi: datetime) -> int:
    """Recompute the 5-minute blocks touching ``[lo, hi)`` (naive UTC), whole, from
    ``gpu_nodes_1m``. Returns the rows written."""
    lo, hi = floor_to(lo, BLOCK), ceil_to(hi, BLOCK)
    con.execute(_BLOCK_DELETE_SQL, [lo, hi])
    row = con.execute(_BLOCK_INSERT_SQL, [lo, hi]).fetchone()
    return int(row[0]) if row else 0

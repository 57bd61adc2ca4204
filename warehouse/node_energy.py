"""Node energy per hour, kept (``node_energy_1h``, migration 24, issue 17).

The Energy page's energy over time and by rack (warehouse/queries/energy.py:energy_by)
price, per node-hour, the GPUs' energy (``gpu_energy_1h`` summed per node) and the rest
of the node: ``other_power_w``, else the BMC's energy counter, else its power readings
(``node_power``). Grouping a day of both per node-hour took ~0.19 s of CPU at 24,576
GPUs on every call. The analytics refresh (warehouse/energy.py:refresh_energy) keeps
those per node-hour values here, computed by the same statement (:data:`NODE_HOURS`),
and per hour what they were computed from (``node_energy_hours``):

- ``gpu_rows``, ``gpu_sig``: the hour's ``gpu_energy_1h`` rows and the sum of a hash of
  each row (time, node, GPU, joules);
- ``power_rows``, ``power_us``, ``power_sig``: the ``node_power`` readings of the hour
  and of the hour before (the BMC counter's first step of the hour starts there), the
  sum of their times in microseconds and a hash-sum of their values. ``node_power`` is
  append-only (a reading is added, or retention deletes it; never changed), so a query
  compares rows and times only; the refresh compares the values too.

A query reads an hour kept only when every whole hour of its range is kept and still
matches (:func:`serves`); the ragged end is computed live, as is everything otherwise.
The refresh computes hours with no kept row (newest first, :data:`MAX_HOURS` a refresh),
the hours whose ``gpu_energy_1h`` rows it recomputed, and within :data:`RECHECK` of now
the hours whose inputs changed (late readings). A reading arriving later than that makes
ranges over its hour read live until the hour is recomputed.
After a DuckDB upgrade (its hash() may differ) the kept hours are deleted and
computed again (:data:`HASH_KEY`).

Units: joules, watts; timestamps naive UTC, hours ``[ts, ts + 1 h)``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from warehouse import meta
from warehouse.db import fill, transaction
from warehouse.kept_hours import in_slices
from warehouse.rollups import merge_ranges
from warehouse.usage import HOUR, ceil_hour, floor_hour

#: W: a BMC energy counter step implying more is not a reading of one node (a counter
#: wrapped or replaced) and is skipped; no single server draws 100 kW.
MAX_NODE_W = 100_000.0
MAX_HOURS = 48  # hours computed per refresh at most (~5 ms each at 24,576 GPUs)
RECHECK = timedelta(days=2)  # hours compared with their inputs at every refresh
SLICE = timedelta(hours=6)  # hours computed per transaction
#: meta's key for the DuckDB whose hash() made the kept hash-sums (``gpu_sig``,
#: ``power_sig``): another DuckDB may hash otherwise, and every kept hour would then look
#: changed, those older than RECHECK read live until retention (as fleet_hours.HASH_KEY).
HASH_KEY = "node_energy_hash_duckdb"

#: Per node-hour of ``[$start, $end)`` (CTE ``{name}``: ts, node, gpu_j, w, bmc_w,
#: counter_j): the GPUs' joules, the mean ``other_power_w`` and ``total_power_w`` of the
#: node's readings in the hour, and the BMC counter's joules scaled to the hour, for every
#: node-hour with ``gpu_energy_1h`` rows. Parameters: $start, $end, $max_node_w. An hour's
#: values depend on the readings of that hour and the hour before only, so computed over
#: any range holding the hour they are the same.
NODE_HOURS = """
g AS (
    SELECT ts, node, sum(energy_j) AS gpu_j FROM gpu_energy_1h
    WHERE ts >= $start AND ts < $end GROUP BY ts, node
),
measured AS (
    SELECT date_trunc('hour', ts) AS ts, node, avg(other_power_w) AS w,
           avg(total_power_w) AS bmc_w FROM node_power
    WHERE ts >= $start AND ts < $end GROUP BY ALL
),
bmc_steps AS (  -- the BMC's energy counter between consecutive readings, in the later one's
                -- hour: kept when not negative (a reset), within an hour, below $max_node_w
    SELECT date_trunc('hour', ts) AS ts, node, d_j, gap_s FROM (
        SELECT ts, node, energy_j - lag(energy_j) OVER w AS d_j,
               (epoch_us(ts) - epoch_us(lag(ts) OVER w)) / 1e6 AS gap_s
        FROM node_power
        WHERE energy_j IS NOT NULL AND ts >= $start - INTERVAL 1 HOUR AND ts < $end
        WINDOW w AS (PARTITION BY node ORDER BY ts))
    WHERE ts >= $start AND d_j >= 0 AND gap_s > 0 AND gap_s <= 3600
      AND d_j <= gap_s * $max_node_w
),
bmc_counter AS (  -- J in the node-hour: the counted joules scaled to the hour
    SELECT ts, node, sum(d_j) * 3600.0 / sum(gap_s) AS j FROM bmc_steps GROUP BY ALL
),
node_m AS (  -- a counter that did not move while the node drew power is too coarse
             -- (some BMCs count whole kWh): that hour takes the power readings
    SELECT ts, node, m.w, m.bmc_w,
           CASE WHEN c.j > 0 OR coalesce(m.bmc_w, 0) = 0 THEN c.j END AS counter_j
    FROM measured m FULL JOIN bmc_counter c USING (ts, node)
),
{name} AS (
    SELECT g.ts, g.node, g.gpu_j, m.w, m.bmc_w, m.counter_j
    FROM g LEFT JOIN node_m m USING (ts, node)
)"""

#: Per hour of ``[$lo, $hi)`` (CTE ``sig``) what its kept values are computed from (zeros
#: before ``{scan_lo}``: only the hours from there on are read); ``{power_sig}``: a hash-sum
#: of the readings' values too (the refresh's check), or NULL (a query's).
_SIG = """
sig_hours AS (SELECT unnest(range($lo::TIMESTAMP, $hi::TIMESTAMP, INTERVAL 1 HOUR)) AS ts),
sig_gpu AS (
    SELECT date_trunc('hour', ts) AS ts, count(*) AS n,
           sum(hash(ts, node, gpu_index, energy_j)) AS h
    FROM gpu_energy_1h WHERE ts >= {scan_lo} AND ts < $hi GROUP BY 1
),
sig_power AS (
    SELECT date_trunc('hour', ts) AS ts, count(*) AS n, sum(epoch_us(ts)) AS us,
           {power_sig} AS h
    FROM node_power WHERE ts >= {scan_lo}::TIMESTAMP - INTERVAL 1 HOUR AND ts < $hi
    GROUP BY 1
),
sig AS (
    SELECT h.ts, coalesce(g.n, 0) AS gpu_rows, coalesce(g.h, 0) AS gpu_sig,
           coalesce(p0.n, 0) + coalesce(p1.n, 0) AS power_rows,
           coalesce(p0.us, 0) + coalesce(p1.us, 0) AS power_us,
           coalesce(p0.h, 0) + coalesce(p1.h, 0) AS power_sig
    FROM sig_hours h LEFT JOIN sig_gpu g USING (ts)
    LEFT JOIN sig_power p0 ON p0.ts = h.ts
    LEFT JOIN sig_power p1 ON p1.ts = h.ts - INTERVAL 1 HOUR
)"""

_SAME = """k.gpu_rows = s.gpu_rows AND k.gpu_sig = s.gpu_sig AND k.power_rows = s.power_rows
       AND k.power_us = s.power_us"""
#: The readings' values: ``node_power`` is append-only (warehouse/schema.py:APPEND_ONLY),
#: so a query checks rows and times only (a hash of 1.3-4.4 M readings a day cost ~40
#: ms); a reading changed in place anyway is seen by the next refresh within RECHECK.
_POWER_HASH = "sum(hash(ts, node, other_power_w, total_power_w, energy_j))"

#: The hours of [$lo, $hi) kept and still matching, and the gpu_energy_1h rows of
#: [$start, $lo) (rows off the hour, which the kept hours would not hold).
_SERVES_SQL = fill("""
WITH {sig}
SELECT count(*) FILTER (WHERE {same}),
       (SELECT count(*) FROM gpu_energy_1h WHERE ts >= $start AND ts < $lo)
FROM sig s JOIN node_energy_hours k USING (ts)
""", sig=fill(_SIG, scan_lo="$lo", power_sig="NULL::HUGEINT"), same=_SAME)

#: The hours of [$lo, $hi) kept: fewer than the range's, it is computed live without
#: hashing its inputs first (~0.1 s of CPU for 7 days at 24,576 GPUs).
_KEPT_SQL = "SELECT count(*) FROM node_energy_hours WHERE ts >= $lo AND ts < $hi"

_EXISTS_SQL = ("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'node_energy_hours' "
               "AND schema_name = current_schema() AND database_name = current_database()")

#: Hours of [$lo, $hi) to compute: without a kept row (any), or within [$check_lo, $hi)
#: kept from other inputs; newest first.
_DUE_SQL = fill("""
WITH {sig}
SELECT s.ts FROM sig s LEFT JOIN node_energy_hours k USING (ts)
WHERE k.ts IS NULL OR s.ts >= $check_lo AND NOT ({same} AND k.power_sig = s.power_sig)
ORDER BY s.ts DESC LIMIT $n
""", sig=fill(_SIG, scan_lo="$check_lo", power_sig=_POWER_HASH), same=_SAME)

_INSERT_ROWS_SQL = fill("""
INSERT INTO node_energy_1h WITH {node_hours}
SELECT ts, node, gpu_j, w, bmc_w, counter_j FROM nh
""", node_hours=fill(NODE_HOURS, name="nh"))

_INSERT_SIG_SQL = fill("""
INSERT INTO node_energy_hours WITH {sig}
SELECT ts, gpu_rows, gpu_sig, power_rows, power_us, power_sig, $now FROM sig
""", sig=fill(_SIG, scan_lo="$lo", power_sig=_POWER_HASH))


def serves(cur, start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The whole hours ``[lo, hi)`` of ``[start, end)`` when every one is kept and its
    inputs are as they were (and ``gpu_energy_1h`` holds no row between ``start`` and
    ``lo``), else None: the range is then computed live."""
    lo, hi = ceil_hour(start), floor_hour(end)
    if lo >= hi or not cur.execute(_EXISTS_SQL).fetchall()[0][0]:
        return None
    hours = int((hi - lo) / HOUR)
    if cur.execute(_KEPT_SQL, {"lo": lo, "hi": hi}).fetchall()[0][0] < hours:
        return None  # an hour not kept (yet, or before the data): no hash-sums in vain
    fresh, head = cur.execute(_SERVES_SQL, {"start": start, "lo": lo, "hi": hi}
                              ).fetchall()[0]
    return (lo, hi) if fresh == hours and head == 0 else None


def _compute(con, lo: datetime, hi: datetime, now: datetime) -> None:
    with transaction(con):
        for table in ("node_energy_1h", "node_energy_hours"):
            con.execute(fill("DELETE FROM {t} WHERE ts >= $1 AND ts < $2", t=table), [lo, hi])
        con.execute(_INSERT_ROWS_SQL, {"start": lo, "end": hi, "max_node_w": MAX_NODE_W})
        con.execute(_INSERT_SIG_SQL, {"lo": lo, "hi": hi, "now": now})


def _forget_after_upgrade(con) -> None:
    """When meta names another DuckDB than this one for the kept hash-sums, delete the
    kept hours (computed again newest first, :data:`MAX_HOURS` a refresh; read live
    until then), and record this DuckDB. None recorded: rows kept before the key was,
    by this DuckDB."""
    version = con.execute("SELECT library_version FROM pragma_version()").fetchall()[0][0]
    was = meta.get(con, HASH_KEY)
    if was == version:
        return
    with transaction(con):
        if was is not None:
            con.execute("DELETE FROM node_energy_1h")
            con.execute("DELETE FROM node_energy_hours")
        meta.put(con, HASH_KEY, version)


def refresh(con, now: datetime, *, hours: list[datetime] = (),
            max_hours: int = MAX_HOURS) -> int:
    """Compute the due hours before ``now``'s hour (see the module doc) and ``hours`` (the
    hours whose ``gpu_energy_1h`` rows were just recomputed), on the writer's connection.
    Returns the hours computed."""
    _forget_after_upgrade(con)
    first = con.execute("SELECT min(ts) FROM gpu_energy_1h").fetchall()[0][0]
    hi = floor_hour(now)
    due = set(hours)
    if first is not None and floor_hour(first) < hi:
        due |= {r[0] for r in con.execute(_DUE_SQL, {
            "lo": floor_hour(first), "hi": hi, "check_lo": max(floor_hour(first), hi - RECHECK),
            "n": max(0, max_hours)}).fetchall()}
    for lo, top in merge_ranges([(t, t) for t in due if t < hi], HOUR):
        in_slices(lo, top, SLICE, lambda a, b: _compute(con, a, b, now))
    return len([t for t in due if t < hi])

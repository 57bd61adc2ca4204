"""Queries of the Overview page: headline figures and the rack floor map.

"Latest samples" are each GPU's newest row of ``gpu_samples`` with ``ts`` in
``(now - stale_after_s, now]`` (read from ``gpu_latest``, :func:`fleet.latest_source`):
a GPU whose collector has been silent for longer counts as not reporting, never as idle.
"Allocated now" are the rows of ``allocations`` with ``start_ts <= now`` and ``end_ts``
NULL or after ``now``. All times are naive UTC.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pandas as pd

from warehouse.db import fill
from warehouse.queries import fleet, goodput

_LATEST = """
latest AS (
    SELECT node, gpu_index, ts, util_pct, power_w, temp_c FROM {latest_rows} r
)"""

_ALLOCATED = """
allocated AS (
    SELECT DISTINCT node, gpu_index FROM allocations
    WHERE start_ts <= $now AND (end_ts IS NULL OR end_ts > $now)
)"""

_HEADLINE_SQL = fleet.per_latest(fill("""
WITH {latest}, {allocated}
SELECT
    coalesce(nullif((SELECT count(*) FROM gpus), 0), (SELECT sum(gpus) FROM nodes), 0)
        AS gpus,
    (SELECT count(*) FROM latest) AS gpus_reporting,
    (SELECT count(*) FROM allocated) AS allocated_gpus,
    (SELECT avg(l.util_pct) FROM latest l JOIN allocated a USING (node, gpu_index))
        AS mean_util_allocated_pct,
    (SELECT sum(power_w) / 1000.0 FROM latest) AS power_kw,
    (SELECT max(ts) FROM latest) AS latest_sample_ts
""", latest=_LATEST, allocated=_ALLOCATED))

_FLOOR_SQL = fleet.per_latest(fill("""
WITH {latest},
per_gpu AS (
    SELECT n.rack, l.node, l.gpu_index, l.temp_c, l.util_pct, l.power_w
    FROM latest l JOIN nodes n USING (node)
),
hottest AS (
    SELECT rack, node AS hottest_node, gpu_index AS hottest_gpu_index,
           temp_c AS hottest_temp_c
    FROM per_gpu WHERE temp_c IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY rack ORDER BY temp_c DESC, node, gpu_index) = 1
),
agg AS (
    SELECT rack, count(*) AS gpus_reporting, avg(util_pct) AS mean_util_pct,
           sum(power_w) / 1000.0 AS power_kw
    FROM per_gpu GROUP BY rack
),
installed AS (
    SELECT n.rack, coalesce(nullif(count(g.gpu_uuid), 0), any_value(n.gpus)) AS gpus
    FROM nodes n LEFT JOIN gpus g USING (node) GROUP BY n.rack, n.node
)
SELECT r.rack, r.zone, r."row" AS "row", r.x, r.y,
       coalesce((SELECT sum(i.gpus) FROM installed i WHERE i.rack = r.rack), 0) AS gpus,
       coalesce(a.gpus_reporting, 0) AS gpus_reporting,
       h.hottest_temp_c, h.hottest_node, h.hottest_gpu_index,
       a.mean_util_pct, a.power_kw
FROM racks r LEFT JOIN agg a USING (rack) LEFT JOIN hottest h USING (rack)
ORDER BY r.rack
""", latest=_LATEST))


def iso_week_start(now: datetime) -> datetime:
    """Monday 00:00 (naive UTC) of the ISO week holding ``now``."""
    day = now - timedelta(days=now.weekday())
    return day.replace(hour=0, minute=0, second=0, microsecond=0)


def _since(now: datetime, stale_after_s: float) -> datetime:
    return now - timedelta(seconds=stale_after_s)


def headline(
    cur,
    *,
    now: datetime,
    week_start: datetime,
    stale_after_s: float = fleet.STALE_AFTER_S,
) -> dict:
    """The Overview's headline figures as plain Python values (None where unknown).

    Keys: ``gpus`` (installed GPUs, from topology), ``gpus_reporting`` (GPUs with a
    latest sample), ``allocated_gpus`` (allocated now), ``allocated_share_pct``
    (allocated / installed, percent), ``mean_util_allocated_pct`` (mean util_pct of the
    latest samples of allocated GPUs, percent), ``power_kw`` (sum of the latest samples'
    power_w, kilowatts), ``latest_sample_ts``, ``gpu_hours_lost_week`` (GPU-hours of the
    failed runs that ended since ``week_start``, :func:`warehouse.queries.goodput.lost_total`:
    the same figure as every other view), ``failed_runs_week``, ``week_start``,
    ``stale_after_s``.
    """
    row = cur.execute(
        _HEADLINE_SQL[fleet.latest_source(cur, now)],
        {"now": now, "since": _since(now, stale_after_s)},
    ).fetchone()
    gpus, reporting, allocated, util, power_kw, latest_ts = row
    lost = goodput.lost_total(cur, start=week_start, end=now)
    return {
        "gpus": int(gpus or 0),
        "gpus_reporting": int(reporting or 0),
        "allocated_gpus": int(allocated or 0),
        "allocated_share_pct": 100.0 * allocated / gpus if gpus else None,
        "mean_util_allocated_pct": _num(util),
        "power_kw": _num(power_kw),
        "latest_sample_ts": latest_ts,
        "gpu_hours_lost_week": lost["gpu_hours_lost"],
        "failed_runs_week": lost["failed_runs"],
        "week_start": week_start,
        "stale_after_s": stale_after_s,
    }


def rack_floor(cur, *, now: datetime,
               stale_after_s: float = fleet.STALE_AFTER_S) -> pd.DataFrame:
    """One row per rack of the topology with its latest-sample figures.

    Columns: rack, zone, row, x, y (floor tiles), gpus (installed), gpus_reporting,
    hottest_temp_c (°C), hottest_node, hottest_gpu_index, mean_util_pct (percent),
    power_kw (kilowatts). Racks without a latest sample keep NULL figures.
    """
    params = {"now": now, "since": _since(now, stale_after_s)}
    return cur.execute(_FLOOR_SQL[fleet.latest_source(cur, now)], params).df()


def _num(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def firing_by_rack(cur) -> pd.DataFrame:
    """Firing alerts per rack and severity, for the floor maps: rack, severity, alerts."""
    return cur.execute(
        """SELECT rack, severity, count(*) AS alerts FROM alerts
           WHERE state = 'firing' AND rack IS NOT NULL
           GROUP BY rack, severity ORDER BY rack, severity"""
    ).df()

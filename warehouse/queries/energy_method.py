"""How each job run's GPU energy was measured (issue 21), for the pages to say beside it.

A run's GPU energy (warehouse/queries/energy.py:run_energy) is read per part of the range
(warehouse/usage.py:plan). Each GPU-second the run held is counted under one method:

- ``energy counter``: from the 1-minute tier (live or the usage table), in a GPU-hour
  whose sampling steps took the energy counter's delta (``gpu_energy_1h``:
  counter_samples / samples, the same rule as the 1-minute rollup);
- ``counter, hourly-scaled``: the same, but read from the 1-hour tier (the 1-minute tier
  is gone, or ``resolution="hour"``): the GPU-hour's counter energy shared by the
  seconds held;
- ``power integral``: the steps where the counter was missing or not trusted (a reset,
  a gap, no counter on the GPU) fall back to power x interval.

A GPU-hour computed after its raw samples were gone (``method = 'rollup'``) counts as
counter: the rollups took the counter's delta wherever it was trustworthy.
Units: seconds (GPU-seconds held); ranges ``[start, end)`` naive UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from warehouse import fleet_hours, hour_usage, usage
from warehouse.db import fill
from warehouse.queries.energy import ALLOC_HOUR_CTES
from warehouse.queries.job_minutes import JOB_ALLOCATIONS_VIEW

METHODS = ("energy counter", "counter, hourly-scaled", "power integral")

#: Per ``{keys}`` and GPU-hour: the seconds held and those whose energy the counter gave.
_HELD_SQL = """
WITH {ctes}
SELECT {keys}, ao.ts, sum(ao.overlap_s) AS held_s,
       sum(ao.overlap_s * CASE WHEN g.method = 'rollup' THEN 1.0
                               ELSE g.counter_samples / g.samples END) AS counter_s
FROM ao JOIN gpu_energy_1h g USING (node, gpu_index, ts)
WHERE g.samples > 0
  AND g.ts >= date_trunc('hour', $start::TIMESTAMP) AND g.ts < $end  -- zone maps
GROUP BY ALL
"""
_RUN_CTES = usage.WANTED + "," + fill(ALLOC_HOUR_CTES, runs=fill(usage.RUNS, alias=""))
_SQL = {source: fill(_HELD_SQL, keys="ao.job_id, ao.run_index",
                     ctes=fill(_RUN_CTES, allocations=source))
        for source in ("allocations", JOB_ALLOCATIONS_VIEW)}
#: The same summed over all runs per GPU-hour's ``ts`` only: the window's label needs no
#: per-run rows (issue 17: it was computed per run and GPU-hour, then summed in pandas,
#: for the Energy page's first callback).
_WINDOW_SQL = fill(_HELD_SQL, keys="count(*) AS n",
                   ctes=fill(ALLOC_HOUR_CTES, runs="TRUE", allocations="allocations"))

_ENERGY_SIG = fill(fleet_hours.ENERGY_SIG, lo="$start", hi="$end")

#: The analytics refresh keeps :data:`_WINDOW_SQL`'s sums of the whole hours of
#: [$start, $end) in their ``fleet_hours_1h`` rows (warehouse/fleet_hours.py), with the
#: energy rows' signature (issue 17: joining every allocation-hour of a day with the
#: day's GPU-hours took ~0.4 s of CPU per Energy page at 24,576 GPUs).
KEEP_SQL = fill("""
UPDATE fleet_hours_1h f
SET held_s = coalesce(w.held_s, 0), counter_s = coalesce(w.counter_s, 0),
    energy_sig = coalesce(e.energy_sig, 0)
FROM (SELECT unnest(range($start::TIMESTAMP, $end::TIMESTAMP, INTERVAL 1 HOUR)) AS ts) h
LEFT JOIN ({window}) w USING (ts) LEFT JOIN ({energy_sig}) e USING (ts)
WHERE f.ts = h.ts
""", window=_WINDOW_SQL, energy_sig=_ENERGY_SIG)

#: The kept hours of [$start, $end) whose energy rows are as they were (``fresh``).
_KEPT_SQL = fill("""
SELECT t.ts, t.held_s, t.counter_s, t.energy_sig = coalesce(e.energy_sig, 0) AS fresh
FROM fleet_hours_1h t LEFT JOIN ({energy_sig}) e USING (ts)
WHERE t.ts >= $start AND t.ts < $end
""", energy_sig=_ENERGY_SIG)


def run_methods(cur, *, start: datetime, end: datetime,
                runs: list[tuple[str, int]] | None = None,
                resolution: str | None = None, job_rows: bool = False) -> pd.DataFrame:
    """Per run (job_id, run_index) the GPU-seconds held in ``[start, end)`` whose energy
    came from each method (columns of :data:`METHODS`, seconds) and ``method``, the
    label for the run (:func:`label`). ``runs``: only these; ``resolution`` as in
    run_energy. GPU-hours without energy rows are not counted. ``job_rows``: read the
    allocations from the cursor's view of one job's rows
    (warehouse/queries/job_minutes.py:job_allocations), not from the table (issue 17:
    scanning the table for an 8,192-GPU job's runs was ~0.06 s of its Energy panel)."""
    params = {"start": start, "end": end,
              "runs": None if runs is None else [f"{j}:{int(r)}" for j, r in runs]}
    df = cur.execute(_SQL[JOB_ALLOCATIONS_VIEW if job_rows else "allocations"], params).df()
    cols = ["job_id", "run_index", *METHODS, "method"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = _by_method(cur, df, start=start, end=end, resolution=resolution)
    out = df.groupby(["job_id", "run_index"], as_index=False)[list(METHODS)].sum()
    out["method"] = [label(*r) for r in out[list(METHODS)].itertuples(index=False)]
    return out[cols]


def label(counter_s: float, hourly_s: float, power_s: float) -> str:
    """Pure: the method of a figure from its GPU-seconds under each method: one name
    when one method gave (nearly, >= 99.5 %) all of it, else each method's share, e.g.
    ``"energy counter 80 %, power integral 20 %"``; ``"no telemetry"`` for none."""
    seconds = dict(zip(METHODS, (counter_s, hourly_s, power_s), strict=True))
    total = sum(max(0.0, s) for s in seconds.values())
    if total <= 0:
        return "no telemetry"
    shares = {m: max(0.0, s) / total for m, s in seconds.items()}
    main = max(shares, key=shares.get)
    if shares[main] >= 0.995:
        return main
    return ", ".join(f"{m} {100 * v:.0f} %" for m, v in shares.items() if v >= 0.005)


def window_method(cur, *, start: datetime, end: datetime,
                  resolution: str | None = None) -> str:
    """The method label of all runs' GPU energy in ``[start, end)``."""
    return label(*window_seconds(cur, start=start, end=end, resolution=resolution))


def window_seconds(cur, *, start: datetime, end: datetime,
                   resolution: str | None = None) -> tuple[float, float, float]:
    """All runs' GPU-seconds held in ``[start, end)`` under each of :data:`METHODS`
    (the sums of :func:`run_methods`' columns, summed per GPU-hour in SQL): the whole
    hours from the sums the analytics refresh keeps where they still hold
    (:func:`kept_hours`), the rest live."""
    lo, hi = usage.ceil_hour(start), usage.floor_hour(end)
    kept = kept_hours(cur, lo, hi) if lo < hi else None
    spans = [(start, end)] if kept is None else [(start, lo), (hi, end)]
    frames = [cur.execute(_WINDOW_SQL, {"start": a, "end": b}).df()
              for a, b in spans if a < b]
    df = pd.concat([f for f in [kept, *frames] if f is not None and len(f)] or [
        pd.DataFrame(columns=["ts", "held_s", "counter_s"])], ignore_index=True)
    if df.empty:
        return 0.0, 0.0, 0.0
    df = _by_method(cur, df, start=start, end=end, resolution=resolution)
    return tuple(float(df[m].sum()) for m in METHODS)


def kept_hours(cur, start: datetime, end: datetime) -> pd.DataFrame | None:
    """The kept sums (``ts``, ``held_s``, ``counter_s``) of the whole hours of ``[start,
    end)``, or None unless every hour has them and they were computed from what the
    1-hour tier, the allocations (their microseconds, time moments, GPUs and shares:
    warehouse/fleet_hours.py:MOMENTS) and ``gpu_energy_1h``
    hold now (warehouse/hour_usage.py:serves)."""
    if not hour_usage.serves(cur, start, end, None):
        return None
    df = cur.execute(_KEPT_SQL, {"start": start, "end": end}).df()
    if len(df) != int((end - start) / usage.HOUR) or not df["fresh"].fillna(False).all():
        return None
    return df[["ts", "held_s", "counter_s"]]


def _by_method(cur, df: pd.DataFrame, *, start: datetime, end: datetime,
               resolution: str | None) -> pd.DataFrame:
    """``df`` (ts, held_s, counter_s per GPU-hour) with the seconds of each of
    :data:`METHODS`: the counter's seconds are hourly-scaled in a GPU-hour read from the
    1-hour tier (warehouse/usage.py:plan), the rest of the seconds held are the power
    integral's."""
    hourly = pd.Series(False, index=df.index)
    for p in usage.plan(cur, start, end, resolution=resolution):
        if p.path == "hour":  # a GPU-hour read from the 1-hour tier in this part
            ts = pd.to_datetime(df["ts"])
            hourly |= (ts + pd.Timedelta(hours=1) > p.start) & (ts < p.end)
    counter = df["counter_s"].fillna(0.0)
    df["energy counter"] = counter.where(~hourly, 0.0)
    df["counter, hourly-scaled"] = counter.where(hourly, 0.0)
    df["power integral"] = df["held_s"] - counter
    return df


def raw_counters(cur) -> pd.DataFrame:
    """Every raw sample's energy counter (``ts``, ``node``, ``gpu_index``, ``energy_j``
    in joules), for checking a run's energy against the counter itself
    (bench/energy.py)."""
    return cur.execute("SELECT ts, node, gpu_index, energy_j FROM gpu_samples").df()


def whole_allocations(cur, *, start: datetime, end: datetime,
                      min_length: timedelta) -> pd.DataFrame:
    """Allocations (``job_id``, ``run_index``, ``node``, ``gpu_index``, ``s``, ``e``)
    lying wholly inside ``[start, end]`` and held at least ``min_length``: the runs whose
    energy the counter can check from end to end."""
    return cur.execute(
        "SELECT job_id, run_index, node, gpu_index, start_ts AS s, end_ts AS e "
        "FROM allocations WHERE start_ts >= $lo AND end_ts <= $hi "
        "AND end_ts - start_ts >= $min",
        {"lo": start, "hi": end, "min": min_length}).df()

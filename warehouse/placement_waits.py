"""Large jobs that waited while their GPUs were free but scattered (issue 15, section 3).

A job of at least ``min_gpus`` GPUs pending at an instant waited *while scattered*
(:func:`scattered_waits`) when its partition had at least its GPUs free but no placement
for it: fewer GPUs on wholly free nodes than it needs (multi-node), or no node with
enough free GPUs (single node). The free GPUs per instant and partition are
warehouse/placement.py's fragmentation. Instants are hourly; times are UTC, hours the
unit.

SQL here is constant text; every value is a parameter.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from warehouse.placement import fragmentation, hourly_ticks

_PENDING = """
SELECT j.job_id, j.name, j.user_name, coalesce(j.partition, '') AS partition, j.gpus,
       j.submit_ts, j.start_ts
FROM jobs j
WHERE j.gpus >= $min_gpus AND j.submit_ts IS NOT NULL AND j.submit_ts < $end
  AND j.submit_ts <= $now AND (j.start_ts IS NULL OR j.start_ts > $start)
  AND ($partition::VARCHAR IS NULL OR coalesce(j.partition, '') = $partition)
ORDER BY j.submit_ts
"""


def pending_large(cur, *, start: datetime, end: datetime, now: datetime, min_gpus: int,
                  partition: str | None = None) -> pd.DataFrame:
    """Jobs of at least ``min_gpus`` GPUs that were pending at some time in
    ``[start, end)``: job_id, name, user_name, partition, gpus, submit_ts, start_ts."""
    return cur.execute(_PENDING, {"start": start, "end": end, "now": now,
                                  "min_gpus": int(min_gpus), "partition": partition}).df()


def scattered_waits(pending: pd.DataFrame, by_partition: pd.DataFrame, *, now: datetime,
                    node_gpus: float, step_h: float = 1.0) -> pd.DataFrame:
    """Per pending job (pure): the instants of ``by_partition`` (fragmentation's
    per-partition frame) it was pending at, as ``pending_h``, and those at which its
    partition had its GPUs free but scattered, as ``scattered_h`` (hours, ``step_h``
    each). Jobs of more than ``node_gpus`` GPUs need whole nodes.

    Vectorised per partition (issue 17: a filter per job took minutes for a 24,576-GPU
    week): a job's instants are a slice ``[lo, hi)`` of the partition's sorted instants
    (binary search), and the scattered ones a difference of running counts, one per
    distinct job size."""
    out = pending.copy()
    pend = np.zeros(len(pending))
    scat = np.zeros(len(pending))
    if len(pending) and len(by_partition):
        submit = _ns(pending["submit_ts"])
        until = _ns(pending["start_ts"].where(pending["start_ts"].notna(), pd.Timestamp(now)))
        gpus = pd.to_numeric(pending["gpus"], errors="coerce").to_numpy(float)
        for part, rows in by_partition.groupby("partition", sort=False):
            idx = np.flatnonzero((pending["partition"] == part).to_numpy(bool))
            if not len(idx):
                continue
            rows = rows.sort_values("ts", kind="stable")
            ts = _ns(rows["ts"])
            lo = np.searchsorted(ts, submit[idx], "left")
            hi = np.maximum(np.searchsorted(ts, until[idx], "left"), lo)
            pend[idx] = (hi - lo) * step_h
            free = rows["free_gpus"].to_numpy(float)
            for g in np.unique(gpus[idx][~np.isnan(gpus[idx])]):
                room = rows["whole_node_gpus" if g > node_gpus else "largest_node_gpus"]
                ok = (free >= g) & (room.to_numpy(float) < g)
                seen = np.concatenate([[0], np.cumsum(ok)])
                k = gpus[idx] == g
                scat[idx[k]] = (seen[hi[k]] - seen[lo[k]]) * step_h
    out["pending_h"] = pend
    out["scattered_h"] = scat
    return out


def _ns(times) -> np.ndarray:
    """Timestamps as int64 nanoseconds; NaT as the largest value (after every instant)."""
    ns = pd.to_datetime(times).astype("datetime64[ns]").to_numpy().view("int64").copy()
    ns[ns == np.iinfo(np.int64).min] = np.iinfo(np.int64).max
    return ns


def waits_while_scattered(cur, *, start: datetime, end: datetime, now: datetime,
                          min_gpus: int, partition: str | None = None,
                          frag: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`scattered_waits` of the jobs of at least ``min_gpus`` GPUs pending in
    ``[start, end)``, on hourly instants; most hours waited while scattered first.
    ``frag``: :func:`warehouse.placement.fleet_fragmentation`'s frame of the same window
    and partition, whose per-partition rows (``attrs["by_partition"]``) hold every whole
    hour of ``[start, min(end, now))``, so the report reads and groups the free GPUs
    once (issue 17); None: read here."""
    stop = min(end, now)
    pending = pending_large(cur, start=start, end=stop, now=now, min_gpus=min_gpus,
                            partition=partition)
    if len(pending) == 0:
        return pending.assign(pending_h=pd.Series(dtype=float),
                              scattered_h=pd.Series(dtype=float))
    first = max(start, pending["submit_ts"].min().to_pydatetime())
    ticks = hourly_ticks(first, stop)
    if frag is None:
        by_partition = fragmentation(cur, ticks=ticks, usual={},
                                     partition=partition).attrs["by_partition"]
    else:  # the window's instants include these: keep exactly them (free, whole and
        # largest node GPUs per instant and partition do not depend on the usual size)
        by_partition = frag.attrs["by_partition"]
        by_partition = by_partition[by_partition["ts"].isin(pd.to_datetime(ticks))]
    node = cur.execute("SELECT coalesce(median(gpus), 1) FROM nodes").fetchone()[0]
    out = scattered_waits(pending, by_partition, now=now, node_gpus=float(node))
    return out.sort_values(["scattered_h", "gpus"], ascending=False, ignore_index=True)


def waits_summary(waits: pd.DataFrame) -> dict:
    """Large jobs that waited (``waited``: pending at an hourly instant), those that
    waited while their GPUs were free but scattered, and the hours of each."""
    w = waits[waits["pending_h"] > 0] if len(waits) else waits
    s = w[w["scattered_h"] > 0] if len(w) else w
    return {"waited": int(len(w)), "scattered": int(len(s)),
            "pending_h": float(w["pending_h"].sum()) if len(w) else 0.0,
            "scattered_h": float(w["scattered_h"].sum()) if len(w) else 0.0}

"""Carbon of goodput (issue 21): gCO2e per productive GPU-hour, per job, user and cluster.

    g_per_productive_gpu_h = carbon of all the GPU-hours' energy (gCO2e)
                             / GPU-hours that produced kept work

- the carbon counts every GPU-hour: failed runs, restarts, allocated-but-idle GPUs, and
  for the cluster also GPUs no job held (unallocated idle) and the rest of the nodes;
  it is the Energy page's figure (:func:`warehouse.queries.energy.run_energy` per job
  and user: facility energy x the grid intensity of each hour; :func:`energy_by` with
  ``by="fleet"`` for the cluster). Embodied carbon is left out.
- productive GPU-hours = the GPU-hours allocations held in the window
  (``run_energy``'s ``gpu_hours``) - the GPU-hours lost to failures that ended in the
  window (the one cost model, warehouse/goodput.py, read from the ``failures`` table
  through :func:`warehouse.queries.goodput.lost_by` and ``lost_total``), never below 0.
  A failure is counted in the window where its run ended, as on the Goodput page.
- no productive GPU-hour (every hour lost): the figure is undefined (NaN), shown as
  "no kept work".

Units: kg and g CO2e, GPU-hours; ranges ``[start, end)`` naive UTC. The Energy page and
the weekly report read these functions; nothing else computes the figure.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from warehouse.analytics import Options
from warehouse.queries import energy as qe
from warehouse.queries import goodput as gq

#: What the figure may be grouped by, and the failures table's group of each.
BY = {"job_id": "job_id", "user_name": "user"}
COLUMNS = ["gpu_hours", "gpu_hours_lost", "productive_gpu_hours", "carbon_kg",
           "g_per_productive_gpu_h"]


def per_productive_hour(carbon_kg: float | pd.Series, productive_gpu_hours):
    """gCO2e per productive GPU-hour; NaN where no GPU-hour was productive."""
    if isinstance(productive_gpu_hours, pd.Series):
        return carbon_kg * 1000.0 / productive_gpu_hours.where(productive_gpu_hours > 0)
    return carbon_kg * 1000.0 / productive_gpu_hours if productive_gpu_hours > 0 else float("nan")


def _productive(df: pd.DataFrame) -> pd.DataFrame:
    df["gpu_hours_lost"] = df["gpu_hours_lost"].fillna(0.0)
    df["productive_gpu_hours"] = (df["gpu_hours"] - df["gpu_hours_lost"]).clip(lower=0.0)
    df["g_per_productive_gpu_h"] = per_productive_hour(df["carbon_kg"],
                                                       df["productive_gpu_hours"])
    return df


def carbon_per_productive_gpu_hour(cur, *, start: datetime, end: datetime,
                                   by: str = "job_id", opts: Options | None = None,
                                   sums: pd.DataFrame | None = None) -> pd.DataFrame:
    """The figure per job (``by="job_id"``, with the job's user) or per user
    (``"user_name"``): columns the group, :data:`COLUMNS`, sorted by carbon, largest
    first, ties by the group. ``sums``: :func:`warehouse.queries.energy.sum_runs`'s frame
    of this window and ``by`` where the caller has it (the weekly report, which shows
    its top users too), else the sums per group come from
    :func:`warehouse.queries.energy.job_energy` (the same runs' sums)."""
    if by not in BY:
        raise ValueError(f"by must be one of {sorted(BY)}, not {by!r}")
    keys = ["job_id", "user_name"] if by == "job_id" else [by]
    if sums is None:  # summed per job or user in SQL (issue 17: not every run's row in
        # pandas, 594,000 in a 24,576-GPU week), as the Energy page's table sums them
        df = qe.job_energy(cur, start=start, end=end, by=by, opts=opts)[
            keys + ["gpu_hours", "carbon_kg"]]
    else:
        df = sums[keys + ["gpu_hours", "carbon_kg"]]
    lost = gq.lost_by(cur, start=start, end=end, by=BY[by])[[BY[by], "gpu_hours_lost"]]
    df = df.merge(lost.rename(columns={BY[by]: by}), on=by, how="left")
    df = _productive(df)[keys + COLUMNS]
    return df.sort_values(["carbon_kg", *keys], ascending=[False] + [True] * len(keys),
                          kind="stable", na_position="last").reset_index(drop=True)


def cluster_carbon_per_productive_gpu_hour(cur, *, start: datetime, end: datetime,
                                           opts: Options | None = None,
                                           runs: pd.DataFrame | None = None,
                                           fleet_carbon_kg: float | None = None,
                                           held_gpu_hours: float | None = None) -> dict:
    """The figure of the whole cluster: the carbon of every GPU-hour of the fleet (held
    or not, with the rest of the nodes) over all jobs' productive GPU-hours. Keys:
    gpu_hours (held by jobs), gpu_hours_lost, productive_gpu_hours, carbon_kg,
    g_per_productive_gpu_h. ``runs`` (or only their ``held_gpu_hours``, the sum of their
    ``gpu_hours``), ``fleet_carbon_kg``: where the caller has them."""
    if held_gpu_hours is None:
        if runs is None:
            runs = qe.run_energy(cur, start=start, end=end, opts=opts)
        held_gpu_hours = float(runs["gpu_hours"].sum()) if len(runs) else 0.0
    if fleet_carbon_kg is None:
        fleet = qe.energy_by(cur, start=start, end=end, by="fleet", opts=opts)
        fleet_carbon_kg = float(fleet["carbon_kg"].sum()) if len(fleet) else 0.0
    held = float(held_gpu_hours)
    lost = gq.lost_total(cur, start=start, end=end)["gpu_hours_lost"]
    productive = max(held - lost, 0.0)
    return {"gpu_hours": held, "gpu_hours_lost": lost, "productive_gpu_hours": productive,
            "carbon_kg": float(fleet_carbon_kg),
            "g_per_productive_gpu_h": per_productive_hour(float(fleet_carbon_kg), productive)}

"""Goodput: GPU-hours lost to failures and restarts, ETTR per job, expected ETTR curves.

The cost model is warehouse/goodput.py's (hours, GPU-hours), and GPU-hours lost are
read from one place: the classified ``failures`` table the analytics refresh keeps with
the configured goodput settings. :func:`lost_total` (the Overview card, ``/metrics``)
and :func:`lost_by` (Goodput, the weekly report) both read it; ETTR applies the same
cost model (:func:`warehouse.goodput.ettr`) to the jobs it measures.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from gpulens.settings import default
from warehouse import goodput, reliability
from warehouse.analytics import Options
from warehouse.db import fill

GROUPS = {"week": "date_trunc('week', end_ts)", "user": "user_name", "job_id": "job_id",
          "partition": "partition", "category": "category", "rack": "rack",
          "job_type": "job_type"}

#: The goodput settings' defaults (gpulens/settings/analytics.py): hours, minutes.
INTERVAL_H = default("goodput.checkpoint_interval_h")
WARMUP_MIN = default("goodput.restart_warmup_min")

_TOTAL_SQL = """
SELECT count(*) AS failed_runs, coalesce(sum(gpu_hours_lost), 0) AS gpu_hours_lost,
       count(*) FILTER (WHERE restarted) AS restarts
FROM failures WHERE end_ts >= $start AND end_ts < $end
"""


def lost_total(cur, *, start: datetime, end: datetime) -> dict:
    """GPU-hours lost (``gpu_hours_lost``), ``failed_runs`` and ``restarts`` of the
    classified failed runs that ended in ``[start, end)``."""
    runs, lost, restarts = cur.execute(_TOTAL_SQL, {"start": start, "end": end}).fetchone()
    return {"failed_runs": int(runs), "gpu_hours_lost": float(lost),
            "restarts": int(restarts)}


def lost_by(cur, *, start: datetime, end: datetime, by: str = "week") -> pd.DataFrame:
    """Classified failures' GPU-hours lost grouped by week, user, job_id, partition,
    category, rack or job_type: columns the group, failures, gpu_hours_lost, restarts."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    sql = fill("SELECT {group} AS {by}, count(*) AS failures, "
               "sum(gpu_hours_lost) AS gpu_hours_lost, count(*) FILTER (WHERE restarted) "
               "AS restarts FROM failures WHERE end_ts >= $start AND end_ts < $end "
               "GROUP BY 1 ORDER BY gpu_hours_lost DESC NULLS LAST", group=GROUPS[by], by=by)
    return cur.execute(sql, {"start": start, "end": end}).df()


_PER_DAY_SQL = """
SELECT date_trunc('day', end_ts)::TIMESTAMP AS day, category,
       coalesce(sum(gpu_hours_lost), 0) AS gpu_hours_lost
FROM failures WHERE end_ts >= $start AND end_ts < $end
GROUP BY ALL ORDER BY day, category
"""


def lost_per_day(cur, *, start: datetime, end: datetime) -> pd.DataFrame:
    """GPU-hours lost per UTC day and failure category of the classified failures that
    ended in ``[start, end)``: columns ``day`` (naive UTC midnight), ``category``,
    ``gpu_hours_lost`` (GPU-hours). The Goodput page's chart and the weekly report's
    (issue 17: summed here, not from every failed run's row in pandas: 201,000 runs in
    a 24,576-GPU week)."""
    return cur.execute(_PER_DAY_SQL, {"start": start, "end": end}).df()


def ettr_jobs(cur, *, start: datetime, end: datetime, now: datetime,
              checkpoint_interval_h: float = INTERVAL_H, restart_warmup_min: float = WARMUP_MIN,
              min_gpus: int = 0, job_type: str | None = None) -> pd.DataFrame:
    """ETTR (productive / wall time, 0..1) of each job active in ``[start, end)``."""
    return goodput.ettr(cur, start=start, end=end, now=now, interval_h=checkpoint_interval_h,
                        warmup_h=restart_warmup_min / 60.0, min_gpus=min_gpus,
                        job_type=job_type)


def large_jobs(cur, *, start: datetime, end: datetime, now: datetime,
               opts: Options | None = None,
               min_gpus: int | None = None) -> pd.DataFrame:
    """ETTR of the *large* jobs active in ``[start, end)``: those with at least
    ``min_gpus`` GPUs (None: the setting ``reports.large_job_gpus``, ``opts``), with the
    goodput settings of ``opts`` (warehouse.analytics.Options; None: the defaults). The
    one definition of "large job" for the Goodput page, the weekly report and /metrics."""
    opts = opts or Options()
    return ettr_jobs(cur, start=start, end=end, now=now,
                     checkpoint_interval_h=opts.checkpoint_interval_h,
                     restart_warmup_min=opts.restart_warmup_min,
                     min_gpus=opts.large_job_gpus if min_gpus is None else min_gpus)


def ettr_summary(jobs: pd.DataFrame) -> dict:
    """``jobs`` (of :func:`ettr_jobs`), their GPU-weighted ``ettr`` (sum of GPUs x
    productive hours / sum of GPUs x wall hours, 0..1) and the lowest job's ``ettr_min``;
    None where there is no job."""
    if jobs is None or jobs.empty:
        return {"jobs": 0, "ettr": None, "ettr_min": None}
    g = jobs["gpus"].fillna(0)
    wall = float((g * jobs["wall_h"]).sum())
    return {"jobs": int(len(jobs)),
            "ettr": float((g * jobs["productive_h"]).sum()) / wall if wall > 0 else None,
            "ettr_min": float(jobs["ettr"].min())}


def ettr_curve(*, n_nodes: float, failures_per_1000_node_days: float,
               restart_overhead_h: float, checkpoint_write_h: float = 0.0,
               intervals_h=None) -> pd.DataFrame:
    """Expected ETTR as a function of the checkpoint interval (reliability.expected_ettr),
    with a boolean column ``optimal`` on the row nearest Daly's optimum (hours)."""
    r_f = failures_per_1000_node_days / 1000.0
    if intervals_h is None:
        intervals_h = np.round(np.geomspace(1 / 12, 24, 40), 4)
    rows = [{"checkpoint_interval_h": float(t),
             "expected_ettr": reliability.expected_ettr(n_nodes, r_f, restart_overhead_h,
                                                        float(t), checkpoint_write_h)}
            for t in intervals_h]
    df = pd.DataFrame(rows)
    best = reliability.optimal_checkpoint_interval_h(n_nodes, r_f, checkpoint_write_h)
    df["optimal"] = False
    if np.isfinite(best) and best > 0:
        df.loc[(df["checkpoint_interval_h"] - best).abs().idxmin(), "optimal"] = True
    return df

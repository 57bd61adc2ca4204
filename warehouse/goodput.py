"""GPU-hours lost to failed runs, and the Effective Training Time Ratio (ETTR) of jobs.

The cost model (Kokolis et al. 2024, see warehouse/reliability.py) per failed run:

    gpu_hours_lost = gpus x (since_checkpoint_h + restart_overhead_h)

- ``since_checkpoint_h``: the run's end minus its last recorded checkpoint (table
  ``checkpoints``, matched by job and time within the run); if the job records
  checkpoints but none fell in this run, the whole run; without recorded checkpoints the
  expected loss, half the configured interval (never more than the run itself).
- ``restart_overhead_h``: from the run's end to the start of the job's next run, plus a
  configured warm-up (loading the checkpoint) before the next run is productive.
- A failed run never followed by another run (by ``now``) lost the whole run and has no
  restart overhead.

A run is *failed* when Slurm ended it FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY,
BOOT_FAIL or DEADLINE, or REQUEUED it with a non-zero exit code (a requeue after a
failure; preemptions requeue with exit code 0). Hours as the unit of time throughout.

SQL here is assembled only from constant fragments; every value is a parameter.
"""

from __future__ import annotations

#: Slurm end states that count as a failed run.
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")

FAILED_RUN = (
    "(r.state IN (SELECT unnest($states::VARCHAR[])) "
    "OR (r.state = 'REQUEUED' AND coalesce(r.exit_code, 0) <> 0))"
)

# Which failed runs a query looks at (constant fragments, parameters inside).
BY_END_RANGE = "r.end_ts >= $start AND r.end_ts < $end AND r.end_ts <= $now"
BY_RECHECK = (
    "r.end_ts <= $now AND (r.end_ts >= $recheck_from OR NOT EXISTS ("
    "SELECT 1 FROM failures x WHERE x.job_id = r.job_id AND x.run_index = r.run_index))"
)
BY_JOBS = "r.end_ts <= $now AND r.job_id IN (SELECT job_id FROM _ettr_jobs)"


def _h(a: str, b: str) -> str:
    """Hours from timestamp expression ``a`` to ``b``."""
    return f"((epoch_us({b}) - epoch_us({a})) / 3.6e9)"


def loss_sql(where: str) -> str:
    """SELECT of the failed runs matching ``where`` (one of the constants above) and the
    GPU-hours each lost. Parameters: $now, $states, $interval_h, $warmup_h and those of
    ``where``. Columns: job_id, run_index, start_ts, end_ts, state, exit_code, signal,
    reason, failed_node, gpus, run_h, next_start_ts, restarted, checkpoint_known,
    since_checkpoint_h, restart_overhead_h, gpu_hours_lost."""
    return f"""
WITH failed AS (
    SELECT r.job_id, r.run_index, r.start_ts, r.end_ts, r.state, r.exit_code, r.signal,
           r.reason, r.failed_node,
           coalesce(r.gpus, j.gpus, (SELECT count(*) FROM allocations a
                                     WHERE a.job_id = r.job_id
                                       AND a.run_index = r.run_index), 0) AS gpus,
           greatest(0, {_h('coalesce(r.start_ts, r.end_ts)', 'r.end_ts')}) AS run_h
    FROM job_runs r LEFT JOIN jobs j USING (job_id)
    WHERE r.end_ts IS NOT NULL AND {FAILED_RUN} AND {where}
),
nxt AS (
    SELECT f.job_id, f.run_index, min(n.start_ts) AS next_start_ts
    FROM failed f JOIN job_runs n ON n.job_id = f.job_id AND n.run_index > f.run_index
    WHERE n.start_ts IS NOT NULL AND n.start_ts <= $now
    GROUP BY f.job_id, f.run_index
),
ckpt AS (
    SELECT f.job_id, f.run_index, max(c.ts) AS last_ckpt_ts
    FROM failed f JOIN checkpoints c ON c.job_id = f.job_id
     AND c.ts >= coalesce(f.start_ts, f.end_ts) AND c.ts <= f.end_ts
     AND (c.run_index IS NULL OR c.run_index = f.run_index)
    GROUP BY f.job_id, f.run_index
),
ckpt_jobs AS (
    SELECT DISTINCT job_id FROM checkpoints WHERE job_id IN (SELECT job_id FROM failed)
),
costed AS (
    SELECT f.*, n.next_start_ts, n.next_start_ts IS NOT NULL AS restarted,
           (k.last_ckpt_ts IS NOT NULL OR cj.job_id IS NOT NULL) AS checkpoint_known,
           CASE WHEN n.next_start_ts IS NULL THEN f.run_h
                WHEN k.last_ckpt_ts IS NOT NULL THEN {_h('k.last_ckpt_ts', 'f.end_ts')}
                WHEN cj.job_id IS NOT NULL THEN f.run_h
                ELSE least(f.run_h, $interval_h / 2.0) END AS since_checkpoint_h,
           CASE WHEN n.next_start_ts IS NULL THEN 0.0
                ELSE greatest(0, {_h('f.end_ts', 'n.next_start_ts')}) + $warmup_h
           END AS restart_overhead_h
    FROM failed f
    LEFT JOIN nxt n USING (job_id, run_index)
    LEFT JOIN ckpt k USING (job_id, run_index)
    LEFT JOIN ckpt_jobs cj ON cj.job_id = f.job_id
)
SELECT *, gpus * (since_checkpoint_h + restart_overhead_h) AS gpu_hours_lost FROM costed
"""


def loss_params(*, now, interval_h: float, warmup_h: float, **extra) -> dict:
    """Parameters of :func:`loss_sql` (hours for the interval and the warm-up)."""
    return {"now": now, "states": list(FAILED_STATES), "interval_h": float(interval_h),
            "warmup_h": float(warmup_h), **extra}


# ETTR per job: productive time / wall time from first submission to completion.
# productive = sum of run hours - (work lost since checkpoints) - (warm-up of each
# restarted run); wall = completion (or now, while the job runs) - first submission.
ETTR_SQL = f"""
WITH _ettr_jobs AS (
    SELECT job_id FROM jobs
    WHERE submit_ts IS NOT NULL AND submit_ts < $end AND coalesce(end_ts, $now) >= $start
      AND submit_ts <= $now AND coalesce(gpus, 0) >= $min_gpus
      AND ($job_type IS NULL OR job_type = $job_type)
),
runs AS (
    SELECT r.job_id,
           sum(greatest(0, {_h('r.start_ts', 'coalesce(r.end_ts, $now)')})) AS run_h,
           count(*) AS runs
    FROM job_runs r
    WHERE r.job_id IN (SELECT job_id FROM _ettr_jobs) AND r.start_ts IS NOT NULL
      AND r.start_ts <= $now
    GROUP BY r.job_id
),
lost AS (
    SELECT job_id, count(*) AS failures, sum(since_checkpoint_h) AS lost_work_h,
           sum(CASE WHEN restarted THEN $warmup_h ELSE 0 END) AS warmup_h,
           sum(gpu_hours_lost) AS gpu_hours_lost
    FROM ({loss_sql(BY_JOBS)}) GROUP BY job_id
)
SELECT j.job_id, j.name, j.user_name, j.partition, j.job_type, j.state, j.gpus,
       j.submit_ts, j.end_ts, j.end_ts IS NOT NULL AS finished,
       coalesce(r.runs, 0) AS runs, coalesce(l.failures, 0) AS failures,
       {_h('j.submit_ts', 'coalesce(j.end_ts, $now)')} AS wall_h,
       greatest(0, coalesce(r.run_h, 0) - coalesce(l.lost_work_h, 0)
                   - coalesce(l.warmup_h, 0)) AS productive_h,
       coalesce(l.gpu_hours_lost, 0) AS gpu_hours_lost
FROM jobs j JOIN _ettr_jobs USING (job_id)
LEFT JOIN runs r USING (job_id) LEFT JOIN lost l USING (job_id)
"""

def ettr(cur, *, start, end, now, interval_h: float, warmup_h: float, min_gpus: int = 0,
         job_type: str | None = None):
    """ETTR per job active in ``[start, end)``: a DataFrame with wall_h, productive_h
    (hours), ettr (0..1), gpu_hours_lost (GPU-hours) and the job's identity. Jobs still
    running are measured up to ``now`` (``finished`` false)."""
    params = loss_params(now=now, interval_h=interval_h, warmup_h=warmup_h, start=start,
                         end=end, min_gpus=int(min_gpus), job_type=job_type)
    df = cur.execute(ETTR_SQL, params).df()
    df["ettr"] = (df["productive_h"] / df["wall_h"].where(df["wall_h"] > 0)).clip(0, 1)
    return df

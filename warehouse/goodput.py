"""GPU-hours lost to failed runs, and the Effective Training Time Ratio (ETTR) of jobs.

The one cost model of gpulens (Kokolis et al. 2024, see warehouse/reliability.py). Every
view of GPU-hours lost (the ``failures`` table behind Failures, Goodput, the Overview
card, the weekly report and ``/metrics``) is computed by :func:`loss_sql`. Per failed run:

    gpu_hours_lost = gpus x (lost_work_h + restart_overhead_h)

- ``lost_work_h`` (column ``since_checkpoint_h``): the work the run did since its last
  checkpoint, whether or not the job ran again (a time-limited run with no follow-on
  run loses the same work as one that is requeued). ``loss_basis`` says which rule:

  - ``checkpoint``: the run's end minus its last recorded checkpoint (table
    ``checkpoints``, matched by job and time within the run);
  - ``no checkpoint in run``: the job records checkpoints but none fell in this run
    (it failed before its first one): the whole run;
  - ``never checkpoints``: the warehouse receives checkpoints, none ever for this job:
    the whole run;
  - ``assumed interval``: no checkpoint is recorded at all (the site does not report
    them): the expected loss, half of ``goodput.checkpoint_interval_h``, never more
    than the run itself.

- ``restart_overhead_h``: when the job ran again, the restarted run's start-up before it
  is productive (``goodput.restart_warmup_min``, never more than that run lasted). The
  queue wait between the runs (``queue_wait_h``) is not counted: the GPUs served other
  jobs meanwhile. A run never followed by another has no restart overhead.

A run is *failed* when Slurm ended it FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY,
BOOT_FAIL or DEADLINE, or REQUEUED it with a non-zero exit code (a requeue after a
failure; preemptions requeue with exit code 0), or COMPLETED it with a non-zero code or a
signal (a job whose srun step failed: the collectors keep its DerivedExitCode, see
collector/slurm_exit.py). A run that started before the history
(the first telemetry the warehouse holds, :data:`HISTORY_START_SQL`) was cut at the
start of history: it counts only when it ended after that start, and then only its hours
from it (``run_h``); a run that ended before it is no failure of the observed history.
Hours as the unit of time throughout.

SQL here is assembled only from constant fragments; every value is a parameter.
"""

from __future__ import annotations

from warehouse.db import fill

#: Slurm end states that count as a failed run.
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")

FAILED_RUN = (
    "(r.state IN (SELECT unnest($states::VARCHAR[])) "
    "OR (r.state = 'REQUEUED' AND coalesce(r.exit_code, 0) <> 0) "
    "OR (r.state = 'COMPLETED' AND (coalesce(r.exit_code, 0) <> 0 "
    "OR coalesce(r.signal, 0) <> 0)))"
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
    return fill("((epoch_us({b}) - epoch_us({a})) / 3.6e9)", a=a, b=b)


#: The first telemetry the warehouse holds (the 1-hour tier keeps it longest; else the
#: 1-minute tier's or the raw samples'): the start of the observed history. NULL (no
#: telemetry at all) cuts nothing.
HISTORY_START_SQL = ("SELECT least((SELECT min(ts) FROM gpu_samples_1h), "
                     "(SELECT min(ts) FROM gpu_samples_1m), (SELECT min(ts) FROM gpu_samples))")

#: The cost model as text, for the pages that explain a loss (and docs/analytics.md):
#: the total, then the lost work per ``loss_basis``, then the restart overhead.
LOSS_FORMULAS = {
    "gpu_hours_lost": "GPUs of the run x (lost work + restart overhead), in GPU-hours",
    "checkpoint": "lost work = the run's end - its last recorded checkpoint",
    "no checkpoint in run": "lost work = the whole run (the job checkpoints, but failed "
                            "before its first checkpoint in this run)",
    "never checkpoints": "lost work = the whole run (the job never recorded a checkpoint)",
    "assumed interval": "lost work = half of goodput.checkpoint_interval_h, at most the run "
                        "(no checkpoints are recorded on this cluster)",
    "restart_overhead": "restart overhead = the restarted run's start-up, "
                        "goodput.restart_warmup_min, at most as long as that run; the queue "
                        "wait before it is not counted; 0 without a restart",
}

#: How a run's lost work was decided (column ``loss_basis``), see the module docstring.
LOSS_BASES = ("checkpoint", "no checkpoint in run", "never checkpoints", "assumed interval")


def loss_sql(where: str) -> str:
    """SELECT of the failed runs matching ``where`` (one of the constants above) and the
    GPU-hours each lost. Parameters: $now, $states, $interval_h, $warmup_h and those of
    ``where``. Columns: job_id, run_index, start_ts, end_ts, state, exit_code, signal,
    reason, failed_node, gpus, run_h, next_start_ts, restarted, checkpoint_known,
    loss_basis, queue_wait_h, since_checkpoint_h (the lost work), restart_overhead_h,
    gpu_hours_lost (hours, GPU-hours)."""
    return fill("""
WITH history AS (SELECT ({history_start}) AS start_ts),
failed0 AS (  -- the runs chosen before the join to their jobs (issue 17: DuckDB joined
              -- every run to its job before ETTR's job filter, ~50 ms at 24,576 GPUs)
    SELECT r.job_id, r.run_index, r.start_ts, r.end_ts, r.state, r.exit_code, r.signal,
           r.reason, r.failed_node, coalesce(r.gpus, j.gpus) AS known_gpus,
           greatest(0, {run_h}) AS run_h
    FROM (SELECT * FROM job_runs r
          WHERE r.end_ts IS NOT NULL AND {failed_run} AND {where}) r
    LEFT JOIN jobs j USING (job_id), history h
    WHERE h.start_ts IS NULL OR r.end_ts > h.start_ts
),
counted AS (  -- the allocated GPUs of the runs whose GPUs neither run nor job names
    SELECT a.job_id, a.run_index, count(*) AS n
    FROM allocations a SEMI JOIN (SELECT job_id, run_index FROM failed0
                                  WHERE known_gpus IS NULL) u USING (job_id, run_index)
    GROUP BY ALL
),
failed AS (
    SELECT f.job_id, f.run_index, f.start_ts, f.end_ts, f.state, f.exit_code, f.signal,
           f.reason, f.failed_node, coalesce(f.known_gpus, c.n, 0) AS gpus, f.run_h
    FROM failed0 f LEFT JOIN counted c USING (job_id, run_index)
),
nxt AS (
    SELECT f.job_id, f.run_index, arg_min(n.start_ts, n.run_index) AS next_start_ts,
           arg_min(coalesce(n.end_ts, $now), n.run_index) AS next_end_ts
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
based AS (
    SELECT f.*, n.next_start_ts, n.next_end_ts, k.last_ckpt_ts,
           CASE WHEN k.last_ckpt_ts IS NOT NULL THEN 'checkpoint'
                WHEN cj.job_id IS NOT NULL THEN 'no checkpoint in run'
                WHEN EXISTS (SELECT 1 FROM checkpoints) THEN 'never checkpoints'
                ELSE 'assumed interval' END AS loss_basis
    FROM failed f
    LEFT JOIN nxt n USING (job_id, run_index)
    LEFT JOIN ckpt k USING (job_id, run_index)
    LEFT JOIN ckpt_jobs cj ON cj.job_id = f.job_id
),
costed AS (
    SELECT * EXCLUDE (next_end_ts, last_ckpt_ts),
           next_start_ts IS NOT NULL AS restarted,
           loss_basis IN ('checkpoint', 'no checkpoint in run') AS checkpoint_known,
           CASE WHEN next_start_ts IS NULL THEN NULL
                ELSE greatest(0, {queue_wait_h}) END AS queue_wait_h,
           CASE loss_basis WHEN 'checkpoint' THEN {since_ckpt_h}
                           WHEN 'assumed interval' THEN least(run_h, $interval_h / 2.0)
                           ELSE run_h END AS since_checkpoint_h,
           CASE WHEN next_start_ts IS NULL THEN 0.0
                ELSE least($warmup_h, greatest(0, {next_run_h}))
           END AS restart_overhead_h
    FROM based
)
SELECT *, gpus * (since_checkpoint_h + restart_overhead_h) AS gpu_hours_lost FROM costed
""", history_start=HISTORY_START_SQL, failed_run=FAILED_RUN, where=where,
                run_h=_h("greatest(coalesce(r.start_ts, r.end_ts), h.start_ts)", "r.end_ts"),
                queue_wait_h=_h("end_ts", "next_start_ts"),
                since_ckpt_h=_h("last_ckpt_ts", "end_ts"),
                next_run_h=_h("next_start_ts", "next_end_ts"))


def loss_params(*, now, interval_h: float, warmup_h: float, **extra) -> dict:
    """Parameters of :func:`loss_sql` (hours for the interval and the warm-up)."""
    return {"now": now, "states": list(FAILED_STATES), "interval_h": float(interval_h),
            "warmup_h": float(warmup_h), **extra}


# ETTR per job: productive time / wall time from first submission to completion.
# productive = sum of run hours - (work lost since checkpoints) - (start-up of each
# restarted run); wall = completion (or now, while the job runs) - first submission.
ETTR_SQL = fill("""
WITH _ettr_jobs AS (
    SELECT job_id FROM jobs
    WHERE submit_ts IS NOT NULL AND submit_ts < $end AND coalesce(end_ts, $now) >= $start
      AND submit_ts <= $now AND coalesce(gpus, 0) >= $min_gpus
      AND ($job_type IS NULL OR job_type = $job_type)
),
runs AS (
    SELECT r.job_id,
           sum(greatest(0, {run_h})) AS run_h,
           count(*) AS runs
    FROM job_runs r
    WHERE r.job_id IN (SELECT job_id FROM _ettr_jobs) AND r.start_ts IS NOT NULL
      AND r.start_ts <= $now
    GROUP BY r.job_id
),
lost AS (
    SELECT job_id, count(*) AS failures, sum(since_checkpoint_h) AS lost_work_h,
           sum(restart_overhead_h) AS warmup_h,
           sum(gpu_hours_lost) AS gpu_hours_lost
    FROM ({lost}) GROUP BY job_id
)
SELECT j.job_id, j.name, j.user_name, j.partition, j.job_type, j.state, j.gpus,
       j.submit_ts, j.end_ts, j.end_ts IS NOT NULL AS finished,
       coalesce(r.runs, 0) AS runs, coalesce(l.failures, 0) AS failures,
       {wall_h} AS wall_h,
       greatest(0, coalesce(r.run_h, 0) - coalesce(l.lost_work_h, 0)
                   - coalesce(l.warmup_h, 0)) AS productive_h,
       coalesce(l.gpu_hours_lost, 0) AS gpu_hours_lost
FROM jobs j JOIN _ettr_jobs USING (job_id)
LEFT JOIN runs r USING (job_id) LEFT JOIN lost l USING (job_id)
""", run_h=_h("r.start_ts", "coalesce(r.end_ts, $now)"), lost=loss_sql(BY_JOBS),
    wall_h=_h("j.submit_ts", "coalesce(j.end_ts, $now)"))

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

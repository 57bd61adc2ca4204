"""The figures published about real clusters, measured on a warehouse (issue 16).

``bench/fidelity.py`` compares them with Acme's (NSDI'24) to judge the simulator; they
are plain warehouse queries, so they work on any cluster's warehouse. Every query is
bounded by ``[start, end)`` (naive UTC): samples by their time, jobs by their end.
Shares are fractions (0-1); power in W, temperatures in °C, GPU time in GPU-hours.

Definitions (as in Acme's paper, where it states them):
- power is scaled to a 400 W TDP (an A100's): ``power_w * 400 / tdp_w``;
- a job's outcome is its final state: failed = FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY;
- a job's GPU time is the sum over its runs of GPUs x run time (clipped to the window);
- failures by category count failed runs, and the GPU time of those runs;
- H100 interruption causes (Llama 3 report) are told apart by the first XID of each
  infrastructure failure on an H100 node (``XID_CAUSES``).
"""

from __future__ import annotations

from datetime import datetime

REFERENCE_TDP_W = 400.0  # the A100's TDP, to which Acme's power figures refer

_SAMPLES_SQL = """
SELECT quantile_cont(s.power_w * $tdp / g.tdp_w, 0.5) AS power_p50_w,
       avg(s.power_w * $tdp / g.tdp_w) AS power_mean_w,
       quantile_cont(s.power_w * $tdp / g.tdp_w, 0.99) AS power_p99_w,
       avg(CASE WHEN s.power_w > g.tdp_w THEN 1.0 ELSE 0.0 END) AS above_tdp,
       quantile_cont(s.temp_c, 0.5) AS temp_p50_c,
       quantile_cont(s.temp_c, 0.99) AS temp_p99_c,
       quantile_cont(s.mem_temp_c, 0.5) AS mem_temp_p50_c,
       quantile_cont(s.util_pct, 0.5) AS util_p50_pct,
       avg(CASE WHEN s.util_pct = 0 THEN 1.0 ELSE 0.0 END) AS util_zero
FROM gpu_samples s JOIN gpus g USING (gpu_uuid)
WHERE s.ts >= $start AND s.ts < $end AND g.tdp_w > 0
"""

_JOBS_SQL = """
WITH gpu_time AS (
    SELECT r.job_id,
           sum(coalesce(r.gpus, 0) * greatest(0, epoch_us(least(coalesce(r.end_ts, $end), $end))
               - epoch_us(greatest(r.start_ts, $start))) / 3.6e9) AS gpu_h
    FROM job_runs r
    WHERE r.start_ts < $end AND coalesce(r.end_ts, $end) > $start
    GROUP BY r.job_id
), ended AS (
    SELECT j.job_id, j.job_type, j.state, coalesce(t.gpu_h, 0) AS gpu_h
    FROM jobs j LEFT JOIN gpu_time t USING (job_id)
    WHERE j.end_ts >= $start AND j.end_ts < $end AND coalesce(j.gpus, 0) > 0
      AND j.state NOT IN ('PENDING', 'RUNNING')
)
SELECT count(*) AS ended_jobs,
       avg(CASE WHEN state = 'COMPLETED' THEN 1.0 ELSE 0.0 END) AS completed,
       avg(CASE WHEN state = 'CANCELLED' THEN 1.0 ELSE 0.0 END) AS cancelled,
       avg(CASE WHEN state IN ('FAILED', 'NODE_FAIL', 'TIMEOUT', 'OUT_OF_MEMORY')
                THEN 1.0 ELSE 0.0 END) AS failed,
       sum(gpu_h) FILTER (WHERE state = 'CANCELLED') / nullif(sum(gpu_h), 0)
           AS cancelled_gpu_time,
       (SELECT sum(gpu_h) FILTER (WHERE j.job_type = 'pretrain') / nullif(sum(gpu_h), 0)
        FROM gpu_time t JOIN jobs j USING (job_id)) AS pretrain_gpu_time,
       (SELECT avg(CASE WHEN job_type = 'eval' THEN 1.0 ELSE 0.0 END) FROM jobs
        WHERE submit_ts >= $start AND submit_ts < $end AND coalesce(gpus, 0) > 0)
           AS eval_jobs
FROM ended
"""

_FAILURES_SQL = """
SELECT category, count(*) AS runs,
       sum(coalesce(gpus, 0) * greatest(0, epoch_us(end_ts) - epoch_us(start_ts)) / 3.6e9)
           AS gpu_h
FROM failures
WHERE end_ts >= $start AND end_ts < $end
GROUP BY category
"""

CATEGORIES = ("infrastructure", "framework", "script")


def figures(cur, *, start: datetime, end: datetime) -> dict[str, float | None]:
    """Every figure of the comparison over ``[start, end)``: the samples' power, heat and
    utilisation, the jobs' outcomes and mix, and failures by category (shares of failed
    runs ``fail_jobs_<category>`` and of their GPU time ``fail_time_<category>``).
    A figure without data is None."""
    window = {"start": start, "end": end}
    out: dict[str, float | None] = {}
    for sql, params in ((_SAMPLES_SQL, window | {"tdp": REFERENCE_TDP_W}), (_JOBS_SQL, window)):
        rel = cur.execute(sql, params)
        names = [d[0] for d in rel.description]
        out |= dict(zip(names, rel.fetchone(), strict=True))
    rows = cur.execute(_FAILURES_SQL, window).fetchall()
    runs = sum(r[1] for r in rows)
    hours = sum(r[2] or 0.0 for r in rows)
    by = {r[0]: r for r in rows}
    for cat in CATEGORIES:
        n, h = (by[cat][1], by[cat][2] or 0.0) if cat in by else (0, 0.0)
        out[f"fail_jobs_{cat}"] = n / runs if runs else None
        out[f"fail_time_{cat}"] = h / hours if hours else None
    out["failed_runs"] = runs
    return out


#: Llama 3's GPU-side interruption causes by the XID each leaves first, with the report's
#: counts (Llama Team 2024, Table 5: 419 interruptions of 16,384 H100s over 54 days)
XID_CAUSES = {
    "faulty GPU": ((79, 74, 62), 148),
    "GPU memory (HBM3, SRAM)": ((48, 94, 95), 72 + 19),
    "GPU system processor": ((119, 120), 17),
    "software bug": ((13, 31), 54),
}

_H100_XIDS_SQL = """
SELECT f.xids[1] AS xid, count(*) AS n
FROM failures f
WHERE f.end_ts >= $start AND f.end_ts < $end AND f.category = 'infrastructure'
  AND len(f.xids) > 0
  AND f.node IN (SELECT node FROM gpus WHERE model LIKE '%H100%')
GROUP BY 1
"""


def h100_causes(cur, *, start: datetime, end: datetime) -> dict[str, float | None]:
    """Shares (0-1) of the causes of ``XID_CAUSES`` among the infrastructure failures on
    H100 nodes in ``[start, end)`` whose first XID names one (keys ``h100_<cause>``,
    None without any), and their number ``h100_interruptions``."""
    n_by_xid = dict(cur.execute(_H100_XIDS_SQL, {"start": start, "end": end}).fetchall())
    counts = {cause: sum(n_by_xid.get(x, 0) for x in xids)
              for cause, (xids, _) in XID_CAUSES.items()}
    total = sum(counts.values())
    out: dict[str, float | None] = {f"h100_{c}": (n / total if total else None)
                                    for c, n in counts.items()}
    out["h100_interruptions"] = total
    return out


def published_h100_shares() -> dict[str, float]:
    """The report's shares of the causes of ``XID_CAUSES`` among themselves (0-1)."""
    total = sum(n for _, n in XID_CAUSES.values())
    return {cause: n / total for cause, (_, n) in XID_CAUSES.items()}

"""Tensor-core activity per job and per user: a proxy of model FLOPs utilisation (issue 15).

Acme (NSDI'24) saw GPU_UTIL's median at 97-99 % while SM activity was ~50 % or less:
GPU_UTIL says a kernel ran, not how much of the GPU worked. DCGM's profiling fields say
more: ``DCGM_FI_PROF_SM_ACTIVE`` (cycles with a warp on an SM), ``_PIPE_TENSOR_ACTIVE``
(cycles the tensor pipe issued) and ``_DRAM_ACTIVE`` (cycles the memory interface moved
data), stored x 100. Tensor activity approximates MFU for dense matmul-bound training; it
is no FLOP count (precision, sparsity and the pipe's issue rate are not in it) and is NULL
where the exporter lacks profiling.

From the hour tier: each allocation's GPU-hours within each hour of ``[start, end)`` weight
that GPU's hourly means; a mean skips hours without that field (``tensor_gpu_h`` says
how many GPU-hours had it). Percent, GPU-hours.

Kept per hour and job (issue 17, migration 25): the analytics refresh keeps each whole
hour's sums per job in ``tensor_hours_1h`` with the fleet's hours (warehouse/fleet_hours.py:
:func:`~warehouse.fleet_hours.refresh_fleet_hours` runs :data:`KEEP_SQL`). A query without
a partition or rack filter reads its whole hours from there, up to the newest ones not
kept yet (:func:`kept_span`), where ``fleet_hours_1h``'s read check holds for them (the
hours' samples and allocations as they were), and computes the rest live; otherwise the
whole range live. The kept means are REAL (float32, as the tier's): the answers are the
live ones within ~1e-7 relative.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from warehouse import allocation_hours, fleet_hours
from warehouse.clock import ceil_hour, floor_hour
from warehouse.db import fill

GROUPS = ("job", "user")

_FIELDS = {"util": "util_pct", "sm": "sm_active_pct", "tensor": "tensor_active_pct",
           "dram": "dram_active_pct"}

_SCOPE = """
      AND ($partition::VARCHAR IS NULL AND $rack::VARCHAR IS NULL
           OR node IN (SELECT node FROM nodes
                       WHERE ($partition::VARCHAR IS NULL OR partition = $partition)
                         AND ($rack::VARCHAR IS NULL OR rack = $rack)))"""

#: CTEs ``{name}_cut`` and ``{name}``: the allocations of [{start}, {end}) (parameters)
#: cut into the hours they touch (warehouse/allocation_hours.py) meet the hour rows on
#: (node, GPU, hour) (issue 17: the join of every allocation with every hour row of its
#: GPU took 45 s of CPU over a 24,576-GPU week, this 15 s): per part its hour ``ts``,
#: ``job_id``, GPU-microseconds ``w`` and the GPU-hour's four means (NULL: no field).
_PARTS = """
{name}_cut AS (
{cut}
),
{name} AS (
    SELECT a.ts, a.job_id,
           epoch_us(least(a.ts + INTERVAL 1 HOUR, a.hi)) - epoch_us(greatest(a.ts, a.lo)) AS w,
           h.util_pct_avg AS util, h.sm_active_pct_avg AS sm,
           h.tensor_active_pct_avg AS tensor, h.dram_active_pct_avg AS dram
    FROM {name}_cut a
    JOIN gpu_samples_1h h ON h.node = a.node AND h.gpu_index = a.gpu_index AND h.ts = a.ts
    WHERE h.ts >= date_trunc('hour', {start}::TIMESTAMP) AND h.ts < {end}
)"""


def _parts(name: str, start: str, end: str, where: str = "") -> str:
    return fill(_PARTS, name=name, start=start, end=end,
                cut=allocation_hours.cut("job_id, node, gpu_index", where,
                                         start=start, end=end))


def _each(template: str) -> str:
    """``template`` once per field, ``{f}`` its short name, ``{col}`` its column."""
    return ", ".join(fill(template, **{k: v for k, v in (("f", f), ("col", col))
                                       if "{" + k + "}" in template})
                     for f, col in _FIELDS.items())


#: The refresh's rows of the whole hours of [$start, $end): per hour and job, the
#: GPU-microseconds, those without each field and each field's weighted mean.
KEEP_SQL = fill("""
INSERT INTO tensor_hours_1h (ts, job_id, gpu_us, {gaps}, {means})
WITH {parts}
SELECT ts, job_id, sum(w), {gap_sums}, {mean_sums}
FROM p GROUP BY ts, job_id ORDER BY ts, job_id
""", parts=_parts("p", "$start", "$end"), gaps=_each("{f}_gap_us"), means=_each("{col}"),
    gap_sums=_each("coalesce(sum(w) FILTER (WHERE {f} IS NULL), 0)"),
    mean_sums=_each("sum(w::DOUBLE * {f}) / nullif(sum(w) FILTER (WHERE {f} IS NOT NULL), 0)"))

#: Per job: GPU-microseconds ``w``, those with each field (``{f}_w``) and their products
#: with it (``{f}_x``), summed over its pieces: live over [$start, $lo) and [$hi, $end),
#: and ``{kept}`` (nothing, or :data:`_KEPT_PIECE`, [$lo, $hi) from the table). Then
#: ``{pick}``.
_SQL = fill("""
WITH {head}, {tail},
pieces AS (
    SELECT job_id, w::DOUBLE AS w, {live} FROM head
    UNION ALL
    SELECT job_id, w::DOUBLE, {live} FROM tail{kept}
),
per_job AS (SELECT job_id, sum(w) AS w, {sums} FROM pieces GROUP BY job_id)
{pick}
""", head=_parts("head", "$start", "$lo", _SCOPE), tail=_parts("tail", "$hi", "$end", _SCOPE),
    live=_each("CASE WHEN {f} IS NULL THEN 0.0 ELSE w::DOUBLE END AS {f}_w, "
               "w::DOUBLE * {f} AS {f}_x"),
    sums=_each("sum({f}_w) AS {f}_w, sum({f}_x) AS {f}_x"))

#: The pieces of [$lo, $hi) from the table (the kept means back into products).
_KEPT_PIECE = fill("""
    UNION ALL
    SELECT job_id, gpu_us::DOUBLE, {kept}
    FROM tensor_hours_1h WHERE ts >= $lo AND ts < $hi""",
    kept=_each("(gpu_us - {f}_gap_us)::DOUBLE AS {f}_w, "
               "(gpu_us - {f}_gap_us)::DOUBLE * {col} AS {f}_x"))

#: The rows per grouping: the jobs with the most GPU-hours, named after the cut (issue
#: 17: joining ~590,000 jobs' names for a 24,576-GPU week, to show 100); per user, every
#: job's user first. Ties by id or name.
_PICK = {
    "job": fill("""
SELECT a.job_id, j.name, w / 3.6e9 AS gpu_h, {means}, tensor_w / 3.6e9 AS tensor_gpu_h
FROM (SELECT * FROM per_job ORDER BY w DESC, job_id LIMIT $limit) a
LEFT JOIN jobs j ON j.job_id = a.job_id
ORDER BY gpu_h DESC, a.job_id""", means=_each("{f}_x / nullif({f}_w, 0) AS {col}")),
    "user": fill("""
SELECT coalesce(j.user_name, '(unknown)') AS user_name, any_value(j.name) AS name,
       sum(w) / 3.6e9 AS gpu_h, {means}, sum(tensor_w) / 3.6e9 AS tensor_gpu_h
FROM per_job a LEFT JOIN jobs j ON j.job_id = a.job_id
GROUP BY 1 ORDER BY gpu_h DESC, 1 LIMIT $limit
""", means=_each("sum({f}_x) / nullif(sum({f}_w), 0) AS {col}")),
}


def kept_span(cur, start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The whole hours of ``[start, end)`` to read from ``tensor_hours_1h``: from the
    1-hour tier's first row in them (fleet_hours.held_span) while each is kept with its
    samples as they are now (fleet_hours.fresh_until: the newest hours, not kept yet or
    rolled up since, are left to the live tail), where ``fleet_hours_1h``'s read check
    holds for them; else None."""
    lo, hi = ceil_hour(start), floor_hour(end)
    span = fleet_hours.held_span(cur, lo, hi) if lo < hi else None
    until = fleet_hours.fresh_until(cur, *span) if span else None
    if until is None or not fleet_hours.table_serves(cur, span[0], until):
        return None
    return span[0], until


def tensor_activity(cur, *, start: datetime, end: datetime, by: str = "job",
                    partition: str | None = None, rack: str | None = None,
                    limit: int = 200) -> pd.DataFrame:
    """Per job (``by="job"``: job_id, name) or user (user_name) in ``[start, end)``, on
    the GPUs of ``partition`` and ``rack`` (None: all):
    gpu_h, util_pct, sm_active_pct, tensor_active_pct, dram_active_pct (GPU-hour weighted
    means, percent; NULL without data), tensor_gpu_h; most GPU-hours first (ties by job
    id or user name), at most ``limit`` rows. Without a filter the whole hours the
    refresh keeps are read from ``tensor_hours_1h`` (:func:`kept_span`), the rest
    live."""
    if by not in GROUPS:
        raise ValueError(f"by must be one of {sorted(GROUPS)}, not {by!r}")
    span = kept_span(cur, start, end) if partition is None and rack is None else None
    lo, hi = span if span else (end, end)
    sql = fill(_SQL, pick=_PICK[by], kept=_KEPT_PIECE if span else "")
    return cur.execute(sql, {"start": start, "end": end, "lo": lo, "hi": hi,
                             "partition": partition, "rack": rack,
                             "limit": int(limit)}).df()

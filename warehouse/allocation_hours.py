"""The allocations of a window cut into the hours they touch: the equality join with the
1-hour tier that the fleet's hours (warehouse/fleet_hours.py) and the tensor activity
(warehouse/queries/tensor.py) share.

Joining every allocation of a GPU with every hour row of that GPU and keeping the
overlapping pairs compared ~33,000 pairs a GPU for a 24,576-GPU week (issue 17); one row
per allocation and hour it touches meets the hour rows on (node, GPU, hour).
"""

from __future__ import annotations

from warehouse.db import fill

_CUT = """
    SELECT {columns}, lo, hi, unnest(range(date_trunc('hour', lo), hi, INTERVAL 1 HOUR)) AS ts
    FROM (SELECT *, greatest(start_ts, {start}::TIMESTAMP) AS lo,
                 least(coalesce(end_ts, {end}::TIMESTAMP), {end}::TIMESTAMP) AS hi
          FROM allocations WHERE start_ts < {end} AND coalesce(end_ts, {end}) > {start}{where})
    WHERE hi > lo"""


def cut(columns: str, where: str = "", *, start: str = "$start", end: str = "$end") -> str:
    """A query (to use as a CTE) of the allocations overlapping [``start``, ``end``)
    (parameters, ``$start`` and ``$end`` unless named otherwise), once per hour they
    touch: ``columns`` of the allocation (e.g. ``node, gpu_index``), ``lo`` and ``hi``
    (the allocation clipped to the window; an open one ends at ``end``) and ``ts`` (the
    hour's start). ``where``: nothing, or `` AND`` and a condition on the allocation's
    columns. The GPU-hours of a row in its hour are ``least(hi, ts + 1 h) - greatest(lo,
    ts)``."""
    return fill(_CUT, columns=columns, where=where, start=start, end=end)

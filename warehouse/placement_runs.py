"""The multi-node runs of a window as the Placement page and the weekly report show them
(issue 15, section 3; issue 17): the chart's markers, the worst placed runs of the table,
and the summary of the cards and the report, from one query over
:mod:`warehouse.placement`'s runs and scores that returns a few hundred rows.

Units: GPUs, GPU-hours (GPUs x hours within the window), scores 0..1. SQL here is
constant text; every value is a parameter.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import pandas as pd
import pyarrow.compute as pc

from warehouse import placement
from warehouse.db import fill, own_cursor, transaction

#: The chart's markers and the worst placed misplaced runs, from one reading of the runs
#: (``scored`` is read twice, so kept): a marker is the runs of one size, span and score
#: (:data:`MARKER_KEYS`) with their count, GPU-hours, score x GPU-hours (for the weighted
#: mean) and the job of the run with most GPU-hours (the first job by id among ties);
#: ``worst`` the first ``$rows`` misplaced runs in the order of
#: :func:`warehouse.placement.job_placement`. ``part`` tells them apart.
MARKER_KEYS = ["misplaced", "gpus", "racks", "min_racks", "zones", "min_zones", "score"]
_VIEW = {"materialized": "MATERIALIZED ", "tail": fill("""
SELECT 'worst' AS part, *, row_number() OVER (ORDER BY {order}) AS rank
FROM (SELECT * FROM scored WHERE misplaced ORDER BY {order} LIMIT $rows)
UNION ALL BY NAME
SELECT 'marker' AS part, {keys}, count(*) AS runs, sum(gpu_hours) AS gpu_hours,
       sum(score * gpu_hours) AS score_gpu_hours,
       arg_min(job_id, (-gpu_hours, job_id)) AS job_id
FROM scored GROUP BY ALL
ORDER BY part, rank, {keys}""", keys=", ".join(MARKER_KEYS), order=placement.WORST_FIRST)}
_VIEW_MULTI = fill(placement.RUNS_MULTI, **_VIEW)
_VIEW_KEPT = fill(placement.RUNS_KEPT, **_VIEW)


class PlacedRuns(NamedTuple):
    """The multi-node runs of a window as the Placement page and the weekly report show
    them (:func:`placed_runs`)."""

    #: One row per chart marker: the runs of one size, span and score (:data:`MARKER_KEYS`)
    #: with ``runs``, ``gpu_hours``, ``score_gpu_hours`` (score x GPU-hours) and
    #: ``job_id`` (the job of the run with the most GPU-hours; the first by id among ties).
    markers: pd.DataFrame
    #: The worst placed misplaced runs, worst first, at most the ``rows`` asked for (the
    #: columns and order of :func:`warehouse.placement.job_placement`, ``detail=False``).
    worst: pd.DataFrame
    #: :func:`placement_summary` of the markers.
    summary: dict


def placed_runs(cur, *, start: datetime, end: datetime, now: datetime,
                partition: str | None = None, rows: int = 500) -> PlacedRuns:
    """The multi-node runs active in ``[start, end)``: the chart's markers, the ``rows``
    worst placed misplaced runs and the summary, in one query that returns a few hundred
    rows (issue 17: a 24,576-GPU week's 563,566 runs read into a frame, scored, sorted and
    grouped in pandas took ~0.45 s of the page's ~0.7 s; here ~0.1 s). The same runs,
    scores and order as :func:`warehouse.placement.job_placement` with ``min_nodes=2``
    and ``detail=False``."""
    params = {"start": start, "end": end, "now": now, "partition": partition,
              "min_gpus": 1, "min_nodes": 2, "rows": int(rows)}
    with own_cursor(cur) as own, transaction(own):  # the kept rows of the tree it checked
        sql = _VIEW_KEPT if placement.kept_shapes(own) else _VIEW_MULTI
        got = own.sql(sql, params=params).to_arrow_table()
    marker = pc.equal(got["part"], "marker")
    markers = got.filter(marker).select(
        [*MARKER_KEYS, "runs", "gpu_hours", "score_gpu_hours", "job_id"]).to_pandas()
    worst = got.filter(pc.invert(marker)).drop_columns(  # the runs' columns are first
        ["part", "rank", "runs", "score_gpu_hours"]).to_pandas()
    return PlacedRuns(markers, worst, placement_summary(markers))


def placement_summary(markers: pd.DataFrame) -> dict:
    """Totals over :func:`placed_runs`'s markers (multi-node runs, the ones whose
    placement can be wrong): runs, misplaced runs, GPU-hours, misplaced GPU-hours, and
    the GPU-hour-weighted mean score of the runs with a score (NaN without GPU-hours)."""
    bad = markers[markers["misplaced"]]
    gh = float(markers["gpu_hours"].sum())
    scored = float(markers.loc[markers["score"].notna(), "gpu_hours"].sum())
    mean = float(markers["score_gpu_hours"].sum()) / scored if scored > 0 else float("nan")
    return {"runs": int(markers["runs"].sum()), "misplaced_runs": int(bad["runs"].sum()),
            "gpu_hours": gh, "misplaced_gpu_hours": float(bad["gpu_hours"].sum()),
            "mean_score": mean}

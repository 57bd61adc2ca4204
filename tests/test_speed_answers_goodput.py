"""Issue 17 (speed): the Goodput and Failures pages' faster queries give the answers the
former ones gave.

Each rewrite is checked against the SQL it replaced, kept here as the reference, on the
seeded cluster and on random jobs, runs and allocations.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

T0 = datetime(2026, 11, 9)
H = timedelta(hours=1)

#: warehouse/queries/failures.py's exposure before issue 17's second pass: the runs'
#: allocations probed against the runs in range first, every run joined to its job.
_EXPOSURE_BEFORE = """
WITH r AS (
    SELECT r.job_id, r.run_index,
           greatest(r.start_ts, $start) AS s, least(coalesce(r.end_ts, $end), $end) AS e,
           j.nodes, coalesce(r.gpus, j.gpus, 0) AS gpus
    FROM job_runs r LEFT JOIN jobs j USING (job_id)
    WHERE r.start_ts < $end AND coalesce(r.end_ts, $end) > $start
),
an AS (
    SELECT a.job_id, a.run_index, count(DISTINCT a.node) AS alloc_nodes
    FROM allocations a SEMI JOIN r USING (job_id, run_index)
    GROUP BY ALL
)
SELECT coalesce(sum(greatest(0, epoch_us(e) - epoch_us(s)) / 8.64e10
                    * coalesce(nullif(an.alloc_nodes, 0), r.nodes,
                               ceil(r.gpus / $gpus_per_node))), 0) AS node_days
FROM r LEFT JOIN an USING (job_id, run_index)
"""


def _exposures(cur, start: datetime, end: datetime, gpus_per_node: int) -> tuple[float, float]:
    """(the former exposure, today's), node-days."""
    from warehouse.queries import failures as fq

    p = {"start": start, "end": end, "gpus_per_node": gpus_per_node}
    return (float(cur.execute(_EXPOSURE_BEFORE, p).fetchone()[0]),
            float(cur.execute(fq._EXPOSURE_SQL, p).fetchone()[0]))


@pytest.mark.parametrize("hours", [1, 7.25, 24, 48, 24 * 30])
def test_exposure_on_the_seeded_cluster_as_before(seeded_usage, hours):
    """The seeded cluster's node-days behind r_f, over windows from an hour to the
    30-day rate window: the former query's."""
    from warehouse.queries import fleet

    wh, now = seeded_usage
    cur = wh.reader()
    before, got = _exposures(cur, now - timedelta(hours=hours), now, fleet.gpus_per_node(cur))
    assert before > 0
    assert got == pytest.approx(before, rel=1e-12)


@given(seed=st.integers(min_value=0, max_value=2**32 - 1),
       window=st.tuples(st.integers(min_value=-5, max_value=30),
                        st.integers(min_value=1, max_value=40)),
       gpus_per_node=st.sampled_from([1, 4, 8]))
def test_exposure_on_random_runs_as_before(empty_wh, seed, window, gpus_per_node):
    """Random jobs (node and GPU counts named, zero or missing; some runs' jobs absent),
    runs (open, crossing the window's ends, outside it) and allocations (none, one node,
    several nodes and GPUs, allocations of runs that are not stored): the node-days of
    the former query."""
    rng = np.random.default_rng(seed)
    maybe = [None, None, 0, 1, 2, 8, 12]
    jobs, runs, allocs = [], [], []
    for k in range(int(rng.integers(1, 25))):
        t = T0 + int(rng.integers(-10, 30)) * H + timedelta(minutes=int(rng.integers(0, 60)))
        if rng.random() < 0.9:  # else the job's row is missing
            jobs.append({"job_id": f"j{k}", "submit_ts": t, "gpus": rng.choice(maybe),
                         "nodes": rng.choice(maybe)})
        for r in range(int(rng.integers(1, 4))):
            end = None if rng.random() < 0.15 else t + timedelta(
                minutes=int(rng.integers(0, 600)))
            if rng.random() < 0.9:  # else only its allocations are stored
                runs.append({"job_id": f"j{k}", "run_index": r, "start_ts": t,
                             "end_ts": end, "state": "COMPLETED", "gpus": rng.choice(maybe)})
            for n in rng.choice(4, size=int(rng.integers(0, 4)), replace=False):
                for g in range(int(rng.integers(1, 4))):
                    allocs.append({"job_id": f"j{k}", "run_index": r, "node": f"n{n}",
                                   "gpu_index": g, "start_ts": t, "end_ts": end})
            t = (end or t) + int(rng.integers(0, 3)) * H
    w = empty_wh
    try:
        if jobs:
            w.ingest("jobs", pd.DataFrame(jobs).astype({"gpus": "Int32", "nodes": "Int32"})
                     ).result()
        if runs:
            w.ingest("runs", pd.DataFrame(runs).astype({"gpus": "Int32"})).result()
        if allocs:
            w.ingest("allocations", pd.DataFrame(allocs)).result()
        start = T0 + window[0] * H
        before, got = _exposures(w.reader(), start, start + window[1] * H, gpus_per_node)
        assert got == pytest.approx(before, rel=1e-12, abs=1e-12)
    finally:
        w.write(lambda con: con.execute(
            "DELETE FROM allocations; DELETE FROM job_runs; DELETE FROM jobs")).result()

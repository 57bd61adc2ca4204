"""Allocated and utilised GPU-hours per group and per job (warehouse/queries/utilisation.py)
against pandas over the usage rows, whatever the rows: a node the topology does not know
(left out of every group, as the inner join with ``nodes`` left it), a job ``jobs`` does
not know ('(unknown)'), racks and partitions shared by nodes, several runs and nodes of a
job in an hour, NULL utilised seconds. Issue 17 sums per node (rack, partition) or per
job (user, job type, the job distribution) before joining, no longer per job and node."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.runs import H, T, store_usage
from warehouse.analytics import Options
from warehouse.queries import utilisation as qu

IDLE_PCT = Options().idle_util_pct
NODES = pd.DataFrame({"node": ["n0", "n1", "n2"], "rack": ["r0", "r0", "r1"],
                      "partition": ["p", "q", "p"], "gpus": 8})
JOBS = pd.DataFrame({"job_id": ["a", "b", "c"], "user_name": ["ann", "bob", "ann"],
                     "job_type": ["train", None, "eval"]})

_USAGE = st.lists(st.tuples(
    st.integers(0, 3),                                   # hour
    st.sampled_from(["n0", "n1", "n2", "ghost"]),        # node (ghost: not in nodes)
    st.sampled_from(["a", "b", "c", "d"]),               # job (d: not in jobs)
    st.integers(0, 1),                                   # run
    st.floats(0, 3600),                                  # gpu_s
    st.just(1e5),                                        # energy_j
    st.one_of(st.none(), st.floats(0, 3600))),           # util_s
    min_size=1, max_size=16)


def _expected(usage, key: str) -> pd.DataFrame:
    """pandas: the rows on nodes of the topology, with their node's and job's columns,
    summed per ``key`` (hours)."""
    df = pd.DataFrame(usage, columns=["hour", "node", "job_id", "run", "gpu_s",
                                      "energy_j", "util_s"])
    df = df.merge(NODES, on="node").merge(JOBS, on="job_id", how="left")
    for col in ("user_name", "job_type"):
        df[col] = df[col].fillna("(unknown)")
    col = {"user": "user_name"}.get(key, key)
    out = df.groupby(col).agg(allocated_gpu_h=("gpu_s", "sum"),
                              utilised_gpu_h=("util_s", lambda s: s.sum(min_count=1)))
    return (out / 3600.0).sort_index()


@settings(max_examples=40, deadline=None)
@given(usage=_USAGE)
def test_groups_and_jobs_are_the_usage_rows_summed(empty_wh, usage):
    store_usage(empty_wh, usage, NODES, JOBS, idle_pct=IDLE_PCT)
    cur = empty_wh.reader()
    window = {"start": T, "end": T + 4 * H}
    for key in qu.GROUPS:
        got = qu.utilisation_by(cur, by=key, limit=100, **window).set_index("group")
        want = _expected(usage, key)
        assert sorted(got.index) == list(want.index), key
        got = got.loc[want.index]
        np.testing.assert_allclose(got["allocated_gpu_h"], want["allocated_gpu_h"],
                                   rtol=1e-9, atol=1e-9, err_msg=key)
        np.testing.assert_allclose(got["utilised_gpu_h"].astype(float),
                                   want["utilised_gpu_h"].astype(float), rtol=1e-9,
                                   atol=1e-9, err_msg=key)
    jobs = qu.job_utilisation(cur, limit=100, **window).set_index("job_id")
    want = _expected(usage, "job_id")
    assert sorted(jobs.index) == list(want.index)
    np.testing.assert_allclose(jobs.loc[want.index, "allocated_gpu_h"],
                               want["allocated_gpu_h"], rtol=1e-9, atol=1e-9)

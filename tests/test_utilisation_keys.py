"""Allocated and utilised GPU-hours per group and per job (warehouse/queries/utilisation.py)
against pandas over the usage rows, whatever the rows: a node the topology does not know
(left out of every group, as the inner join with ``nodes`` left it), a job ``jobs`` does
not know ('(unknown)'), unallocated rows (no job), racks and partitions shared by nodes,
several runs and nodes of a job in an hour, NULL utilised seconds; in every scope, and
read from ``gpu_usage_1h`` or from its sums per run (warehouse/run_usage.py). Issue 17
sums per node (rack, partition) or per job (user, job type, the job distribution) before
joining, no longer per job and node, and reads the job keys' whole hours kept per run."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.runs import H, T, store_usage
from warehouse import run_usage
from warehouse.analytics import Options
from warehouse.queries import utilisation as qu

IDLE_PCT = Options().idle_util_pct
NODES = pd.DataFrame({"node": ["n0", "n1", "n2"], "rack": ["r0", "r0", "r1"],
                      "partition": ["p", "q", "p"], "gpus": 8})
JOBS = pd.DataFrame({"job_id": ["a", "b", "c"], "user_name": ["ann", "bob", "ann"],
                     "job_type": ["train", None, "eval"]})
SCOPES = [(None, None), ("p", None), ("q", "r0")]

_USAGE = st.lists(st.tuples(
    st.integers(0, 3),                                   # hour
    st.sampled_from(["n0", "n1", "n2", "ghost"]),        # node (ghost: not in nodes)
    st.sampled_from(["a", "b", "c", "d", None]),         # job (d: not in jobs; None: free)
    st.integers(0, 1),                                   # run
    st.floats(0, 3600),                                  # gpu_s
    st.just(1e5),                                        # energy_j
    st.one_of(st.none(), st.floats(0, 3600))),           # util_s
    min_size=1, max_size=16)


def _expected(usage, key: str, partition, rack) -> pd.DataFrame:
    """pandas: the allocated rows on nodes of the topology (in the scope), with their
    node's and job's columns, summed per ``key`` (hours)."""
    df = pd.DataFrame([(*u[:3], None if u[2] is None else u[3], *u[4:]) for u in usage],
                      columns=["hour", "node", "job_id", "run", "gpu_s", "energy_j",
                               "util_s"])
    df = df[df["job_id"].notna()].merge(NODES, on="node").merge(JOBS, on="job_id",
                                                                  how="left")
    if partition is not None:
        df = df[df["partition"] == partition]
    if rack is not None:
        df = df[df["rack"] == rack]
    for col in ("user_name", "job_type"):
        df[col] = df[col].fillna("(unknown)")
    col = {"user": "user_name"}.get(key, key)
    out = df.groupby(col).agg(allocated_gpu_h=("gpu_s", "sum"),
                              utilised_gpu_h=("util_s", lambda s: s.sum(min_count=1)))
    return (out.astype(float) / 3600.0).sort_index()


def _close(got, want, what) -> None:
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float), rtol=1e-9,
                               atol=1e-9, err_msg=what)


def _check(cur, usage, scopes) -> None:
    window = {"start": T, "end": T + 4 * H}
    for partition, rack in scopes:
        scope = {"partition": partition, "rack": rack, **window}
        for key in qu.GROUPS:
            got = qu.utilisation_by(cur, by=key, limit=100, **scope).set_index("group")
            want = _expected(usage, key, partition, rack)
            assert sorted(got.index) == list(want.index), (key, scope)
            got = got.loc[want.index]
            _close(got["allocated_gpu_h"], want["allocated_gpu_h"], f"{key} {scope}")
            _close(got["utilised_gpu_h"], want["utilised_gpu_h"], f"{key} {scope}")
        jobs = qu.job_utilisation(cur, limit=100, **scope).set_index("job_id")
        want = _expected(usage, "job_id", partition, rack)
        assert sorted(jobs.index) == list(want.index), scope
        _close(jobs.loc[want.index, "allocated_gpu_h"], want["allocated_gpu_h"], scope)
        pct = 100 * want["utilised_gpu_h"] / want["allocated_gpu_h"].where(
            want["allocated_gpu_h"] != 0)
        _close(jobs.loc[want.index, "util_pct"], pct, scope)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(usage=_USAGE)
def test_groups_and_jobs_are_the_usage_rows_summed(empty_wh, monkeypatch, usage):
    store_usage(empty_wh, [(*u[:3], None if u[2] is None else u[3], *u[4:]) for u in usage],
                NODES, JOBS, idle_pct=IDLE_PCT)
    cur = empty_wh.reader()
    assert run_usage.serves(cur)  # the job keys' whole hours from the kept sums
    _check(cur, usage, SCOPES)
    with monkeypatch.context() as m:  # and from gpu_usage_1h (as a scope reads always)
        m.setattr(run_usage, "serves", lambda cur: False)
        _check(cur, usage, SCOPES[:1])

"""Tensor-core activity per job and user (warehouse/queries/tensor.py), from raw samples
rolled up as the service does; numbers worked out by hand."""

import pandas as pd
import pytest

from tests.support.runs import H, M, T, add_job
from warehouse.queries import tensor


def _samples(wh, gpu, minutes, tensor_pct, dram_pct):
    wh.ingest("samples", pd.DataFrame({
        "ts": [T + i * M for i in minutes], "node": "n0", "gpu_index": gpu,
        "interval_s": 60.0, "util_pct": 100.0, "sm_active_pct": 80.0,
        "tensor_active_pct": [tensor_pct(i) for i in minutes],
        "dram_active_pct": dram_pct})).result()


def test_tensor_activity_per_job_and_user(wh):
    # GPU 0: tensor 40 % in the first hour, 60 % in the second, DRAM 30 %
    _samples(wh, 0, range(120), lambda i: 40.0 if i < 60 else 60.0, 30.0)
    # GPU 1: tensor 10 % for the first hour, no DRAM field (NULL)
    _samples(wh, 1, range(60), lambda i: 10.0, None)
    wh.rollup().result()
    add_job(wh, "A", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1, user="ann")
    add_job(wh, "B", [{"start": T + 30 * M, "end": T + H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [1]}], gpus=1, user="bob")
    jobs = tensor.tensor_activity(wh.reader(), start=T, end=T + 2 * H).set_index("job_id")
    # A: one GPU-hour at 40 % and one at 60 %; B: half an hour of GPU 1's first hour
    assert jobs.loc["A", "gpu_h"] == pytest.approx(2.0)
    assert jobs.loc["A", "tensor_active_pct"] == pytest.approx(50.0)
    assert jobs.loc["A", "dram_active_pct"] == pytest.approx(30.0)
    assert jobs.loc["A", "sm_active_pct"] == pytest.approx(80.0)
    assert jobs.loc["B", "gpu_h"] == pytest.approx(0.5)
    assert jobs.loc["B", "tensor_active_pct"] == pytest.approx(10.0)
    assert pd.isna(jobs.loc["B", "dram_active_pct"]) and jobs.loc["B", "tensor_gpu_h"] == 0.5
    users = tensor.tensor_activity(wh.reader(), start=T, end=T + 2 * H, by="user")
    assert users.set_index("user_name")["tensor_active_pct"].to_dict() == pytest.approx(
        {"ann": 50.0, "bob": 10.0})


def test_a_job_without_profiling_fields_has_null_activity(wh):
    wh.ingest("samples", pd.DataFrame({"ts": [T + i * M for i in range(60)], "node": "n0",
                                       "gpu_index": 0, "interval_s": 60.0,
                                       "util_pct": 97.0})).result()
    wh.rollup().result()
    add_job(wh, "C", [{"start": T, "end": T + H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    row = tensor.tensor_activity(wh.reader(), start=T, end=T + H).iloc[0]
    assert row["util_pct"] == pytest.approx(97.0)
    assert pd.isna(row["tensor_active_pct"]) and row["tensor_gpu_h"] == 0.0


def test_unknown_grouping_is_refused(wh):
    with pytest.raises(ValueError, match="by must be one of"):
        tensor.tensor_activity(wh.reader(), start=T, end=T + H, by="rack; DROP TABLE jobs")


def test_the_page_table_follows_the_filters(wh):
    _samples(wh, 0, range(60), lambda i: 40.0, 30.0)
    wh.rollup().result()
    add_job(wh, "A", [{"start": T, "end": T + H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    cur = wh.reader()
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, rack="r0")) == 1  # n0 in r0
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, rack="r1")) == 0
    assert len(tensor.tensor_activity(cur, start=T, end=T + H, partition="eval")) == 0

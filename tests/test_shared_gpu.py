"""Shared GPUs (time-slicing, MPS): a GPU's energy split between the jobs on it.

Several allocations overlapping on one GPU once each took the whole GPU's energy for the
time they overlapped (two jobs on a 400 W GPU for an hour counted 0.8 kWh). Now each gets
the minute's energy x its seconds / max(60 s, the seconds all allocations held the
minute), and what no job was given stays unallocated (warehouse/usage.py, issue 21):
attributed + unattributed == the GPU's energy, on the minute path, the usage table and
the 1-hour tier's approximation.
"""

from datetime import timedelta

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.runs import H, M, T, add_job, ingest, run_refresh, samples, topology
from warehouse import Warehouse
from warehouse.analytics import Options
from warehouse.queries import energy as qe

OPTS = Options(node_overhead_w=0.0, pue=1.0, fallback_g_per_kwh=500.0)
RANGE = {"start": T, "end": T + 2 * H}


def _job(wh, job_id, start, end, gpu=0):
    add_job(wh, job_id, [{"start": start, "end": end, "state": "COMPLETED", "nodes": ["n0"],
                          "gpu_indices": [gpu]}], gpus=1)


def _jobs(wh, res=None):
    df = qe.job_energy(wh.reader(), **RANGE, opts=OPTS, resolution=res)
    return df.set_index("job_id")["gpu_kwh"].to_dict()


def _unallocated(wh, res=None) -> float:
    df = qe.idle_energy(wh.reader(), **RANGE, resolution=res).set_index("state")
    return float(df["gpu_kwh"].get("unallocated", 0.0))


def test_two_time_sliced_jobs_share_the_overlap(wh):
    # one 400 W GPU for 2 h; A holds it 0:00-1:00, B 0:30-1:00 (both time-sliced on it):
    # 0:00-0:30 A alone = 0.2 kWh, 0:30-1:00 half each = 0.1 + 0.1; 1:00-2:00 nobody
    ingest(wh, samples("n0", 0, T, 480, 400))
    _job(wh, "A", T, T + H)
    _job(wh, "B", T + 30 * M, T + H)
    for res in ("minute", None):
        jobs = _jobs(wh, res)
        assert jobs["A"] == pytest.approx(0.3), res
        assert jobs["B"] == pytest.approx(0.1), res
        assert _unallocated(wh, res) == pytest.approx(0.4), res
    run_refresh(wh, now=T + 3 * H)  # the same from the usage table
    assert _jobs(wh) == pytest.approx({"A": 0.3, "B": 0.1})
    # one run asked for alone gets the same share as among all runs
    alone = qe.run_energy(wh.reader(), **RANGE, opts=OPTS, resolution="minute",
                          runs=[("B", 0)])
    assert alone["gpu_kwh"].tolist() == pytest.approx([0.1])



def test_migration_13_recomputes_hours_written_before_the_split(wh):
    # a warehouse whose usage table was computed before the split: A and B each took the
    # whole overlap (A 0.4, B 0.2 kWh); migration 13 empties the ledger, so the next
    # refresh writes the split again
    from warehouse.migrate import available

    ingest(wh, samples("n0", 0, T, 480, 400))
    _job(wh, "A", T, T + H)
    _job(wh, "B", T + 30 * M, T + H)
    run_refresh(wh, now=T + 3 * H)
    wh.write(lambda con: con.execute(
        "UPDATE gpu_usage_1h SET energy_j = energy_j * 2 WHERE job_id = 'B'")).result()
    run_refresh(wh, now=T + 3 * H)
    assert _jobs(wh)["B"] == pytest.approx(0.2)  # the ledger keeps the stale hour
    split = next(m.sql for m in available() if m.version == 13)
    wh.write(lambda con: con.execute(split)).result()
    run_refresh(wh, now=T + 3 * H)
    assert _jobs(wh) == pytest.approx({"A": 0.3, "B": 0.1})

def test_three_mps_clients_for_the_hour_and_a_job_on_a_third_of_another_gpu(wh):
    # GPU 0 (300 W): three MPS clients the whole first hour: 0.1 kWh each, none left over.
    # GPU 1 (600 W): one job for 20 minutes: 0.2 kWh; the other 40 minutes unallocated.
    ingest(wh, samples("n0", 0, T, 240, 300), samples("n0", 1, T, 240, 600))
    for j in ("m1", "m2", "m3"):
        _job(wh, j, T, T + H)
    _job(wh, "solo", T + 10 * M, T + 30 * M, gpu=1)
    for res in ("minute", "hour", None):
        jobs = _jobs(wh, res)
        assert [jobs[j] for j in ("m1", "m2", "m3")] == pytest.approx([0.1] * 3), res
        assert jobs["solo"] == pytest.approx(0.2), res
        assert _unallocated(wh, res) == pytest.approx(0.4), res


# ----------------------------------------------------- conservation, a property test

@pytest.fixture(scope="module")
def gpu_wh():
    """One GPU whose power changes every minute over 2 h (the counter follows it)."""
    wh = Warehouse(":memory:")
    topology(wh)
    frames = [samples("n0", 0, T + k * M, 4, 100 + (37 * k) % 500) for k in range(120)]
    energy = pd.concat(frames, ignore_index=True)
    energy["energy_j"] = (energy["power_w"] * 15.0).cumsum()
    ingest(wh, energy)
    yield wh
    wh.close()


_SECONDS = st.integers(min_value=0, max_value=2 * 3600)
_ALLOCS = st.lists(st.tuples(_SECONDS, _SECONDS), min_size=0, max_size=5)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=_ALLOCS)
def test_attributed_plus_unattributed_is_the_gpus_energy(gpu_wh, spans):
    """Any allocations on the GPU (overlapping, inside minutes, empty): the jobs' energy
    plus the unallocated energy equals the GPU's energy, on every path."""
    def reset(con):
        con.execute("DELETE FROM allocations")
        con.execute("DELETE FROM job_runs")
        con.execute("DELETE FROM jobs")
    gpu_wh.write(reset).result()
    runs = pd.DataFrame([(f"j{i}", 0, T + timedelta(seconds=min(a, b)),
                          T + timedelta(seconds=max(a, b) + 1)) for i, (a, b) in enumerate(spans)],
                        columns=["job_id", "run_index", "start_ts", "end_ts"])
    if len(runs):  # one ingest per table (a job per span, holding GPU n0/0)
        gpu_wh.ingest("jobs", runs[["job_id"]].assign(user_name="ann", gpus=1)).result()
        gpu_wh.ingest("runs", runs.assign(state="COMPLETED", gpus=1)).result()
        gpu_wh.ingest("allocations", runs.assign(node="n0", gpu_index=0)).result()
    total = gpu_wh.reader().execute(
        "SELECT sum(energy_j) / 3.6e6 FROM gpu_samples_1m").fetchone()[0]
    for res in ("minute", "hour"):
        jobs = qe.job_energy(gpu_wh.reader(), **RANGE, opts=OPTS, resolution=res)
        attributed = float(jobs["gpu_kwh"].sum()) if len(jobs) else 0.0
        assert attributed + _unallocated(gpu_wh, res) == pytest.approx(total, rel=1e-9), res
        assert attributed <= total * (1 + 1e-9), res

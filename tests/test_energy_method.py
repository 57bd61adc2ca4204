"""The method behind each job energy figure (issue 21): energy counter, counter
hourly-scaled, power integral (warehouse/queries/energy_method.py)."""

import pandas as pd
import pytest

from tests.support.allocations import edit_allocations
from tests.support.runs import H, T, add_job, ingest, run_refresh, samples
from warehouse.queries import energy_method as em
from warehouse.queries import jobs as qj


def test_label_names_one_method_or_the_shares():
    assert em.label(3600, 0, 0) == "energy counter"
    assert em.label(0, 7200, 10) == "counter, hourly-scaled"  # 99.9 %
    assert em.label(0, 0, 60) == "power integral"
    assert em.label(2700, 0, 900) == "energy counter 75 %, power integral 25 %"
    assert em.label(0, 0, 0) == "no telemetry"


def test_each_run_says_how_its_energy_was_measured(wh):
    # GPU 0 keeps an energy counter (its first sample has no predecessor: 1 of 480 steps
    # is power x interval); GPU 1 reports no counter. X holds GPU 0, Y both, Z GPU 1 for
    # the first hour and GPU 0 for the second.
    ingest(wh, samples("n0", 0, T, 480, 400), samples("n0", 1, T, 480, 300, counter=False))
    add_job(wh, "X", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    add_job(wh, "Y", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0, 1]}], gpus=2)
    add_job(wh, "Z", [{"start": T, "end": T + H, "state": "FAILED", "nodes": ["n0"],
                       "gpu_indices": [1]},
                      {"start": T + H, "end": T + 2 * H, "state": "COMPLETED",
                       "nodes": ["n0"], "gpu_indices": [0]}], gpus=1)
    run_refresh(wh, now=T + 3 * H)
    rng = {"start": T, "end": T + 2 * H}
    df = em.run_methods(wh.reader(), **rng).set_index(["job_id", "run_index"])
    assert df.loc[("X", 0), "method"] == "energy counter"
    assert df.loc[("X", 0), "power integral"] == pytest.approx(3600 / 240)  # the first step
    assert df.loc[("Y", 0), "method"] == "energy counter 50 %, power integral 50 %"
    assert df.loc[("Z", 0), "method"] == "power integral"
    assert df.loc[("Z", 1), "method"] == "energy counter"
    hourly = em.run_methods(wh.reader(), **rng, resolution="hour").set_index("job_id")
    assert hourly.loc["X", "method"] == "counter, hourly-scaled"
    assert hourly.loc["X", "counter, hourly-scaled"] == pytest.approx(7200 - 15)
    only = em.run_methods(wh.reader(), **rng, runs=[("Z", 1)])
    assert only[["job_id", "run_index", "method"]].values.tolist() == [
        ["Z", 1, "energy counter"]]
    # the whole window: 5 GPU-hours of GPU 0 (X 2, Y 2, Z 1; less X's and Y's first
    # 15 s step) against 3 of GPU 1 (Y 2, Z 1): 17,970 s to 10,830 s
    assert em.window_method(wh.reader(), **rng) == "energy counter 62 %, power integral 38 %"
    assert em.window_method(wh.reader(), start=T + H, end=T + 2 * H) == (
        "energy counter 75 %, power integral 25 %")
    # the job page's energy table says it per run
    e = qj.energy(wh.reader(), job_id="Z", now=T + 3 * H)
    assert e["method"].tolist() == ["power integral", "energy counter"]
    assert (e["gpu_kwh"] > 0).all()


def test_the_method_reads_the_energy_queries_allocation_hours_and_runs_filter():
    """One text for the allocations' seconds per GPU-hour (energy.ALLOC_HOUR_CTES) and
    the runs filter that keeps the given jobs' rows by job id first (usage.RUNS, issue
    17), not a copy of either; from the table or a job's rows."""
    from warehouse import usage
    from warehouse.db import fill
    from warehouse.queries import energy as qe

    head, _, tail = qe.ALLOC_HOUR_CTES.partition("{runs}")
    head = head.partition("{allocations}")[2]
    assert set(em._SQL) == {"allocations", "job_allocations"}
    for source, sql in em._SQL.items():
        assert tail and head in sql and tail in sql and f"FROM {source} WHERE" in sql
        assert fill(usage.RUNS, alias="") in sql
        assert "job_id || ':' || run_index IN" not in sql.replace(
            fill(usage.RUNS, alias=""), "")
    assert head in qe._HOUR_CTES


def test_a_jobs_page_reads_its_own_rows_as_the_table_gives_them(wh):
    """The job page's methods come from the job's allocation rows (job_minutes'
    view: issue 17), with their shares of the GPU, open ends and several runs: the
    seconds per method are those read from the table for the job's runs."""
    from warehouse.queries.job_minutes import job_allocations

    ingest(wh, samples("n0", 0, T, 480, 400), samples("n0", 1, T, 480, 300, counter=False))
    add_job(wh, "S", [{"start": T + 0.25 * H, "end": T + H, "state": "FAILED",
                       "nodes": ["n0"], "gpu_indices": [0, 1]},
                      {"start": T + H, "end": None, "state": "RUNNING", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=2)
    add_job(wh, "O", [{"start": T, "end": T + 2 * H, "state": "COMPLETED", "nodes": ["n0"],
                       "gpu_indices": [0]}], gpus=1)
    edit_allocations(wh, "UPDATE allocations SET share = 0.25 "
                         "WHERE job_id = 'S' AND gpu_index = 0")
    run_refresh(wh, now=T + 3 * H)
    rng = {"start": T, "end": T + 2 * H, "runs": [("S", 0), ("S", 1)]}
    table = em.run_methods(wh.reader(), **rng)
    with job_allocations(wh.reader(), "S") as own:
        mine = em.run_methods(own, **rng, job_rows=True)
    assert len(table) == 2
    pd.testing.assert_frame_equal(mine, table)
    # the share counts: GPU 0's 0.75 h of run 0 at a quarter, GPU 1's whole
    held = mine.set_index("run_index")[list(em.METHODS)].sum(axis=1)
    assert held[0] == pytest.approx(0.75 * 3600 * 0.25 + 0.75 * 3600, rel=1e-6)

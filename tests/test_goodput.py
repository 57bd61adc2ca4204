"""GPU-hours lost to failures and restarts, and ETTR, on hand-built job histories."""

import pandas as pd
import pytest

from tests.test_failures import H, M, T, add_job, run_refresh, wh  # noqa: F401 (fixture)
from warehouse.analytics import Options
from warehouse.queries import goodput as qg


def checkpoint(wh, job_id, ts):  # noqa: F811
    wh.ingest("checkpoints", pd.DataFrame([{"ts": ts, "job_id": job_id}])).result()


def test_lost_gpu_hours_per_failed_run(wh):  # noqa: F811
    # A: 16 GPUs, fails at 5 h, last checkpoint at 4.5 h, restarted 15 min later
    add_job(wh, "A", [{"start": T, "end": T + 5 * H, "state": "REQUEUED"},
                      {"start": T + 5.25 * H, "end": T + 9 * H, "state": "COMPLETED"}], gpus=16)
    checkpoint(wh, "A", T + 4 * H)
    checkpoint(wh, "A", T + 4.5 * H)
    # B: 8 GPUs, no checkpoints recorded, fails at 3 h, restarted at 3.5 h
    add_job(wh, "B", [{"start": T, "end": T + 3 * H, "state": "FAILED"},
                      {"start": T + 3.5 * H, "end": T + 6 * H, "state": "COMPLETED"}])
    # C: 4 GPUs, fails after 40 min, never restarted: the whole run is lost
    add_job(wh, "C", [{"start": T, "end": T + 40 * M, "state": "FAILED"}], gpus=4)
    # D: checkpoints known for the job, none inside the failed second run
    add_job(wh, "D", [{"start": T, "end": T + 2 * H, "state": "REQUEUED"},
                      {"start": T + 2 * H, "end": T + 3 * H, "state": "REQUEUED"},
                      {"start": T + 3 * H, "end": T + 4 * H, "state": "COMPLETED"}], gpus=8)
    checkpoint(wh, "D", T + 1.5 * H)
    # E: a preemption requeue (exit code 0) is no failure
    add_job(wh, "E", [{"start": T, "end": T + H, "state": "REQUEUED", "exit_code": 0},
                      {"start": T + H, "end": T + 2 * H, "state": "COMPLETED"}])
    cur = wh.reader()
    lost = qg.lost_runs(cur, start=T, end=T + 24 * H, checkpoint_interval_h=2.0,
                        restart_warmup_min=6)
    got = lost.set_index(["job_id", "run_index"])["gpu_hours_lost"]
    warm = 0.1
    expected = {("A", 0): 16 * (0.5 + 0.25 + warm), ("B", 0): 8 * (1.0 + 0.5 + warm),
                ("C", 0): 4 * (40 / 60), ("D", 0): 8 * (0.5 + 0 + warm),
                ("D", 1): 8 * (1.0 + 0 + warm)}
    assert got.to_dict() == pytest.approx(expected)
    assert lost.set_index(["job_id", "run_index"]).loc[("A", 0), "checkpoint_known"]
    total = qg.lost_gpu_hours_total(cur, start=T, end=T + 24 * H, checkpoint_interval_h=2.0,
                                    restart_warmup_min=6)
    assert total == pytest.approx(sum(expected.values()))
    # the range bounds the run's end; a window ending before C's end excludes it
    assert qg.lost_gpu_hours_total(cur, start=T, end=T + 30 * M) == 0.0
    # the refreshed failures table costs runs the same way
    run_refresh(wh, settings=Options(restart_warmup_min=6))
    by_week = qg.lost_by(cur, start=T, end=T + 24 * H, by="week")
    assert by_week["gpu_hours_lost"].sum() == pytest.approx(total)
    assert by_week["restarts"].sum() == 4


def test_ettr_per_job_and_grouped(wh):  # noqa: F811
    # submitted at 0, queued 1 h, run 1: 1-5 h fails (ckpt at 4 h), run 2: 5.5-9 h.
    submit = T - H
    add_job(wh, "A", [{"start": T, "end": T + 4 * H, "state": "FAILED"},
                      {"start": T + 4.5 * H, "end": T + 8 * H, "state": "COMPLETED"}],
            gpus=16, submit=submit, user="ann")
    checkpoint(wh, "A", T + 3 * H)
    add_job(wh, "B", [{"start": T, "end": T + 2 * H, "state": "COMPLETED"}], gpus=8,
            submit=T, user="bob")
    jobs = qg.ettr_jobs(wh.reader(), start=T, end=T + 24 * H, now=T + 24 * H)
    a = jobs.set_index("job_id").loc["A"]
    wall, productive = 9.0, (4 + 3.5) - 1.0  # run hours minus work since checkpoint
    assert a["wall_h"] == pytest.approx(wall)
    assert a["productive_h"] == pytest.approx(productive)
    assert a["ettr"] == pytest.approx(productive / wall)
    assert jobs.set_index("job_id").loc["B", "ettr"] == pytest.approx(1.0)
    by_user = qg.ettr_by(jobs, "user_name").set_index("user_name")
    assert by_user.loc["ann", "ettr"] == pytest.approx(productive / wall)
    weighted = (16 * productive + 8 * 2) / (16 * wall + 8 * 2)
    assert qg.ettr_by(jobs.assign(all="x"), "all")["ettr"].iloc[0] == pytest.approx(weighted)
    # a job still running is measured to now
    add_job(wh, "C", [{"start": T, "end": None, "state": "RUNNING"}], submit=T, end=None)
    c = qg.ettr_jobs(wh.reader(), start=T, end=T + 24 * H, now=T + 2 * H).set_index("job_id")
    assert not c.loc["C", "finished"] and c.loc["C", "ettr"] == pytest.approx(1.0)


def test_ettr_curve_marks_the_optimum():
    curve = qg.ettr_curve(n_nodes=512, failures_per_1000_node_days=6.5,
                          restart_overhead_h=0.25, checkpoint_write_h=0.05)
    best = curve.loc[curve["optimal"]].iloc[0]
    # the marked row is (one of) the grid's best expected ETTR
    assert best["expected_ettr"] >= curve["expected_ettr"].max() - 0.005
    assert curve["optimal"].sum() == 1


def test_range_arguments_are_parameters_not_text(wh):  # noqa: F811
    with pytest.raises(ValueError):
        qg.lost_by(wh.reader(), start=T, end=T + H, by="user; DROP TABLE jobs")

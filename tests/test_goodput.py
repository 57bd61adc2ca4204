"""GPU-hours lost to failures and restarts, and ETTR, on hand-built job histories."""

import json

import pytest

from tests.support.runs import H, M, T, add_job, checkpoint, rows, run_refresh, sample
from warehouse.analytics import Options
from warehouse.queries import goodput as qg


def test_lost_gpu_hours_per_failed_run(wh):
    # A: 16 GPUs, fails at 5 h, last checkpoint at 4.5 h, restarted 15 min later
    add_job(wh, "A", [{"start": T, "end": T + 5 * H, "state": "REQUEUED"},
                      {"start": T + 5.25 * H, "end": T + 9 * H, "state": "COMPLETED"}], gpus=16)
    checkpoint(wh, "A", T + 4 * H)
    checkpoint(wh, "A", T + 4.5 * H)
    # B: 8 GPUs, never checkpoints (others do), fails at 3 h, restarted at 3.5 h
    add_job(wh, "B", [{"start": T, "end": T + 3 * H, "state": "FAILED"},
                      {"start": T + 3.5 * H, "end": T + 6 * H, "state": "COMPLETED"}])
    # C: 4 GPUs, fails after 40 min, never restarted, never checkpoints: the whole run
    add_job(wh, "C", [{"start": T, "end": T + 40 * M, "state": "FAILED"}], gpus=4)
    # D: checkpoints known for the job, none inside the failed second run
    add_job(wh, "D", [{"start": T, "end": T + 2 * H, "state": "REQUEUED"},
                      {"start": T + 2 * H, "end": T + 3 * H, "state": "REQUEUED"},
                      {"start": T + 3 * H, "end": T + 4 * H, "state": "COMPLETED"}], gpus=8)
    checkpoint(wh, "D", T + 1.5 * H)
    # E: a preemption requeue (exit code 0) is no failure
    add_job(wh, "E", [{"start": T, "end": T + H, "state": "REQUEUED", "exit_code": 0},
                      {"start": T + H, "end": T + 2 * H, "state": "COMPLETED"}])
    # F: time limit after 4 h, no follow-on run: loses the work since its checkpoint at
    # 3 h, not the allocation
    add_job(wh, "F", [{"start": T, "end": T + 4 * H, "state": "TIMEOUT"}])
    checkpoint(wh, "F", T + 3 * H)
    # G: restarted 10 h later, but its next run lasts 3 min: the start-up is capped there
    add_job(wh, "G", [{"start": T, "end": T + H, "state": "FAILED"},
                      {"start": T + 11 * H, "end": T + 11 * H + 3 * M, "state": "FAILED"}])
    checkpoint(wh, "G", T + 0.75 * H)
    run_refresh(wh, settings=Options(restart_warmup_min=6))
    got = {k: r.gpu_hours_lost for k, r in rows(wh).items()}
    warm = 0.1  # 6 minutes of start-up per restarted run; queue waits are not counted
    expected = {("A", 0): 16 * (0.5 + warm), ("B", 0): 8 * (3.0 + warm),
                ("C", 0): 4 * (40 / 60), ("D", 0): 8 * (0.5 + warm),
                ("D", 1): 8 * (1.0 + warm), ("F", 0): 8 * 1.0,
                ("G", 0): 8 * (0.25 + 0.05), ("G", 1): 8 * 0.05}
    assert got == pytest.approx(expected)
    basis = {k: json.loads(r.evidence)["loss_basis"] for k, r in rows(wh).items()}
    assert basis == {("A", 0): "checkpoint", ("B", 0): "never checkpoints",
                     ("C", 0): "never checkpoints", ("D", 0): "checkpoint",
                     ("D", 1): "no checkpoint in run", ("F", 0): "checkpoint",
                     ("G", 0): "checkpoint", ("G", 1): "no checkpoint in run"}
    assert json.loads(rows(wh)[("A", 0)].evidence)["queue_wait_h"] == pytest.approx(0.25)
    total = qg.lost_total(wh.reader(), start=T, end=T + 24 * H)
    assert total["gpu_hours_lost"] == pytest.approx(sum(expected.values()))
    assert total["failed_runs"] == len(expected) and total["restarts"] == 5
    # the range bounds the run's end; a window ending before C's end excludes it
    assert qg.lost_total(wh.reader(), start=T, end=T + 30 * M)["gpu_hours_lost"] == 0.0
    by_week = qg.lost_by(wh.reader(), start=T, end=T + 24 * H, by="week")
    assert by_week["gpu_hours_lost"].sum() == pytest.approx(total["gpu_hours_lost"])
    assert by_week["restarts"].sum() == 5


def test_without_recorded_checkpoints_half_the_interval_is_assumed(wh):
    add_job(wh, "B", [{"start": T, "end": T + 3 * H, "state": "FAILED"},
                      {"start": T + 3.5 * H, "end": T + 6 * H, "state": "COMPLETED"}])
    add_job(wh, "C", [{"start": T, "end": T + 40 * M, "state": "FAILED"}], gpus=4)
    run_refresh(wh, settings=Options(checkpoint_interval_h=3.0))
    got = {k: r.gpu_hours_lost for k, r in rows(wh).items()}
    assert got == pytest.approx({("B", 0): 8 * 1.5, ("C", 0): 4 * (40 / 60)})
    assert {json.loads(r.evidence)["loss_basis"] for r in rows(wh).values()} == {
        "assumed interval"}


def test_runs_cut_at_the_start_of_history(wh):
    """Telemetry starts at 6 h: a run that failed before is no failure of the observed
    history; one that started before and failed after counts its hours from 6 h."""
    add_job(wh, "old", [{"start": T, "end": T + 2 * H, "state": "NODE_FAIL"}])
    add_job(wh, "cut", [{"start": T + 4 * H, "end": T + 9 * H, "state": "NODE_FAIL"}])
    add_job(wh, "new", [{"start": T + 7 * H, "end": T + 8 * H, "state": "NODE_FAIL"}])
    opts = Options(checkpoint_interval_h=10.0)  # no checkpoints: up to 5 h of a run lost
    run_refresh(wh, settings=opts)  # before any telemetry every failed run counts
    assert set(rows(wh)) == {("old", 0), ("cut", 0), ("new", 0)}
    sample(wh, T + 6 * H)
    run_refresh(wh, settings=opts)
    got = {k: r.gpu_hours_lost for k, r in rows(wh).items()}
    assert got == pytest.approx({("cut", 0): 8 * 3.0, ("new", 0): 8 * 1.0})


def test_ettr_per_job_and_grouped(wh):
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
    ann = qg.ettr_summary(jobs[jobs["user_name"] == "ann"])
    assert ann["ettr"] == pytest.approx(productive / wall)
    weighted = (16 * productive + 8 * 2) / (16 * wall + 8 * 2)
    assert qg.ettr_summary(jobs) == pytest.approx(
        {"jobs": 2, "ettr": weighted, "ettr_min": productive / wall})
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


def test_range_arguments_are_parameters_not_text(wh):
    with pytest.raises(ValueError):
        qg.lost_by(wh.reader(), start=T, end=T + H, by="user; DROP TABLE jobs")


def test_every_loss_basis_has_its_formula():
    from warehouse import goodput

    assert set(goodput.LOSS_BASES) | {"gpu_hours_lost", "restart_overhead"} == set(
        goodput.LOSS_FORMULAS)


def test_an_upgraded_warehouse_costs_its_failures_again(tmp_path):
    """Migration 7 empties the failures costed by the old model; the refresh recosts."""
    from tests.support.runs import topology
    from warehouse import Warehouse
    from warehouse.migrate import available

    path = tmp_path / "w.duckdb"
    with Warehouse(path) as w:
        topology(w)
        add_job(w, "C", [{"start": T, "end": T + 40 * M, "state": "FAILED"}], gpus=4)
        run_refresh(w)
        w.write(lambda con: con.execute("UPDATE failures SET gpu_hours_lost = 999")).result()
        # the upgrade runs migration 7 on such a file (later migrations create other tables
        # and cannot run twice, so it is applied alone here)
        recost = next(m.sql for m in available() if m.version == 7)
        w.write(lambda con: con.execute(recost)).result()
    with Warehouse(path) as w:
        assert w.reader().execute("SELECT count(*) FROM failures").fetchall() == [(0,)]
        run_refresh(w)
        assert rows(w)[("C", 0)].gpu_hours_lost == pytest.approx(4 * 40 / 60)

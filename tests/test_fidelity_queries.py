"""warehouse/queries/fidelity.py (issue 16): the published figures measured on a
warehouse built by hand, with every number worked out below."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from warehouse import Warehouse
from warehouse.queries.fidelity import figures

T0 = datetime(2026, 11, 2)
T1 = datetime(2026, 11, 3)


@pytest.fixture()
def cur(tmp_path):
    db = str(tmp_path / "f.duckdb")
    Warehouse(db).close()
    con = duckdb.connect(db)
    # one A100 (400 W) and one H100 (700 W): H100 watts count x 400/700
    con.execute("INSERT INTO gpus (gpu_uuid, node, gpu_index, model, tdp_w) VALUES "
                "('a', 'n1', 0, 'A100', 400), ('h', 'n2', 0, 'H100', 700)")
    con.execute("""INSERT INTO gpu_samples (ts, node, gpu_index, gpu_uuid, util_pct, power_w,
                   temp_c, mem_temp_c) VALUES
        ('2026-11-02 01:00', 'n1', 0, 'a', 0, 100, 30, 40),
        ('2026-11-02 01:00', 'n2', 0, 'h', 100, 700, 50, 60),
        ('2026-11-02 02:00', 'n1', 0, 'a', 100, 440, 40, 50),
        ('2026-11-02 02:00', 'n2', 0, 'h', 100, 350, 60, 70),
        ('2026-11-03 02:00', 'n1', 0, 'a', 0, 999, 99, 99)""")  # outside the window
    # jobs ended in the window: a 4-GPU pretrain run of 2 h completed, a 1-GPU eval run
    # of 1 h cancelled, a 2-GPU eval job failed twice (1 h each); one job still running
    con.execute("""INSERT INTO jobs (job_id, job_type, state, submit_ts, start_ts, end_ts, gpus)
        VALUES ('1', 'pretrain', 'COMPLETED', '2026-11-02 00:00', '2026-11-02 00:00',
                '2026-11-02 02:00', 4),
               ('2', 'eval', 'CANCELLED', '2026-11-02 00:00', '2026-11-02 03:00',
                '2026-11-02 04:00', 1),
               ('3', 'eval', 'FAILED', '2026-11-02 00:00', '2026-11-02 05:00',
                '2026-11-02 07:00', 2),
               ('4', 'eval', 'RUNNING', '2026-11-02 00:00', '2026-11-02 23:00', NULL, 1)""")
    con.execute("""INSERT INTO job_runs (job_id, run_index, start_ts, end_ts, state, gpus)
        VALUES ('1', 0, '2026-11-02 00:00', '2026-11-02 02:00', 'COMPLETED', 4),
               ('2', 0, '2026-11-02 03:00', '2026-11-02 04:00', 'CANCELLED', 1),
               ('3', 0, '2026-11-02 05:00', '2026-11-02 06:00', 'FAILED', 2),
               ('3', 1, '2026-11-02 06:00', '2026-11-02 07:00', 'FAILED', 2),
               ('4', 0, '2026-11-02 23:00', NULL, 'RUNNING', 1)""")
    con.execute("""INSERT INTO failures (job_id, run_index, start_ts, end_ts, gpus, category,
                   reason, source) VALUES
        ('3', 0, '2026-11-02 05:00', '2026-11-02 06:00', 2, 'infrastructure', 'xid', 'xid'),
        ('3', 1, '2026-11-02 06:00', '2026-11-02 06:30', 2, 'script', 'exit', 'exit')""")
    yield con
    con.close()


def test_figures_worked_by_hand(cur):
    f = figures(cur, start=T0, end=T1)
    # scaled powers: 100, 400, 440, 200 -> p50 (200+400)/2, mean 285, one sample > TDP
    assert f["power_p50_w"] == pytest.approx(300)
    assert f["power_mean_w"] == pytest.approx(285)
    assert f["above_tdp"] == pytest.approx(1 / 4)
    assert f["temp_p50_c"] == pytest.approx(45) and f["mem_temp_p50_c"] == pytest.approx(55)
    assert f["util_p50_pct"] == pytest.approx(100) and f["util_zero"] == pytest.approx(1 / 4)
    assert f["ended_jobs"] == 3  # the running job has not ended
    assert (f["completed"], f["cancelled"], f["failed"]) == pytest.approx((1 / 3,) * 3)
    # GPU time of ended jobs: 8 + 1 + 4 GPU-h; cancelled 1 of 13
    assert f["cancelled_gpu_time"] == pytest.approx(1 / 13)
    # every job's GPU time in the window, the running one's 1 h included: 8 of 14
    assert f["pretrain_gpu_time"] == pytest.approx(8 / 14)
    assert f["eval_jobs"] == pytest.approx(3 / 4)
    # failed runs: one infrastructure (2 GPU-h), one script (1 GPU-h)
    assert f["fail_jobs_infrastructure"] == pytest.approx(0.5)
    assert f["fail_time_infrastructure"] == pytest.approx(2 / 3)
    assert f["fail_time_script"] == pytest.approx(1 / 3)
    assert f["fail_jobs_framework"] == 0 and f["failed_runs"] == 2


def test_an_empty_window_has_no_figures(cur):
    f = figures(cur, start=datetime(2020, 1, 1), end=datetime(2020, 1, 2))
    assert f["power_p50_w"] is None and f["completed"] is None
    assert f["fail_jobs_script"] is None and f["failed_runs"] == 0

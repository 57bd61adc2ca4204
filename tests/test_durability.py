"""Acknowledged batches survive a SIGKILL of the process in the middle of ingest."""

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.frames import T0
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["queued", "urgent"])
def test_acknowledged_batches_survive_sigkill(tmp_path, mode):
    """``urgent``: live batches written between the steps of a running rollup."""
    db = tmp_path / "kill.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.ingest_worker", str(db),
         *(["urgent"] if mode == "urgent" else [])],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    acked = []
    try:
        for line in proc.stdout:
            acked.append(int(line))
            if len(acked) >= 150:
                break
        else:
            pytest.fail(f"worker stopped early: {proc.stderr.read()}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with Warehouse(db) as wh:
        rows = dict(wh.reader().execute(
            "SELECT ts, count(*) FROM gpu_samples GROUP BY ts").fetchall())
    missing = [i for i in acked if rows.get(T0 + timedelta(seconds=15 * i)) != 64]
    assert not missing, f"acknowledged batches lost after SIGKILL: {missing[:10]}"

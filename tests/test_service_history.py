"""An interrupted history backfill resumes where it stopped (issue 12, section 6).

The service keeps the history still missing in the warehouse; a SIGKILL in the middle of
the backfill leaves it there, and the next start writes it (besides the gap since the
last sample). /healthz says the history is incomplete until then.
"""

import signal
import time
from datetime import datetime, timedelta

import pytest
import requests

from tests.support.integration import ServiceProcess
from warehouse import Warehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARGS = ("--history-days", "2", "--racks", "2")  # 128 GPUs, 8 chunks of 6 h
GPUS = 2 * 8 * 8


def poll(svc, until, timeout=180.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            health = requests.get(svc.url + "/healthz", timeout=5).json()
        except requests.RequestException:
            health = None
        if health is not None:
            seen.append(health)
            if until(health):
                return seen
        time.sleep(0.2)
    raise AssertionError(f"condition not met in {timeout} s; last: {seen[-1:]}")


def ticks(db, start, end):
    """{tick: GPUs} of the raw samples in [start, end)."""
    with Warehouse(db) as wh:
        return dict(wh.reader().execute(
            "SELECT ts, count(*) FROM gpu_samples WHERE ts >= $1 AND ts < $2 GROUP BY ts",
            [start, end]).fetchall())


def parse(iso):
    return datetime.fromisoformat(iso.rstrip("Z"))


def test_a_backfill_killed_midway_is_resumed_after_restart(tmp_path):
    db = tmp_path / "history.duckdb"
    first = ServiceProcess(db, *ARGS)
    try:
        seen = poll(first, lambda h: h["backfill"].get("done_until") is not None)
    finally:
        first.stop(signal.SIGKILL)
    backfill = seen[-1]["backfill"]
    assert backfill["complete"] is False and backfill["state"] == "running"
    start, end = parse(backfill["start"]), parse(backfill["end"])
    expected = int((end - start) / timedelta(seconds=15))
    before = ticks(db, start, end)
    assert len(before) < expected, "the kill came too late to leave a hole"

    second = ServiceProcess(db, *ARGS)
    try:
        seen = poll(second, lambda h: h["backfill"].get("state") == "done")
    finally:
        code = second.stop()
    assert code == 0, "".join(second.output)
    first_report = seen[0]["backfill"]
    assert first_report["complete"] is False  # /healthz said history was missing
    resumed = [(parse(a), parse(b)) for a, b in first_report["missing"]]
    assert resumed[0][0] <= max(before) + timedelta(seconds=15) < resumed[0][1]
    assert resumed[0][1] >= end  # the interrupted range, up to the first run's live start
    final = seen[-1]
    assert final["backfill"]["complete"] is True and final["backfill"]["missing"] == []
    assert final["status"] == "ok"

    after = ticks(db, start, end)
    holes = [start + timedelta(seconds=15 * i) for i in range(expected)
             if after.get(start + timedelta(seconds=15 * i)) != GPUS]
    assert not holes, f"{len(holes)} ticks of the history still missing, first {holes[:3]}"

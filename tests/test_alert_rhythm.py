"""Paging does not wait behind analytics: alert state and the outbox are urgent writes.

The analytics refresh runs for tens of seconds as a chain of writer steps (issue 12,
section 6). Alert evaluation used to queue its state behind the whole refresh, so
APScheduler skipped the next evaluation and the page came late. Now the evaluation's
write runs at the next step boundary, like a live collection batch.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from alerts.model import FIRING
from alerts.runtime import AlertRuntime
from tests.support.alerts import STEP, T0, Cluster, alert_config
from warehouse import Warehouse
from warehouse.writer import yield_to_urgent


def test_an_evaluation_is_saved_between_the_steps_of_a_long_maintenance_job(tmp_path):
    cluster = Cluster()
    cluster.incidents.append(("r2", T0, T0 + timedelta(hours=1), 12.0))
    wh = Warehouse(tmp_path / "w.duckdb")
    try:
        wh.ingest_all(cluster.topology())
        now = T0
        rt = AlertRuntime(wh, alert_config(), now=lambda: now)
        log, started, release = [], threading.Event(), threading.Event()

        def refresh(con):  # a long analytics refresh of 20 steps
            for i in range(20):
                if i == 0:
                    started.set()
                    assert release.wait(30)
                log.append(f"step {i}")
                time.sleep(0.2)  # a step of real work
                yield_to_urgent()

        fired = set()
        while not fired and now < T0 + timedelta(minutes=15):
            wh.ingest("samples", cluster.samples(now), urgent=True).result()
            if not started.is_set():
                long_job = wh.write(refresh)
                assert started.wait(30)
                # the refresh holds the writer until released; evaluate meanwhile
                threading.Timer(0.5, release.set).start()
            result = rt.evaluate_once()
            log.append("evaluation")
            fired |= {a.rule for a in (result.upserts if result else ()) if a.state == FIRING}
            now += STEP
        long_job.result(30)
        assert fired
        # the first evaluation was saved after the step in progress, not after all 20
        assert log.index("evaluation") <= 3, log[:5]
    finally:
        wh.close()

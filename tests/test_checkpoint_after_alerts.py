"""CHECKPOINT keeps working once alerts have fired (docs/performance.md, open items).

The warehouse used to run its migrations on the root connection; on a file already up to
date (every restart of the service) their last read, a ``fetchone()``, left a read
transaction open for the life of the process. Every later commit that updated rows in
place (the alert state, from the second evaluation on) was then kept for that reader,
and CHECKPOINT failed with "there are other write transactions active" until exit, so
the write-ahead log grew without bound.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from alerts.model import FIRING
from alerts.runtime import AlertRuntime
from tests.support.alerts import STEP, T0, Cluster, alert_config
from warehouse import Warehouse, meta


def _wal_bytes(path) -> int:
    wal = f"{path}.wal"
    return os.path.getsize(wal) if os.path.exists(wal) else 0


def test_checkpoint_succeeds_after_alerts_fired_on_a_reopened_warehouse(tmp_path, caplog):
    path = tmp_path / "w.duckdb"
    cluster = Cluster()
    cluster.incidents.append(("r2", T0, T0 + timedelta(hours=1), 12.0))
    with Warehouse(path) as wh:  # created and migrated; the service then reopens it
        wh.ingest_all(cluster.topology())

    wh = Warehouse(path)
    now = T0
    rt = AlertRuntime(wh, alert_config(), now=lambda: now)
    fired, evaluations = set(), 0
    while not fired and now < T0 + timedelta(minutes=15):
        wh.ingest("samples", cluster.samples(now)).result()
        result = rt.evaluate_once()
        evaluations += result is not None
        fired |= {a.rule for a in (result.upserts if result else ()) if a.state == FIRING}
        now += STEP
    assert fired and evaluations > 1  # pending rows were updated in place, then fired
    assert _wal_bytes(path) > 0

    wh.checkpoint().result()  # raised TransactionException before the fix
    assert _wal_bytes(path) == 0  # the WAL is folded into the file

    wh.ingest("samples", cluster.samples(now)).result()
    rt.evaluate_once()
    with caplog.at_level(logging.WARNING, logger="warehouse.store"):
        wh.close()
    assert "checkpoint at close" not in caplog.text
    assert _wal_bytes(path) == 0


def test_reopened_warehouse_holds_no_transaction_that_blocks_checkpoints(tmp_path):
    path = tmp_path / "w.duckdb"
    Warehouse(path).close()
    with Warehouse(path) as wh:
        wh.write(lambda con: meta.put(con, "k", "a")).result()
        wh.write(lambda con: meta.put(con, "k", "b")).result()  # an update in place
        wh.checkpoint().result()
        assert _wal_bytes(path) == 0

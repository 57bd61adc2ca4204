"""Any Prometheus-API store (issue 18): the Prometheus source against a real VictoriaMetrics.

Samples of two nodes x two GPUs, one every 15 s over the last 10 minutes, are imported
into Debian's VictoriaMetrics (``/api/v1/import/prometheus``, the exposition text with
timestamps). The source, started as after a 10-minute outage, must catch up with range
queries so that every imported sample is in the warehouse once with its values, then
read the newest samples live through /federate (at their own times) and through instant
queries (at the tick).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from collector.prometheus import PrometheusSource, connect
from collector.wire import render_dcgm
from tests.support.victoria import with_targets
from warehouse import Warehouse
from warehouse.schema import SCHEMAS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEP = timedelta(seconds=15)
STEPS = 40  # 10 minutes


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def readings(ts: datetime, k: int) -> pa.Table:
    """Two nodes x two GPUs at ``ts``; temperature and power tell step ``k`` apart."""
    rows = [{"ts": ts, "node": f"gpu{n:03d}", "gpu_index": g, "gpu_uuid": f"GPU-{n}-{g}",
             "interval_s": 15.0, "util_pct": 50.0 + g, "power_w": 200.0 + k + n / 2,
             "energy_j": 1e6 + 15_000 * k, "temp_c": float(40 + k % 30 + g),
             "throttle_thermal": False, "throttle_power": False, "xid_last": 0}
            for n in range(2) for g in range(2)]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["samples"])


@pytest.fixture
def loaded(victoria):
    """VictoriaMetrics holding STEPS samples per GPU, the newest at the last 15-s tick;
    yields (server, the newest tick, {ts: readings})."""
    t = now()
    last = t - (t - datetime(1970, 1, 1)) % STEP
    imported = {}
    text = []
    for k in range(STEPS):
        ts = last - (STEPS - 1 - k) * STEP
        imported[ts] = readings(ts, k)
        ms = round(ts.replace(tzinfo=UTC).timestamp() * 1000)
        text.append(with_targets(render_dcgm(imported[ts]), ms))
    victoria.import_text("".join(text))
    assert victoria.series('{__name__=~"DCGM_.*",job="dcgm"}') == 4 * 6
    yield victoria, last, imported


def stored(wh: Warehouse) -> dict:
    cur = wh.reader()
    return {(r[0], r[1], r[2]): (r[3], r[4]) for r in cur.execute(
        "SELECT ts, node, gpu_index, temp_c, power_w FROM gpu_samples").fetchall()}


def test_catch_up_then_federate_and_query_against_victoria_metrics(loaded):
    vm, last, imported = loaded
    client = connect(vm.url, timeout_s=10)
    wh = Warehouse(":memory:")
    first = last - (STEPS - 1) * STEP
    source = PrometheusSource(client, interval_s=15, selector='job="dcgm"', chunk_s=150,
                              resume_from=first - STEP, now=now)
    tick = last  # the service's clock: a tick on the 15-s grid
    cycles = 0
    while True:
        for kind, table in source.collect(tick):
            wh.ingest(kind, table).result()
        cycles += 1
        if source.caught_up:
            break
        assert cycles < 10
    assert cycles == 4  # 600 s in 150-s chunks
    want = {(r["ts"], r["node"], r["gpu_index"]): (r["temp_c"], r["power_w"])
            for t in imported.values() for r in t.to_pylist()}
    assert stored(wh) == want  # every imported sample once, none invented

    # live, /federate: the newest sample of each GPU, at its own time (already stored)
    fed = dict(source.collect(tick + STEP))["samples"]
    assert source.pull == "federate"
    assert {(r["ts"], r["node"], r["gpu_index"]): (r["temp_c"], r["power_w"])
            for r in fed.to_pylist()} == {k: v for k, v in want.items() if k[0] == last}
    wh.ingest("samples", fed).result()
    assert stored(wh) == want  # the same samples: nothing new
    # the next pull, with the label sets the last one kept: the same rows (issue 17;
    # VictoriaMetrics need not list the series in the same order: then read again)
    again = dict(source.collect(tick + 2 * STEP))["samples"]
    assert sorted(again.to_pylist(), key=str) == sorted(fed.to_pylist(), key=str)

    # live, instant queries: the same values, stamped with the tick
    q = PrometheusSource(client, interval_s=15, selector='job="dcgm"', pull="query",
                         resume_from=last, now=now)
    rows = dict(q.collect(last + STEP))["samples"].to_pylist()
    assert {(r["node"], r["gpu_index"]): r["temp_c"] for r in rows} == {
        (k[1], k[2]): v[0] for k, v in want.items() if k[0] == last}
    assert {r["ts"] for r in rows} == {last + STEP}
    assert source.dropped.total == 0 and q.dropped.total == 0
    wh.close()

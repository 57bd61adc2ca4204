"""A real Prometheus scraping exporter endpoints; the Prometheus collector reads it back.

Prometheus (Debian's package) scrapes two fake dcgm-exporter endpoints, serving
collector.wire.render_dcgm text, every second. The collector reads for a few seconds,
is stopped for ~20 s, and must then catch up with range queries so that every second
Prometheus holds is in the warehouse, with no row twice.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from collector.prometheus import PrometheusSource, connect
from warehouse import Warehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def tick() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def wait_for_series(source: PrometheusSource, n: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(source.client.custom_query("DCGM_FI_DEV_GPU_TEMP")) >= n:
            time.sleep(1.5)  # so that the previous whole second has a scrape too
            return
        time.sleep(0.2)
    raise AssertionError("Prometheus never scraped the exporters")


def test_collects_and_catches_up_after_a_stop(prometheus):
    client = connect(prometheus.url, timeout_s=10)
    wh = Warehouse(":memory:")
    source = PrometheusSource(client, interval_s=1.0, selector='job="dcgm"', chunk_s=10)
    wait_for_series(source, 4)

    def cycle() -> int:
        rows = 0
        for kind, table in source.collect(tick()):
            rows += wh.ingest(kind, table).result() if kind == "samples" else 0
            if kind != "samples":
                wh.ingest(kind, table).result()
        return rows

    first = cycle()
    assert first == 4  # an instant query: 2 nodes x 2 GPUs
    for _ in range(3):
        time.sleep(1)
        cycle()
    stopped_at = source.cursor
    time.sleep(22)  # gpulens is "stopped"; Prometheus keeps scraping
    cycles = 0
    while True:
        cycle()
        cycles += 1
        if source.caught_up:
            break
        assert cycles < 10
    assert cycles >= 2, "a 22 s gap in 10 s chunks takes several catch-up cycles"
    assert source.cursor - stopped_at >= timedelta(seconds=22)
    cycle()  # and again: the same tick once more changes nothing

    cur = wh.reader()
    per_gpu = cur.execute(
        "SELECT node, gpu_index, count(*), count(DISTINCT ts), min(ts), max(ts) "
        "FROM gpu_samples GROUP BY ALL ORDER BY ALL").fetchall()
    assert [(r[0], r[1]) for r in per_gpu] == [
        ("gpu000", 0), ("gpu000", 1), ("gpu001", 0), ("gpu001", 1)]
    for node, gpu, n, distinct, lo, hi in per_gpu:
        seconds = int((hi - lo).total_seconds()) + 1
        assert n == distinct == seconds, (node, gpu, n, distinct, seconds)
    row = cur.execute(
        "SELECT power_w, temp_c, energy_j FROM gpu_samples WHERE node = 'gpu000' "
        "AND gpu_index = 1 ORDER BY ts DESC LIMIT 1").fetchone()
    assert 300 <= row[0] < 400 and row[1] == 61 and row[2] > 1e9
    assert source.dropped.total == 0
    wh.close()

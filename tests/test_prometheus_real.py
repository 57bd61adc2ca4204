"""A real Prometheus scraping exporter endpoints; the Prometheus collector reads it back.

Prometheus (Debian's package) scrapes two fake dcgm-exporter endpoints, serving
collector.wire.render_dcgm text, every second. With queries, the collector reads for a
few seconds, is stopped for ~20 s, and must then catch up with range queries so that
every second Prometheus holds is in the warehouse, with no row twice. With /federate,
each row is one of Prometheus's own samples, at its scrape time, through a stop and its
catch-up too, and none it holds is missing.
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
    source = PrometheusSource(client, interval_s=1.0, selector='job="dcgm"', chunk_s=10,
                              pull="query")  # every row on the 1-s grid, counted below
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


def test_federate_rows_are_prometheus_samples_at_their_scrape_times(prometheus):
    client = connect(prometheus.url, timeout_s=10)
    wh = Warehouse(":memory:")
    source = PrometheusSource(client, interval_s=1.0, selector='job="dcgm"', chunk_s=10)
    assert source.pull == "federate"
    wait_for_series(source, 4)

    def cycle() -> None:
        for kind, table in source.collect(tick()):
            wh.ingest(kind, table).result()

    cycle()
    # Prometheus's raw samples of the last seconds, with their own times
    raw = {}
    for s in client.custom_query('DCGM_FI_DEV_GPU_TEMP{job="dcgm"}[10s]'):
        m = s["metric"]
        for t, v in s["values"]:
            raw[(m["Hostname"], int(m["gpu"]), round(float(t) * 1000))] = float(v)
    cur = wh.reader()
    rows = cur.execute("SELECT node, gpu_index, epoch_ms(ts), temp_c FROM gpu_samples "
                       "ORDER BY ALL").fetchall()
    assert [(r[0], r[1]) for r in rows] == [
        ("gpu000", 0), ("gpu000", 1), ("gpu001", 0), ("gpu001", 1)]
    for node, gpu, ms, temp in rows:
        assert raw[(node, gpu, ms)] == temp  # a real sample, at its scrape time
    assert any(ms % 1000 for _, _, ms, _ in rows)  # scrape times, not the query grid
    for _ in range(3):
        cycle()  # within one scrape interval or not: a sample is one row
        time.sleep(0.4)
    time.sleep(4)  # stopped: then range queries fill the gap, then federate again
    while True:
        cycle()
        if source.caught_up:
            break
    cycle()
    per_gpu = cur.execute("SELECT node, gpu_index, count(*), count(DISTINCT ts), "
                          "list(epoch_ms(ts) ORDER BY ts) FROM gpu_samples "
                          "GROUP BY ALL ORDER BY ALL").fetchall()
    assert len(per_gpu) == 4 and all(n == d for _, _, n, d, _ in per_gpu)  # none twice
    # none lost: every sample Prometheus holds between a GPU's first and last row is a
    # row. Compared with Prometheus's own samples, not a count of seconds: on a loaded
    # machine a scrape can time out, and then Prometheus itself has no sample there
    held: dict[tuple[str, int], list[int]] = {}
    for s in client.custom_query('DCGM_FI_DEV_GPU_TEMP{job="dcgm"}[60s]'):
        m = s["metric"]
        held[(m["Hostname"], int(m["gpu"]))] = [round(float(t) * 1000) for t, _ in s["values"]]
    for node, gpu, _, _, stamps in per_gpu:
        assert stamps[-1] - stamps[0] >= 4000  # the stop was crossed
        assert stamps == [t for t in held[(node, gpu)] if stamps[0] <= t <= stamps[-1]]
    assert source.dropped.total == 0
    # Prometheus lists the same series in the same order pull after pull: the label
    # sets and their lengths kept from one pull served the next (issue 17). On a loaded
    # machine a scrape can time out and its series go stale for a pull, which changes the
    # sets; so pull until two pulls in a row saw the same series, a bounded number of times
    for _ in range(30):
        if source.labels.reused["sets"] and source.labels.reused["lengths"]:
            break
        cycle()
        time.sleep(0.3)
    assert source.labels.reused["sets"] >= 1 and source.labels.reused["lengths"] >= 1
    wh.close()

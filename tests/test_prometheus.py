"""The Prometheus collector on literal API answers: queries, parsing, catch-up windows."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from collector.dcgm import FIELDS
from collector.prometheus import PrometheusSource, field_queries, parse_results

T0 = datetime(2026, 11, 2, 12, 0)
E0 = 1793620800  # T0 as Unix seconds


def labels(name, node="gpu001", gpu="0", **extra):
    return {"__name__": name, "Hostname": node, "gpu": gpu, "UUID": f"GPU-{node}-{gpu}",
            "instance": f"{node}:9400", "job": "dcgm", **extra}


def fid(column):
    return next(i for i, f in enumerate(FIELDS) if f.column == column)


def empty():
    return [[] for _ in FIELDS]


def test_one_query_per_field_with_selector():
    qs = field_queries('job="dcgm"')
    assert len(qs) == len(FIELDS)
    assert 'DCGM_FI_DEV_GPU_TEMP{job="dcgm"}' in qs
    assert ('{__name__=~"DCGM_FI_DEV_CLOCKS_EVENT_REASONS|DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"'
            ',job="dcgm"}') in qs
    assert "DCGM_FI_DEV_GPU_TEMP" in field_queries("")


def test_vector_and_matrix_answers():
    res = empty()
    res[fid("temp_c")] = [
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP"), "value": [E0, "61"]},
        {"metric": labels("DCGM_FI_DEV_GPU_TEMP", gpu="1"), "value": [E0, "NaN"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "10.0.0.9:9400",
                    "gpu": "0"}, "value": [E0, "40"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": "x"}, "value": [E0, "1"]},
    ]
    res[fid("energy_j")] = [{"metric": labels("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
                             "value": [E0, "5000"]}]
    res[fid("throttle_mask")] = [
        {"metric": labels("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), "value": [E0, "4"]},
        {"metric": labels("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), "value": [E0, "64"]},
    ]
    rows = {(r["node"], r["gpu_index"]): r for r in parse_results(res).to_pylist()}
    assert set(rows) == {("gpu001", 0), ("gpu001", 1), ("10.0.0.9", 0)}
    g = rows[("gpu001", 0)]
    assert g["ts"] == T0 and g["temp_c"] == 61 and g["energy_j"] == 5.0
    assert g["throttle_thermal"] is True and g["throttle_power"] is False  # new name wins
    assert rows[("gpu001", 1)]["temp_c"] is None

    matrix = empty()
    matrix[fid("power_w")] = [{"metric": labels("DCGM_FI_DEV_POWER_USAGE"),
                               "values": [[E0, "300.5"], [E0 + 15, "310"], [E0 + 30, "320"]]}]
    t = parse_results(matrix, node_label="instance")
    assert t["ts"].to_pylist() == [T0 + timedelta(seconds=s) for s in (0, 15, 30)]
    assert t["power_w"].to_pylist() == [300.5, 310, 320]
    assert set(t["node"].to_pylist()) == {"gpu001:9400"}


class FakeClient:
    """Answers like Prometheus holding one GPU sampled every 15 s; can be 'down'."""

    def __init__(self):
        self.down = False
        self.calls = []

    def _series(self, times):
        return [{"metric": labels("DCGM_FI_DEV_GPU_TEMP"),
                 "values": [[t, "50"] for t in times]}]

    def custom_query(self, query, params=None):
        self.calls.append(("query", query))
        if self.down:
            raise ConnectionError("connection refused")
        t = float(params["time"])
        return self._series([t])[:1] if "GPU_TEMP" in query else []

    def custom_query_range(self, query, start_time, end_time, step):
        self.calls.append(("range", query, start_time, end_time))
        if self.down:
            raise ConnectionError("connection refused")
        if "GPU_TEMP" not in query:
            return []
        s, e = int(start_time.timestamp()), int(end_time.timestamp())
        return self._series(list(range(s, e + 1, 15)))


def test_catch_up_after_an_outage_in_chunks():
    client = FakeClient()
    src = PrometheusSource(client, interval_s=15, resume_from=T0, chunk_s=300,
                           max_catchup_s=3600, now=lambda: T0 + timedelta(hours=1))
    assert src.window(T0) is None  # nothing new
    assert src.window(T0 + timedelta(seconds=15)) == (T0 + timedelta(seconds=15),) * 2
    client.down = True
    with pytest.raises(ConnectionError):
        src.collect(T0 + timedelta(seconds=15))
    assert src.cursor == T0  # a failed cycle moves nothing
    client.down = False
    now = T0 + timedelta(minutes=12)
    seen = []
    while True:
        b = dict(src.collect(now))
        seen += b["samples"]["ts"].to_pylist()
        if src.caught_up:
            break
    expected = [T0 + timedelta(seconds=15 * k) for k in range(1, 49)]
    assert seen == expected  # every step once, in 300-s chunks
    assert sum(1 for c in client.calls if c[0] == "range") == 3 * len(FIELDS)
    # too long an outage: only max_catchup_s back
    late = T0 + timedelta(hours=5)
    start, _ = src.window(late)
    assert start == late - timedelta(hours=1)

"""Implausible samples are dropped and counted, never stored."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from collector.sanitize import DropCounter, sanitize_samples
from warehouse.schema import SCHEMAS

NOW = datetime(2026, 11, 2, 12, 0)


def rows(*overrides):
    base = {"ts": NOW, "node": "n", "gpu_index": 0, "power_w": 300.0, "temp_c": 60.0,
            "util_pct": 50.0}
    out = [base | {"gpu_index": i} | o for i, o in enumerate(overrides)]
    return pa.Table.from_pylist(out, schema=SCHEMAS["samples"])


def test_drops_and_counts_each_reason():
    t = rows({}, {"power_w": float("nan")}, {"temp_c": -300.0}, {"util_pct": 250.0},
             {"ts": NOW + timedelta(hours=2)}, {"ts": NOW - timedelta(days=30)},
             {"power_w": None, "temp_c": None})
    counter = DropCounter()
    kept, counts = sanitize_samples(t, NOW, counter=counter)
    assert kept["gpu_index"].to_pylist() == [0, 6]  # NULL is "not reported", kept
    assert counts == {"nan": 1, "negative": 1, "absurd": 1, "timestamp": 2}
    sanitize_samples(t, NOW, counter=counter)
    assert counter.total == 10 and counter.as_dict()["timestamp"] == 4


def test_clean_batch_is_returned_unchanged():
    t = rows({}, {})
    kept, counts = sanitize_samples(t, NOW)
    assert kept is t and counts == {}

"""Implausible samples: a bad value becomes NULL, a bad row is dropped; both counted."""

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


def test_a_bad_value_costs_that_value_and_is_counted():
    t = rows({}, {"power_w": float("nan")}, {"temp_c": -300.0}, {"util_pct": 250.0},
             {"power_w": float("inf"), "temp_c": 61.0}, {"power_w": None, "temp_c": None},
             {"xid_last": 2_000_000, "ecc_sbe_volatile": 10**13})
    counter = DropCounter()
    kept, counts = sanitize_samples(t, NOW, counter=counter)
    got = {r["gpu_index"]: r for r in kept.to_pylist()}
    assert sorted(got) == [0, 1, 2, 3, 4, 5, 6]  # every row stays
    assert got[1]["power_w"] is None and got[1]["temp_c"] == 60  # only the bad value goes
    assert got[2]["temp_c"] is None and got[3]["util_pct"] is None
    assert got[4]["power_w"] is None and got[4]["temp_c"] == 61
    assert got[6]["xid_last"] is None and got[6]["ecc_sbe_volatile"] is None
    assert got[0] == t.to_pylist()[0]
    assert counts == {"value: power_w not finite": 2, "value: temp_c below -40": 1,
                      "value: util_pct above 100": 1, "value: xid_last above 1e+06": 1,
                      "value: ecc_sbe_volatile above 1e+12": 1}
    sanitize_samples(t, NOW, counter=counter)
    assert counter.total == 12 and counter.as_dict()["value: power_w not finite"] == 4


def test_impossible_rows_are_dropped_and_counted_once():
    t = rows({}, {"ts": NOW + timedelta(hours=2)}, {"ts": NOW - timedelta(days=30)},
             {"gpu_index": 4464}, {"gpu_index": -1}, {"node": ""},
             {"ts": NOW + timedelta(hours=2), "power_w": float("nan")})
    kept, counts = sanitize_samples(t, NOW)
    assert kept["gpu_index"].to_pylist() == [0]
    assert counts == {"row: timestamp not near now": 3, "row: gpu index outside 0-31": 2,
                      "row: no node": 1}  # a dropped row's values are not counted


def test_clean_batch_is_returned_unchanged():
    t = rows({}, {})
    kept, counts = sanitize_samples(t, NOW)
    assert kept is t and counts == {}


def test_tensor_and_dram_activity_outside_0_100_cost_that_value():
    # a tensor ratio printed as percent (x 100 twice) or negative is no activity reading
    t = rows({"tensor_active_pct": 5_000.0, "dram_active_pct": 30.0},
             {"tensor_active_pct": 40.0, "dram_active_pct": -1.0})
    kept, counts = sanitize_samples(t, NOW, counter=DropCounter())
    got = kept.to_pylist()
    assert got[0]["tensor_active_pct"] is None and got[0]["dram_active_pct"] == 30.0
    assert got[1]["tensor_active_pct"] == 40.0 and got[1]["dram_active_pct"] is None
    assert counts == {"value: tensor_active_pct above 100": 1,
                      "value: dram_active_pct below 0": 1}

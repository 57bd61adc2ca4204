"""dcgm-exporter text -> samples rows: identity, units, blanks, XID events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from collector.dcgm import (
    FP64_BLANK,
    INT32_BLANK,
    INT64_BLANK,
    DcgmCollector,
    parse_scrapes,
    xid_events,
)
from warehouse.schema import SCHEMAS

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
TS = datetime(2026, 11, 2, 12, 0)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def reference_values(text: str) -> dict[tuple[str, str], float]:
    """(metric, gpu) -> first value, read with prometheus_client."""
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "gpu" in s.labels:
                out.setdefault((s.name.removesuffix("_total"), s.labels["gpu"]), float(s.value))
    return out


def test_schema_and_identity():
    texts = {"10.0.0.17:9400": fixture("h100_k8s.txt"), "a100-node": fixture("a100_legacy.txt")}
    r = parse_scrapes(texts, TS, interval_s=30.0)
    assert r.samples.schema.equals(SCHEMAS["samples"])
    assert r.errors == {}
    rows = {(x["node"], x["gpu_index"]): x for x in r.samples.to_pylist()}
    # Hostname label wins over the target; without it the target key is the node.
    assert set(rows) == {("gpu017", 0), ("gpu017", 1), ("a100-node", 0)}
    assert rows[("a100-node", 0)]["gpu_uuid"].startswith("GPU-0a1b")  # lowercase `uuid`
    assert all(x["interval_s"] == 30.0 and x["ts"] == TS for x in rows.values())


def test_values_and_units_follow_the_reference_parser():
    text = fixture("h100_k8s.txt")
    ref = reference_values(text)
    rows = {x["gpu_index"]: x for x in parse_scrapes({"n": text}, TS).samples.to_pylist()}
    g0 = rows[0]
    assert g0["util_pct"] == ref[("DCGM_FI_DEV_GPU_UTIL", "0")]
    assert abs(g0["power_w"] - ref[("DCGM_FI_DEV_POWER_USAGE", "0")]) < 1e-3
    # mJ -> J; ratio -> percent; first series wins over the MIG-like second one.
    assert g0["energy_j"] == ref[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")] / 1000
    assert abs(g0["sm_active_pct"] - 100 * ref[("DCGM_FI_PROF_SM_ACTIVE", "0")]) < 1e-4
    mask = int(ref[("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "0")])  # 0x44: HW thermal + power
    assert g0["throttle_thermal"] is bool(mask & 0x40) and g0["throttle_power"] is bool(mask & 4)
    assert rows[1]["throttle_thermal"] is False and rows[1]["throttle_power"] is False  # idle
    assert rows[1]["xid_last"] == 79 and g0["xid_last"] == 0
    assert g0["ecc_sbe_volatile"] is None  # not exported: NULL


def test_blank_sentinels_become_null():
    text = fixture("h100_k8s.txt")
    rows = {x["gpu_index"]: x for x in parse_scrapes({"n": text}, TS).samples.to_pylist()}
    assert rows[1]["mem_temp_c"] is None  # 2147483632 = DCGM_INT32_BLANK
    assert rows[1]["sm_active_pct"] is None  # 2**47 = DCGM_FP64_BLANK
    legacy = parse_scrapes({"n": fixture("a100_legacy.txt")}, TS).samples.to_pylist()[0]
    assert legacy["ecc_sbe_volatile"] is None  # DCGM_INT64_BLANK + 2 (not supported)
    for blank in (INT32_BLANK + 3, INT64_BLANK, FP64_BLANK + 1, float("nan")):
        v = int(blank) if blank == blank and blank != FP64_BLANK + 1 else blank
        t = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0"}} {v}\nDCGM_FI_DEV_GPU_UTIL{{gpu="0"}} 5\n'
        row = parse_scrapes({"n": t}, TS).samples.to_pylist()[0]
        assert row["temp_c"] is None and row["util_pct"] == 5


def test_bad_or_empty_targets_are_reported_not_fatal():
    texts = {
        "ok": fixture("a100_legacy.txt"),
        "broken": 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n',
        "empty": "",
        "no_gpus": "process_cpu_seconds_total 3\n",
    }
    r = parse_scrapes(texts, TS)
    assert set(r.errors) == {"broken", "empty", "no_gpus"}
    assert r.samples["node"].to_pylist() == ["ok"]


def test_zone_aware_ts_is_stored_as_naive_utc():
    aware = datetime(2026, 11, 2, 14, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    r = parse_scrapes({"n": fixture("a100_legacy.txt")}, aware)
    assert r.samples["ts"].to_pylist() == [datetime(2026, 11, 2, 14, 0)]


def _samples(xids: dict[tuple[str, int], int | None]) -> pa.Table:
    rows = [{"ts": TS, "node": n, "gpu_index": g, "gpu_uuid": f"GPU-{n}-{g}", "xid_last": x}
            for (n, g), x in xids.items()]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["samples"])


def test_xid_events_only_on_change_to_nonzero():
    first, state = xid_events({}, _samples({("a", 0): 79, ("a", 1): 0}), TS)
    assert first.num_rows == 0  # first sight: the gauge may hold an old XID
    assert state == {("a", 0): 79, ("a", 1): 0}
    ev, state2 = xid_events(state, _samples({("a", 0): 79, ("a", 1): 13, ("b", 0): 0}), TS)
    assert ev.schema.equals(SCHEMAS["events"])
    assert ev.select(["node", "gpu_index", "kind", "code"]).to_pylist() == [
        {"node": "a", "gpu_index": 1, "kind": "xid", "code": 13}
    ]
    assert state == {("a", 0): 79, ("a", 1): 0}  # input untouched
    ev, state3 = xid_events(state2, _samples({("a", 1): 0, ("a", 0): None}), TS)
    assert ev.num_rows == 0  # back to 0 is not an event; NULL keeps the state
    assert state3[("a", 0)] == 79 and state3[("a", 1)] == 0


def test_collector_keeps_xid_state_between_scrapes():
    base = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-x",Hostname="h"} '
    c = DcgmCollector()
    assert c.collect({"h": base + "0\n"}, TS).events.num_rows == 0
    r = c.collect({"h": base + "48\n"}, TS + timedelta(seconds=15))
    assert r.events["code"].to_pylist() == [48]
    assert r.events["ts"].to_pylist() == [TS + timedelta(seconds=15)]
    assert c.collect({"h": base + "48\n"}, TS + timedelta(seconds=30)).events.num_rows == 0

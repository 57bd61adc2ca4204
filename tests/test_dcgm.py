"""dcgm-exporter text -> samples rows: identity, units, blanks, XID events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector.dcgm import (
    FIELDS,
    INT32_BLANK,
    INT64_BLANK,
    DcgmCollector,
    fill_grid,
    parse_scrapes,
    xid_events,
)
from collector.nodenames import NodeNames
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
    for blank in (INT32_BLANK + 3, INT64_BLANK, float("nan")):
        v = int(blank) if blank == blank else blank
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


# --------------------------------------------------- one bad thing costs one thing (#12)


def one(text: str, **kw):
    r = parse_scrapes({"ok": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="good"} 40\n', "t": text},
                      TS, **kw)
    rows = {(x["node"], x["gpu_index"]): x for x in r.samples.to_pylist()}
    assert rows[("good", 0)]["temp_c"] == 40  # the other target always keeps its row
    return r, rows


def test_a_page_cut_inside_a_label_set_costs_that_line():
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 41\n'
            'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="h"} 300.5\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"')
    r, rows = one(text)
    assert rows[("h", 0)]["temp_c"] == 41 and rows[("h", 0)]["power_w"] == 300.5
    assert rows[("h", 0)]["util_pct"] is None
    assert r.errors == {}  # the target delivered its GPU: up
    assert r.dropped == {"line: truncated (no line feed after the last line)": 1}
    # cut inside a number: "1234" read as "12" would be a wrong value, so the line goes
    r, rows = one('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 41\n'
                  'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="h"} 12')
    assert rows[("h", 0)]["mem_used_mib"] is None


def test_a_page_of_nothing_but_garbage_is_a_target_error_naming_the_line():
    r, rows = one("<html>502 Bad Gateway</html>\n")
    assert set(rows) == {("good", 0)}
    assert r.errors["t"].startswith("1 invalid line; first: invalid")
    assert "502 Bad Gateway" in r.errors["t"]


@pytest.mark.parametrize("value,reason", [
    ("4294967295", "value: xid_last outside int32"),
    ("3000000000", "value: xid_last outside int32"),
    ("-Inf", "value: xid_last not finite"),
    ("+Inf", "value: xid_last not finite"),
    ("79.5", "value: xid_last not an integer"),
])
def test_an_xid_outside_its_column_is_null_and_counted(value, reason):
    r, rows = one(f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",Hostname="h"}} {value}\n'
                  'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 50\n')
    assert rows[("h", 0)]["xid_last"] is None and rows[("h", 0)]["temp_c"] == 50
    assert r.dropped == {reason: 1}


def test_counters_beyond_2_to_53_are_null_and_counted():
    r, rows = one('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0",Hostname="h"} 1e18\n'
                  'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",Hostname="h"} 9007199254740992\n'
                  'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",Hostname="h"} 129931554972\n')
    g = rows[("h", 0)]
    assert g["ecc_sbe_volatile"] is None and g["ecc_dbe_volatile"] == 2**53
    assert g["energy_j"] == 129931554.972  # a real counter (gpu-monitoring-tools#189)
    assert r.dropped == {"value: ecc_sbe_volatile beyond 2^53": 1}


@pytest.mark.parametrize("metric,value", [
    # int fields: DCGM_INT32_IS_BLANK and DCGM_INT64_IS_BLANK, every member of the family
    ("DCGM_FI_DEV_GPU_TEMP", str(INT32_BLANK)),
    ("DCGM_FI_DEV_GPU_TEMP", str(INT32_BLANK + 15)),
    ("DCGM_FI_DEV_GPU_TEMP", str(2**31 - 1)),
    ("DCGM_FI_DEV_MEMORY_TEMP", "9223372036854776000"),  # printed INT64 blank (#97)
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", str(INT64_BLANK)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", str(INT64_BLANK + 15)),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", str(INT64_BLANK + 2)),
    # double fields: DCGM_FP64_IS_BLANK is any value >= 2**47
    ("DCGM_FI_DEV_POWER_USAGE", "140737488355328"),
    ("DCGM_FI_DEV_POWER_USAGE", "140737488355343.000000"),
    ("DCGM_FI_DEV_POWER_USAGE", "1e300"),
    ("DCGM_FI_PROF_SM_ACTIVE", "140737488355330.0"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "140737488355328.0"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "1e300"),
    ("DCGM_FI_DEV_GPU_TEMP", "NaN"),
])
def test_blank_families_are_null_not_numbers_not_dropped_rows(metric, value):
    r, rows = one(f'{metric}{{gpu="0",Hostname="h"}} {value}\n'
                  'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h"} 7\n')
    g = rows[("h", 0)]
    assert g["util_pct"] == 7  # the row stays
    assert all(g[c] is None for c in ("temp_c", "mem_temp_c", "ecc_sbe_volatile",
                                      "energy_j", "power_w", "sm_active_pct",
                                      "tensor_active_pct", "dram_active_pct"))
    assert r.dropped == {}  # a blank is "no value", not a refusal


def test_values_just_outside_the_blank_families_are_numbers():
    r, rows = one('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",Hostname="h"} 2147483632\n'
                  'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="h"} 140737488355327\n'
                  'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 2147483631\n')
    g = rows[("h", 0)]
    # energy passes through the int32 family as a counter: a number, not a blank
    assert g["energy_j"] == 2147483.632
    assert g["power_w"] == pytest.approx(2**47 - 1)  # sanitize refuses it later
    assert g["temp_c"] == pytest.approx(2147483631)


@pytest.mark.parametrize("label", ["70000", "32", "4464", "-1", "0x1", "1.0", ""])
def test_a_gpu_label_that_is_no_gpu_index_is_refused_and_counted(label):
    r, rows = one(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{label}",Hostname="h"}} 50\n'
                  'DCGM_FI_DEV_GPU_TEMP{gpu="3",Hostname="h"} 51\n')
    assert set(rows) == {("good", 0), ("h", 3)}  # never wrapped onto another GPU
    assert r.dropped == {"row: gpu label not a GPU index 0-31": 1}


# --------------------------------------------------------------------------- MIG


def test_mig_instances_add_up_to_the_gpu_row():
    """dcgm-exporter#317: four 1g.6gb instances using 3 MiB each are 12 MiB on GPU 0."""
    r = parse_scrapes({"a30:9400": fixture("mig_a30_issue317.txt")}, TS)
    rows = {x["gpu_index"]: x for x in r.samples.to_pylist()}
    assert set(rows) == {0, 1} and r.errors == {} and r.dropped == {}
    assert rows[0]["mem_used_mib"] == 12 and rows[1]["mem_used_mib"] == 6
    assert rows[0]["temp_c"] == 35  # the GPU's own value, repeated per instance
    assert rows[0]["gpu_uuid"] == "GPU-265c9814-6156-355b-e589-ff2064894f16"
    assert rows[0]["node"] == "yg-data-k8s-gpu-a30-node-test-test0003.mt"


def test_each_mig_instance_keeps_its_own_figures():
    r = parse_scrapes({"a30:9400": fixture("mig_a30_issue317.txt"),
                       "w:9400": fixture("mig_a100_gr_active.txt")}, TS)
    got = {(x["node"][:3], x["gpu_index"], x["gpu_i_id"]): x for x in r.instances.to_pylist()}
    assert r.instances.schema.equals(SCHEMAS["mig_samples"])
    assert sorted(got) == [("k8s", 0, 8), ("k8s", 0, 9), ("k8s", 0, 10), ("yg-", 0, 3),
                           ("yg-", 0, 4), ("yg-", 0, 5), ("yg-", 0, 6), ("yg-", 1, 3),
                           ("yg-", 1, 4)]
    assert all(x["mem_used_mib"] == 3 and x["gpu_i_profile"] == "1g.6gb"
               for k, x in got.items() if k[0] == "yg-")
    assert got[("k8s", 0, 9)]["gr_active_pct"] == pytest.approx(3.3893)
    assert got[("k8s", 0, 9)]["mem_used_mib"] is None and got[("k8s", 0, 9)]["ts"] == TS
    plain = parse_scrapes({"n": fixture("a100_legacy.txt")}, TS)
    assert plain.instances.num_rows == 0  # no MIG, no instance rows


def test_a_mig_only_page_gives_utilisation_from_the_graphics_engine():
    """dra-driver-nvidia-gpu#166: three 1g.10gb instances of an A100 (7 slices)."""
    r = parse_scrapes({"w:9400": fixture("mig_a100_gr_active.txt")}, TS)
    (row,) = r.samples.to_pylist()
    assert row["node"] == "k8s-dra-driver-cluster-worker" and row["gpu_index"] == 0
    # each instance is 1 of the GPU's 7 compute slices
    assert row["util_pct"] == pytest.approx(100 * (0.029399 + 0.033893 + 0.0) / 7, rel=1e-6)


def test_mig_weights_follow_the_profiles_and_the_gpu_model():
    lab = 'gpu="0",Hostname="h",modelName="{m}",GPU_I_PROFILE="{p}",GPU_I_ID="{i}"'
    text = "".join(
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lab.format(m=m, p=p, i=i)}}} {v}\n"
        f"DCGM_FI_PROF_SM_ACTIVE{{{lab.format(m=m, p=p, i=i)}}} {v / 2}\n"
        f"DCGM_FI_DEV_FB_USED{{{lab.format(m=m, p=p, i=i)}}} 1000\n"
        for m, p, i, v in [("NVIDIA H100 80GB HBM3", "3g.40gb", 1, 0.5),
                           ("NVIDIA H100 80GB HBM3", "4g.40gb", 2, 1.0)])
    row = parse_scrapes({"n": text}, TS).samples.to_pylist()[0]
    assert row["util_pct"] == pytest.approx(100 * (3 * 0.5 + 4 * 1.0) / 7)
    assert row["sm_active_pct"] == pytest.approx(100 * (3 * 0.25 + 4 * 0.5) / 7)
    assert row["mem_used_mib"] == 2000
    a30 = text.replace("H100 80GB HBM3", "A30").replace("3g.40gb", "1g.6gb").replace(
        "4g.40gb", "2g.12gb")
    row = parse_scrapes({"n": a30}, TS).samples.to_pylist()[0]
    assert row["util_pct"] == pytest.approx(100 * (1 * 0.5 + 2 * 1.0) / 4)  # A30: 4 slices


def test_pod_series_of_one_gpu_are_not_added_up():
    """Time-sliced sharing repeats a GPU's value per pod (dcgm-exporter#432): one GPU."""
    text = "".join(f'DCGM_FI_DEV_FB_USED{{gpu="0",Hostname="h",pod="p{i}",vgpu="{i}"}} 15866\n'
                   for i in (1, 3))
    row = parse_scrapes({"n": text}, TS).samples.to_pylist()[0]
    assert row["mem_used_mib"] == 15866


def test_gpu_util_wins_over_the_graphics_engine_when_both_exist():
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h"} 90\n'
            'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",Hostname="h"} 0.5\n')
    assert parse_scrapes({"n": text}, TS).samples["util_pct"].to_pylist() == [90]


# ------------------------------------------------------------------- node identity


def test_without_a_hostname_label_the_node_is_the_target_host_without_port():
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 50\n'
    r = parse_scrapes({"gpu017:9400": text, "[fd00::7]:9400": text,
                       "http://gpu018.cluster.example:9400/metrics": text}, TS)
    assert sorted(r.samples["node"].to_pylist()) == [
        "fd00::7", "gpu017", "gpu018.cluster.example"]


def test_node_names_map_to_the_scheduler_names():
    texts = {"10.0.0.7:9400": 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 50\n',
             "b:9400": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="gpu002-ib.cluster.example"} 5\n',
             "c:9400": 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="login1.cluster.example"} 5\n'}
    names = NodeNames(strip_domain=True, regex=r"(gpu\d+)-ib", replace=r"\1")
    r = parse_scrapes(texts, TS, names=names, nodes={"c:9400": "Given.Name"})
    # IP addresses keep their dots; a name the operator gave is used as is.
    assert sorted(r.samples["node"].to_pylist()) == ["10.0.0.7", "Given.Name", "gpu002"]


def test_fractions_are_kept_where_the_column_holds_fractions():
    """Prometheus recording rules average integer fields; only integer columns refuse."""
    r, rows = one('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 61.5\n'
                  'DCGM_FI_DEV_MEM_COPY_UTIL{gpu="0",Hostname="h"} 13.5\n'
                  'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",Hostname="h"} 0.5\n')
    g = rows[("h", 0)]
    assert g["temp_c"] == 61.5 and g["mem_util_pct"] == 13.5 and g["ecc_dbe_volatile"] is None
    assert r.dropped == {"value: ecc_dbe_volatile not an integer": 1}


# Tensor-pipe and DRAM activity (issue 15): values from a public dcgm-exporter page (a
# Tesla T4, driver 590.48.01); a GPU without profiling fields has NULL, as does DCGM's
# FP64 blank.
_T4 = ('{gpu="0",UUID="GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",pci_bus_id="00000000:37:00.0",'
       'device="nvidia0",modelName="Tesla T4",Hostname="cp-bm14r7",'
       'DCGM_FI_DRIVER_VERSION="590.48.01"}')


def test_tensor_and_dram_activity_are_percent_or_null():
    text = (f"DCGM_FI_DEV_GPU_UTIL{_T4} 12\n"
            f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{_T4} 0.005822\n"
            f"DCGM_FI_PROF_DRAM_ACTIVE{_T4} 0.092781\n"
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="cp-bm14r7"} 40\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="2",Hostname="cp-bm14r7"} 40\n'
            'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="2",Hostname="cp-bm14r7"} 140737488355328.0\n')
    rows = {r["gpu_index"]: r for r in parse_scrapes({"n": text}, TS).samples.to_pylist()}
    assert rows[0]["tensor_active_pct"] == pytest.approx(0.5822, abs=1e-4)
    assert rows[0]["dram_active_pct"] == pytest.approx(9.2781, abs=1e-4)
    assert rows[1]["tensor_active_pct"] is None and rows[1]["dram_active_pct"] is None
    assert rows[2]["tensor_active_pct"] is None  # DCGM_FP64_BLANK


@pytest.mark.property
@given(st.data())
def test_property_one_observation_per_cell_fills_as_the_sorting_fold(data):
    """fill_grid places one observation per cell without sorting (issue 17); the same
    observations plus a later duplicate of one (which loses: same rank, listed later)
    go through the sort and fold, and must give the same grid."""
    nrows = data.draw(st.integers(1, 6))
    nf = len(FIELDS)
    cells = data.draw(st.lists(st.integers(0, nrows * nf - 1), min_size=1, max_size=40,
                               unique=True))
    values = st.one_of(st.floats(allow_nan=True), st.sampled_from(
        [float(INT32_BLANK), float(INT64_BLANK), 2.0**47, 2.0**60, 0.5, 3.0]))
    value = np.array(data.draw(st.lists(values, min_size=len(cells), max_size=len(cells))))
    cell = np.array(cells)
    row, fid = cell // nf, cell % nf
    rank = np.array(data.draw(st.lists(st.integers(0, 1), min_size=len(cells),
                                       max_size=len(cells))))
    fast = fill_grid(nrows, row, fid, rank, value)
    k = data.draw(st.integers(0, len(cells) - 1))
    folded = fill_grid(nrows, np.r_[row, row[k]], np.r_[fid, fid[k]], np.r_[rank, rank[k]],
                       np.r_[value, 1234.0])
    np.testing.assert_array_equal(fast, folded)

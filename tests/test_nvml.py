"""NVML readings through a fake pynvml replaying H100 values (and, with a GPU, the real one)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.nvml import NvmlSource, main, record
from tests.support.fake_pynvml import FakeNvml
from warehouse.schema import SCHEMAS

FIXTURE = Path(__file__).parent / "fixtures" / "nvml" / "h100_hgx.json"


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


@pytest.fixture
def nvml():
    return FakeNvml.load(FIXTURE)


def test_readings_units_and_throttle_bits(nvml):
    src = NvmlSource("hgx1", nvml=nvml)
    batches = dict(src.collect(now()))
    s = {r["gpu_index"]: r for r in batches["samples"].to_pylist()}
    assert batches["samples"].schema.equals(SCHEMAS["samples"]) and len(s) == 8
    g3 = s[3]
    assert g3["node"] == "hgx1" and g3["gpu_uuid"].startswith("GPU-")
    assert g3["power_w"] == pytest.approx(689.001)  # mW -> W
    assert g3["energy_j"] == pytest.approx(834567890.123)  # mJ -> J
    assert g3["mem_used_mib"] == 73950 and g3["mem_temp_c"] == 84 and g3["temp_c"] == 71
    assert g3["throttle_thermal"] is True and g3["throttle_power"] is False  # 0x20
    assert s[2]["throttle_power"] is True  # 0x4 SW power cap
    assert g3["ecc_sbe_volatile"] == 2 and g3["xid_last"] == 0
    assert batches["events"].num_rows == 0
    gpus = src.topology()["gpus"].to_pylist()
    assert gpus[0]["tdp_w"] == 700 and gpus[0]["memory_mib"] == 81559
    assert gpus[0]["model"] == "NVIDIA H100 80GB HBM3"


def test_unsupported_is_null_and_lost_gpu_is_an_event(nvml):
    src = NvmlSource("hgx1", nvml=nvml)
    src.collect(now())
    nvml.unsupported(0, "nvmlDeviceGetPowerUsage")
    nvml.unsupported(0, "nvmlDeviceGetFieldValues(82)")
    nvml.set(1, "nvmlDeviceGetFieldValues(82)", None)  # field answered with an error
    nvml.lose(5)
    b = dict(src.collect(now()))
    s = {r["gpu_index"]: r for r in b["samples"].to_pylist()}
    assert 5 not in s and len(s) == 7
    assert s[0]["power_w"] is None and s[0]["mem_temp_c"] is None and s[0]["temp_c"] == 62
    assert s[1]["mem_temp_c"] is None
    (lost,) = b["events"].to_pylist()
    assert (lost["kind"], lost["gpu_index"]) == ("lost", 5) and lost["gpu_uuid"]
    assert dict(src.collect(now()))["events"].num_rows == 0  # reported once


def test_xids_are_polled_without_blocking_and_counters_raise_events(nvml):
    src = NvmlSource("hgx1", nvml=nvml)
    src.collect(now())
    nvml.push_xid(1, 79)
    nvml.push_xid(1, 48)
    nvml.set(3, "nvmlDeviceGetTotalEccErrors(1,1)", 1)
    nvml.set(3, "nvmlDeviceGetRemappedRows", [1, 1, 0, 0])
    nvml.set(4, "nvmlDeviceGetPcieReplayCounter", 12)
    b = dict(src.collect(now()))
    ev = {(e["kind"], e["gpu_index"], e["code"]): e for e in b["events"].to_pylist()}
    assert set(ev) == {("xid", 1, 79), ("xid", 1, 48), ("ecc", 3, 0), ("row_remap", 3, 0),
                       ("pcie_replay", 4, 0)}
    assert "+1 double-bit" in ev[("ecc", 3, 0)]["detail"]
    assert {r["gpu_index"]: r["xid_last"] for r in b["samples"].to_pylist()}[1] == 48


def test_record_writes_a_replayable_fixture(nvml, tmp_path):
    path = tmp_path / "rec.json"
    assert record(str(path), nvml=nvml) == 8
    doc = json.loads(path.read_text())
    assert doc["devices"][3]["nvmlDeviceGetTemperature(0)"] == 71
    again = NvmlSource("n", nvml=FakeNvml(doc))
    one = dict(NvmlSource("n", nvml=FakeNvml.load(FIXTURE)).collect(now()))["samples"]
    two = dict(again.collect(now()))["samples"]
    assert one.drop(["ts"]).equals(two.drop(["ts"]))


def _driver_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _driver_present(), reason="no NVIDIA driver/GPU on this machine")
def test_real_gpu(tmp_path):  # pragma: no cover - needs a GPU
    src = NvmlSource("real")
    b = dict(src.collect(now()))
    assert b["samples"].num_rows >= 1
    row = b["samples"].to_pylist()[0]
    assert row["gpu_uuid"].startswith("GPU-") and row["temp_c"] is not None
    assert main(["--record", str(tmp_path / "real.json")]) == 0
    src.close()


REAL = Path(__file__).parent / "fixtures" / "nvml"


@pytest.mark.parametrize("state", ["idle", "load"])
def test_recordings_from_a_real_h100_read_in_the_right_units(state):
    """Replays of `python -m collector.nvml --record` on an H100 (driver 580.159.04),
    idle and during bf16 matrix products; nvidia-smi showed 697.6 W, 99 %, 58 C, 1365 MHz
    and clocks-event reason 0x4 (software power cap) at the loaded recording."""
    src = NvmlSource("h100", nvml=FakeNvml.load(REAL / f"h100_real_{state}.json"))
    (row,) = dict(src.collect(now()))["samples"].to_pylist()
    (gpu,) = src.topology()["gpus"].to_pylist()
    assert (gpu["model"], gpu["tdp_w"], gpu["memory_mib"]) == ("NVIDIA H100 80GB HBM3", 700,
                                                               81559)
    assert row["gpu_uuid"].startswith("GPU-8f17bdae") and row["sm_active_pct"] is None
    assert row["throttle_thermal"] is False
    if state == "idle":  # 0x1: GPU idle, neither a power nor a thermal slowdown
        assert row["util_pct"] == 0 and row["power_w"] == pytest.approx(70.612)
        assert (row["temp_c"], row["mem_temp_c"], row["sm_clock_mhz"]) == (31, 34, 345)
        assert row["energy_j"] == pytest.approx(2912.177) and row["throttle_power"] is False
        assert row["mem_used_mib"] == pytest.approx(480.0)
    else:  # power-capped at the 700 W limit
        assert row["util_pct"] == 99 and row["power_w"] == pytest.approx(698.101)
        assert row["power_w"] <= gpu["tdp_w"] and row["throttle_power"] is True
        assert (row["temp_c"], row["mem_temp_c"], row["sm_clock_mhz"]) == (59, 51, 1365)
        assert row["energy_j"] == pytest.approx(47346.135)

"""Direct scrapes of dcgm-exporter endpoints: concurrency, timeouts, per-target status,
and texts as real exporters print them (from dcgm-exporter's docs and issue tracker)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from collector.file_sd import parse_static
from collector.scrape import DcgmScrapeSource, fetch_all
from tests.support.exporter_texts import V100
from tests.support.prometheus import Exporters

TS = datetime.now(UTC).replace(tzinfo=None, microsecond=0)

# dcgm-exporter 4.x with MIG and a lowercase `hostname` label that is the exporter pod's
# name (NVIDIA/dcgm-exporter#736); consumer GPUs leave DCGM_FI_DEV_MEMORY_TEMP at 0 or
# out (#460); a "not supported" field is DCGM's blank value; profiling fields are absent.
MIG_K8S = """# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3",pci_bus_id="00000000:65:00.0",device="nvidia0",modelName="NVIDIA A30",GPU_I_PROFILE="1g.6gb",GPU_I_ID="6",hostname="dcgm-exporter-wwwjh",container="triton-server",namespace="default",pod="triton-server-f7cb5d77-2w5b2"} 3744
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3",pci_bus_id="00000000:65:00.0",device="nvidia0",modelName="NVIDIA A30",GPU_I_PROFILE="1g.6gb",GPU_I_ID="3",hostname="dcgm-exporter-wwwjh"} 12
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in °C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-fc60126e-514d-3522-2828-c5daa8e99d85",pci_bus_id="00000000:B1:00.0",device="nvidia1",modelName="NVIDIA RTX 2000 Ada Generation",hostname="dcgm-exporter-wwwjh"} 44
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3",pci_bus_id="00000000:65:00.0",device="nvidia0",modelName="NVIDIA A30",GPU_I_PROFILE="1g.6gb",GPU_I_ID="3",hostname="dcgm-exporter-wwwjh"} 50
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-fc60126e-514d-3522-2828-c5daa8e99d85",device="nvidia1",modelName="NVIDIA RTX 2000 Ada Generation",hostname="dcgm-exporter-wwwjh"} 140737488355328
"""


@pytest.fixture
def exporters():
    ex = Exporters(3, lambda i: [V100, MIG_K8S, "oops not metrics {"][i])
    yield ex
    ex.close()


def test_texts_as_exporters_print_them(exporters):
    v100, mig, bad = exporters.addresses
    src = DcgmScrapeSource(",".join(exporters.addresses))
    b = dict(src.collect(TS))
    rows = {(r["node"], r["gpu_index"]): r for r in b["samples"].to_pylist()}
    assert rows[("r6i3n0", 0)]["temp_c"] == 33 and rows[("r6i3n0", 1)]["temp_c"] is None
    # lowercase hostname is read; MIG instances' memory adds up; blank power is NULL.
    a30 = rows[("dcgm-exporter-wwwjh", 0)]
    assert a30["mem_used_mib"] == 3744 + 12 and a30["temp_c"] == 50
    assert rows[("dcgm-exporter-wwwjh", 1)]["power_w"] is None
    assert a30["sm_active_pct"] is None  # profiling absent
    assert src.status[v100].up and src.status[mig].up
    assert not src.status[bad].up and "invalid" in src.status[bad].last_error


def test_node_label_from_file_sd_wins_over_pod_hostname(exporters, tmp_path):
    mig = exporters.addresses[1]
    f = tmp_path / "targets.json"
    f.write_text(f'[{{"targets": ["{mig}"], "labels": {{"node": "gpu042"}}}}]')
    b = dict(DcgmScrapeSource(str(f)).collect(TS))
    assert set(b["samples"]["node"].to_pylist()) == {"gpu042"}


def test_timeouts_and_refusals_are_per_target():
    slow = Exporters(1, lambda i: V100, delay_s=2.0)
    fast = Exporters(1, lambda i: V100)
    try:
        targets = slow.addresses + fast.addresses + ["127.0.0.1:1"]
        started = time.perf_counter()
        got = fetch_all(parse_static(",".join(targets)), timeout_s=0.5)
        assert time.perf_counter() - started < 1.5  # concurrent, bounded by the timeout
        assert [g.text is not None for g in got] == [False, True, False]
        assert "Timeout" in got[0].error or "timed out" in got[0].error.lower()
        src = DcgmScrapeSource(",".join([slow.addresses[0], "127.0.0.1:1"]), timeout_s=0.5)
        with pytest.raises(RuntimeError, match="all 2 targets failed"):
            src.collect(TS)
    finally:
        slow.close()
        fast.close()

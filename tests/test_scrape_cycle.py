"""One bad exporter among many costs that exporter only (issue 12), over real HTTP.

`gpulens serve` (the real service, in this process) scrapes thirteen local exporters every
second: eight healthy nodes, a MIG node (dcgm-exporter#317's page), one serving a page
cut inside a label set, one that answers after the scrape timeout, one address that
refuses connections, and one node whose values are outside their columns. Every other node's rows reach the warehouse, the broken
targets are down in /healthz with their reasons, and what was refused is counted there.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from gpulens.config import load
from gpulens.service import Service
from tests.support.prometheus import Exporters

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GOOD = 8
MIG = (Path(__file__).parent / "fixtures" / "dcgm" / "mig_a30_issue317.txt").read_text()


def page(node: str, xid: str = "0", ecc: str = "0", temp: str = "50") -> str:
    lines = []
    for gpu in range(2):
        lab = f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"'
        lines += [f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} {temp}",
                  f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} 301.5",
                  f"DCGM_FI_DEV_XID_ERRORS{{{lab}}} {xid}",
                  f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{lab}}} {ecc}"]
    return "\n".join(lines) + "\n"


def texts(i: int) -> str:
    if i < GOOD:
        return page(f"gpu{i:03d}")
    if i == GOOD:  # cut inside the label set of its only line
        return 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="cut001"'
    if i == GOOD + 1:
        return page("odd001", xid="4294967295", ecc="1e18", temp="9999")
    return MIG


@pytest.fixture
def fleet():
    healthy = Exporters(GOOD + 3, texts)
    slow = Exporters(1, lambda i: page("slow001"), delay_s=3.0)
    yield healthy, slow
    slow.close()
    healthy.close()


def healthz(url: str) -> dict:
    try:
        with urllib.request.urlopen(url + "healthz", timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:  # 503 while degraded: the body is the same
        return json.load(exc)


def test_one_broken_exporter_among_many_costs_that_exporter_only(fleet, tmp_path):
    healthy, slow = fleet
    addresses = healthy.addresses + slow.addresses + ["127.0.0.1:1"]
    cut, odd = healthy.addresses[GOOD], healthy.addresses[GOOD + 1]
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(
        f'[service]\nport = 0\ndb = "{tmp_path / "w.duckdb"}"\n'
        f'[collect]\nsource = "dcgm"\ninterval_s = 1.0\n'
        f'[dcgm]\ntargets = "{",".join(addresses)}"\ntimeout_s = 0.5\n')
    svc = Service(load(cfg, env={}))
    url = svc.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            report = healthz(url)
            dcgm = report["sources"].get("dcgm", {})
            if dcgm.get("last_success") and dcgm.get("targets"):
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"no successful dcgm cycle: {report}")
        reader = svc.warehouse.reader()
        stored = reader.execute(
            "SELECT node, gpu_index, temp_c, power_w, xid_last, ecc_sbe_volatile "
            "FROM gpu_samples WHERE node NOT LIKE 'yg-%'").fetchall()
        mig = reader.execute(
            "SELECT s.mem_used_mib, count(DISTINCT i.gpu_i_id) FROM gpu_samples s "
            "JOIN gpu_mig_samples i USING (ts, node, gpu_index) "
            "WHERE s.gpu_index = 0 GROUP BY ALL").fetchall()
    finally:
        svc.shutdown()

    nodes = {(r[0], r[1]) for r in stored}
    assert {(f"gpu{i:03d}", g) for i in range(GOOD) for g in range(2)} <= nodes
    assert {n for n, _ in nodes} == {f"gpu{i:03d}" for i in range(GOOD)} | {"odd001"}
    assert all(r[2] == 50 and r[3] == 301.5 for r in stored if r[0].startswith("gpu"))
    # out-of-range values cost those values: the rows stay, the readings are NULL
    odd_rows = [r for r in stored if r[0] == "odd001"]
    assert odd_rows and all(r[2:] == (None, 301.5, None, None) for r in odd_rows)

    assert dcgm["last_error"] is None  # the cycle itself never failed
    targets = dcgm["targets"]
    assert targets["total"] == GOOD + 5 and targets["up"] == GOOD + 2
    down = targets["down"]
    assert set(down) == {cut, slow.addresses[0], "127.0.0.1:1"}
    assert "truncated" in down[cut] and "DCGM_FI_DEV_GPU_TEMP" in down[cut]
    assert "timed out" in down[slow.addresses[0]].lower() or "timeout" in down[
        slow.addresses[0]].lower()
    assert "refused" in down["127.0.0.1:1"].lower() or "connect" in down["127.0.0.1:1"].lower()
    assert odd not in down
    assert mig and all(row == (12, 4) for row in mig)  # 4 instances x 3 MiB, each kept
    dropped = dcgm["dropped"]
    for reason in ("value: xid_last outside int32", "value: ecc_sbe_volatile beyond 2^53",
                   "value: temp_c above 150", "line: truncated (no line feed after the "
                   "last line)"):
        assert dropped.get(reason, 0) >= 1, (reason, dropped)
    assert dcgm["dropped_total"] == sum(dropped.values())

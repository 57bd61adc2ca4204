"""The BMC source against real emulators (issue 21): sushy-static (sushy-tools) serving
Redfish mockups, and OpenIPMI's ipmi_sim driven by the real ipmitool.

ipmi_sim implements no DCMI commands: ``dcmi power reading`` gets completion code 0xC1
(invalid command) from it. These tests therefore prove the IPMI path up to the BMC's
answer (an RMCP+ session opened with the password passed through the environment, the
BMC's refusal reported for that node only); the DCMI text itself is parsed in
tests/test_bmc.py from ipmitool's own output layout."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from collector.bmc import parse_targets
from collector.bmc_source import BmcSource, TransportError, read_ipmi, target_list
from tests.support.bmc import IPMI_PASSWORD, IPMI_USER, IpmiSim, SushyStatic
from tests.support.integration import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "bmc"
T = datetime(2026, 11, 23, 0, 0)


@pytest.fixture
def redfish():
    servers = [SushyStatic(FIXTURES / "redfish-power")]
    try:
        servers.append(SushyStatic(FIXTURES / "redfish-environment"))
        yield [s.address for s in servers]
    finally:
        for s in servers:
            s.stop()


@pytest.fixture
def ipmi_sim(tmp_path):
    sim = IpmiSim(tmp_path / "ipmi_sim")
    try:
        yield sim.address
    finally:
        sim.stop()


def test_redfish_mockups_give_node_power_and_a_dead_bmc_costs_its_node_only(redfish, tmp_path):
    from warehouse import Warehouse

    legacy, modern = redfish
    spec = (f"gpu001=http://{legacy}, gpu002=http://{modern}, "
            f"gpu003=http://127.0.0.1:{free_port()}")
    source = BmcSource(target_list(spec), interval_s=60, timeout_s=5, username="root",
                       password="calvin")
    [(kind, table)] = source.collect(T)
    rows = {r["node"]: r for r in table.to_pylist()}
    assert rows["gpu001"]["total_power_w"] == 344.0 and rows["gpu001"]["energy_j"] is None
    # EnvironmentMetrics wins over the deprecated Power (2519 W) and brings the counter
    assert rows["gpu002"]["total_power_w"] == 2520.5
    assert rows["gpu002"]["energy_j"] == pytest.approx(18234.75 * 3.6e6)
    assert set(rows) == {"gpu001", "gpu002"} and {r["source"] for r in rows.values()} == {
        "redfish"}
    assert list(source.targets_down) == [f"gpu003=redfish://127.0.0.1:{spec.rsplit(':', 1)[1]}"]
    # a second cycle reads the remembered document and gives the same
    assert source.collect(T)[0][1].num_rows == 2
    wh = Warehouse(str(tmp_path / "w.duckdb"))
    try:
        wh.ingest(kind, table).result()
        got = wh.reader().execute("SELECT node, total_power_w, source FROM node_power "
                                  "ORDER BY node").fetchall()
        assert got == [("gpu001", 344.0, "redfish"), ("gpu002", 2520.5, "redfish")]
    finally:
        wh.close()


def test_redfish_chassis_choice(redfish):
    _, modern = redfish
    source = BmcSource(target_list(f"n1=http://{modern}#Enclosure"), interval_s=60,
                       timeout_s=5, username="", password="")
    assert source.collect(T)[0][1].num_rows == 0
    assert "no chassis 'Enclosure' reports power" in source.targets_down[
        f"n1=redfish://{modern}"]


def test_ipmi_sim_session_opens_with_the_environment_password_and_its_refusal_is_named(
        ipmi_sim, redfish):
    [target] = parse_targets(f"gpu009=ipmi://{ipmi_sim}")
    with pytest.raises(TransportError, match=r"Invalid command \(c1\)"):  # no DCMI in ipmi_sim
        read_ipmi(target, username=IPMI_USER, password=IPMI_PASSWORD, timeout_s=20,
                  cipher_suite=3)
    with pytest.raises(TransportError, match="ipmitool exit 1") as wrong:
        read_ipmi(target, username=IPMI_USER, password="wrong", timeout_s=20, cipher_suite=3)
    assert "Invalid command" not in str(wrong.value)  # refused at the session, not DCMI
    source = BmcSource(target_list(f"gpu009=ipmi://{ipmi_sim}, gpu001=http://{redfish[0]}"),
                       interval_s=60, timeout_s=20, username=IPMI_USER,
                       password=IPMI_PASSWORD, cipher_suite=3)
    table = source.collect(T)[0][1]
    assert table.column("node").to_pylist() == ["gpu001"]
    assert "Invalid command" in source.targets_down[f"gpu009=ipmi://{ipmi_sim}"]
    assert IPMI_PASSWORD not in repr(source.targets_down)


def test_node_energy_from_the_redfish_energy_counter_through_the_emulator(tmp_path):
    """The BMC's EnergykWh read from a served mockup every 15 minutes (the counter moves
    0.6 kWh a step: 2,400 W, while PowerWatts keeps saying 2,520.5 W) gives the node-hour
    2.4 kWh, and the Energy page says it came from the BMC's counter."""
    import json
    import shutil
    from datetime import timedelta

    from dashboard.figures.energy import node_energy_method
    from tests.support.runs import ingest, run_refresh, samples, topology
    from warehouse import Warehouse
    from warehouse.analytics import Options
    from warehouse.queries import energy as qe

    mockup = tmp_path / "mockup"
    shutil.copytree(FIXTURES / "redfish-environment", mockup)
    doc = mockup / "Chassis" / "1U" / "EnvironmentMetrics" / "index.json"
    metrics = json.loads(doc.read_text())
    server = SushyStatic(mockup)
    wh = Warehouse(str(tmp_path / "w.duckdb"))
    try:
        topology(wh, nodes=1)
        source = BmcSource(target_list(f"n0=http://{server.address}"), interval_s=900,
                           timeout_s=5, username="root", password="calvin")
        for k in range(6):  # 23:45 .. 1:00
            metrics["EnergykWh"]["Reading"] = 18234.75 + 0.6 * k
            doc.write_text(json.dumps(metrics))  # sushy-static reads the file per request
            [(kind, table)] = source.collect(T - timedelta(minutes=15) + k * timedelta(
                minutes=15))
            wh.ingest(kind, table).result()
        ingest(wh, samples("n0", 0, T, 240, 600))
        run_refresh(wh, now=T + timedelta(hours=2))
        df = qe.energy_by(wh.reader(), start=T, end=T + timedelta(hours=1), by="node",
                          opts=Options(node_overhead_w=1500.0, pue=1.0))
        assert df["it_kwh"].tolist() == pytest.approx([2.4])
        assert df["gpu_kwh"].tolist() == pytest.approx([0.6])
        assert node_energy_method(df) == "node energy from the BMC energy counter"
    finally:
        wh.close()
        server.stop()

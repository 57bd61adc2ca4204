"""The BMC source against real emulators (issue 21): sushy-static (sushy-tools) serving
Redfish mockups, and OpenIPMI's ipmi_sim driven by the real ipmitool.

ipmi_sim implements no DCMI commands: ``dcmi power reading`` gets completion code 0xC1
(invalid command) from it. The source then reads the BMC's sensor records (``sdr elist
full``): tests/support/bmc.py gives the simulated BMC power sensors whose values the
tests change between cycles. The DCMI text itself is parsed in tests/test_bmc.py from
ipmitool's own output layout."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from collector.bmc import parse_targets
from collector.bmc_source import BmcSource, TransportError, read_ipmi, target_list
from tests.support.bmc import IPMI_PASSWORD, IPMI_USER, POWER_SENSORS, IpmiSim, SushyStatic
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
    sim = IpmiSim(tmp_path / "ipmi_sim", POWER_SENSORS)
    try:
        yield sim
    finally:
        sim.stop()


def _logging_ipmitool(tmp_path: Path) -> Path:
    """The real ipmitool behind a script that records each command line."""
    script = tmp_path / "ipmitool-logged"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/argv\nexec {shutil.which("ipmitool")} "$@"\n')
    script.chmod(0o755)
    return script


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


def test_ipmi_sim_session_with_the_environment_password_and_a_bmc_without_power_sensors(
        tmp_path, redfish):
    sim = IpmiSim(tmp_path / "bare")  # no sensor records at all
    try:
        [target] = parse_targets(f"gpu009=ipmi://{sim.address}")
        # DCMI refused (no DCMI in ipmi_sim), then an empty SDR: both named
        with pytest.raises(ValueError, match=r"Invalid command \(c1\).*SDR: .*no sensor line"):
            read_ipmi(target, username=IPMI_USER, password=IPMI_PASSWORD, timeout_s=20,
                      cipher_suite=3)
        with pytest.raises(TransportError, match="ipmitool exit 1") as wrong:
            read_ipmi(target, username=IPMI_USER, password="wrong", timeout_s=20,
                      cipher_suite=3)
        # refused at the session: no DCMI refusal, so no second try through the SDR
        assert "Invalid command" not in str(wrong.value) and "SDR" not in str(wrong.value)
        source = BmcSource(target_list(f"gpu009=ipmi://{sim.address}, "
                                       f"gpu001=http://{redfish[0]}"),
                           interval_s=60, timeout_s=20, username=IPMI_USER,
                           password=IPMI_PASSWORD, cipher_suite=3)
        table = source.collect(T)[0][1]
        assert table.column("node").to_pylist() == ["gpu001"]
        assert "Invalid command" in source.targets_down[f"gpu009=ipmi://{sim.address}"]
        assert IPMI_PASSWORD not in repr(source.targets_down)
    finally:
        sim.stop()


def test_ipmi_sim_power_sensor_reaches_node_power_and_a_dead_bmc_costs_its_node_only(
        ipmi_sim, tmp_path):
    """DCMI refused, the SDR's 'Pwr Consumption' read in watts; its value changed between
    cycles arrives; the next cycles ask the SDR at once; a dead BMC costs its node."""
    from warehouse import Warehouse

    dead = f"127.0.0.1:{free_port()}"  # nothing answers IPMI there
    targets = [f"gpu001=ipmi://{ipmi_sim.address}", f"gpu002=ipmi://{dead}"]
    source = BmcSource(lambda: parse_targets(", ".join(targets)), interval_s=60, timeout_s=5,
                       username=IPMI_USER, password=IPMI_PASSWORD, cipher_suite=3,
                       ipmitool=str(_logging_ipmitool(tmp_path)))
    wh = Warehouse(str(tmp_path / "w.duckdb"))
    try:
        [(kind, first)] = source.collect(T)
        assert first.to_pylist() == [{"ts": T, "node": "gpu001", "total_power_w": 2525.0,
                                      "energy_j": None, "source": "ipmi"}]
        assert list(source.targets_down) == [f"gpu002=ipmi://{dead}"]
        assert source.answered_by == {f"gpu001=ipmi://{ipmi_sim.address}": "sdr"}
        wh.ingest(kind, first).result()
        targets.pop()  # the dead BMC's timeout is proved; the next cycles read one
        for k, watts in enumerate((2600, 5450), start=1):
            ipmi_sim.set_value(0x77, watts)
            [(kind, table)] = source.collect(T + k * timedelta(minutes=1))
            assert table.column("total_power_w").to_pylist() == [float(watts)]
            wh.ingest(kind, table).result()
        got = wh.reader().execute("SELECT total_power_w, source FROM node_power "
                                  "WHERE node = 'gpu001' ORDER BY ts").fetchall()
        assert got == [(2525.0, "ipmi"), (2600.0, "ipmi"), (5450.0, "ipmi")]
    finally:
        wh.close()
    argv = (tmp_path / "argv").read_text().splitlines()
    live = [a for a in argv if ipmi_sim.address.rsplit(":", 1)[1] in a]
    # DCMI asked once, refused; the SDR read every cycle after
    assert [a.split("-E ", 1)[1] for a in live] == [
        "dcmi power reading", "sdr elist full", "sdr elist full", "sdr elist full"]
    assert all(IPMI_PASSWORD not in a for a in argv)
    assert IPMI_PASSWORD not in repr(source.targets_down)


def test_ipmi_sim_named_sensors_are_summed_and_a_disabled_one_is_refused(ipmi_sim):
    [target] = parse_targets(f"gpu001=ipmi://{ipmi_sim.address}")
    ask = {"username": IPMI_USER, "password": IPMI_PASSWORD, "timeout_s": 20,
           "cipher_suite": 3}
    reading = read_ipmi(target, **ask, power_sensor="PS1 Input Power, PS2 Input Power")
    assert (reading.power_w, reading.method) == (2500.0, "sdr")
    ipmi_sim.set_value(0x64, 1500)
    assert read_ipmi(target, **ask, method="sdr",
                     power_sensor="ps1 input power,PS2 Input Power").power_w == 2740.0
    with pytest.raises(ValueError, match="'PS3 Input Power' has no reading in watts"):
        read_ipmi(target, **ask, power_sensor="PS1 Input Power,PS3 Input Power")
    with pytest.raises(ValueError, match="'Inlet Temp' has no reading in watts"):
        read_ipmi(target, **ask, power_sensor="Inlet Temp")


def test_node_energy_from_the_redfish_energy_counter_through_the_emulator(tmp_path):
    """The BMC's EnergykWh read from a served mockup every 15 minutes (the counter moves
    0.6 kWh a step: 2,400 W, while PowerWatts keeps saying 2,520.5 W) gives the node-hour
    2.4 kWh, and the Energy page says it came from the BMC's counter."""
    import json

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

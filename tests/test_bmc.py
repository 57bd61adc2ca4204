"""Node power from the BMC (issue 21): the pure parsers and the source's accounting.

The emulator tests (sushy-static, ipmi_sim) are in tests/test_bmc_emulators.py."""

from __future__ import annotations

import json
import math
import os
import stat
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector import bmc
from collector.bmc_source import REFUSED, BmcSource, read_ipmi, target_list
from gpulens.service import _source_details

FIXTURES = Path(__file__).parent / "fixtures" / "bmc"
T = datetime(2026, 11, 23, 0, 0)


def _doc(mockup: str, path: str):
    return json.loads((FIXTURES / mockup / path / "index.json").read_text())


def test_ipmitool_and_freeipmi_readings():
    assert bmc.parse_dcmi((FIXTURES / "ipmitool_dcmi_power_reading.txt").read_text()) \
        == bmc.PowerReading(2520.0)
    assert bmc.parse_dcmi((FIXTURES / "freeipmi_dcmi_power_statistics.txt").read_text()) \
        == bmc.PowerReading(2520.0)
    # an active zero is the BMC's answer (a node switched off), not a missing one
    assert bmc.parse_dcmi("Instantaneous power reading: 0 Watts\n"
                          "Power reading state is: activated\n").power_w == 0.0


@pytest.mark.parametrize("text, message", [
    ("    Instantaneous power reading:   412 Watts\n    Power reading state is:  deactivated\n",
     "not active"),
    ("Current Power : 412 Watts\nPower Measurement : Not Active\n", "not active"),
    ("Instantaneous power reading: 65535000 Watts\n", "not 0-30000 W"),
    ("Instantaneous power reading: -5 Watts\n", "not 0-30000 W"),
    ("Instantaneous power reading: nan Watts\n", "not 0-30000 W"),
    ("Instantaneous power reading: n/a Watts\n", "not a number"),
    ("Error: Invalid completion code received: Invalid command\n", "found 0"),
])
def test_dcmi_refuses_what_is_no_reading(text, message):
    with pytest.raises(ValueError, match=message) as err:
        bmc.parse_dcmi(text)
    assert repr(text[:20])[1:-1] in str(err.value)  # names the input


def test_redfish_power_and_environment_metrics():
    assert bmc.chassis_members(_doc("redfish-environment", "Chassis")) == [
        "/redfish/v1/Chassis/Enclosure", "/redfish/v1/Chassis/1U"]
    assert bmc.chassis_links(_doc("redfish-environment", "Chassis/Enclosure")) == {}
    assert bmc.chassis_links(_doc("redfish-environment", "Chassis/1U")) == {
        "environment_metrics": "/redfish/v1/Chassis/1U/EnvironmentMetrics",
        "power": "/redfish/v1/Chassis/1U/Power"}
    assert bmc.parse_power(_doc("redfish-power", "Chassis/1U/Power")) == bmc.PowerReading(344.0)
    env = bmc.parse_environment_metrics(_doc("redfish-environment", "Chassis/1U/EnvironmentMetrics"))
    assert env.power_w == 2520.5 and env.energy_j == pytest.approx(18234.75 * 3.6e6)
    # energy alone is a reading; PowerControl entries without a value are skipped
    assert bmc.parse_environment_metrics({"EnergykWh": {"Reading": 1.0}}) == \
        bmc.PowerReading(None, 3.6e6)
    assert bmc.parse_power({"PowerControl": [{"PowerConsumedWatts": None},
                                             {"PowerConsumedWatts": 12.5}]}).power_w == 12.5


@pytest.mark.parametrize("parse, doc, message", [
    (bmc.parse_power, {"PowerControl": [{"Name": "x"}]}, "no PowerControl has"),
    (bmc.parse_power, {"PowerControl": [{"PowerConsumedWatts": True}]}, "not 0-30000"),
    (bmc.parse_power, [], "not a JSON object"),
    (bmc.parse_environment_metrics, {"PowerWatts": {"Reading": None}}, "neither"),
    (bmc.parse_environment_metrics, {"EnergykWh": {"Reading": -1}}, "non-negative"),
    (bmc.parse_environment_metrics, {"PowerWatts": {"Reading": "1e400"}}, "not 0-30000"),
    (bmc.chassis_members, {"Members": [{"@odata.id": 3}]}, "no link"),
])
def test_redfish_refuses_what_is_no_reading(parse, doc, message):
    with pytest.raises(ValueError, match=message):
        parse(doc)


@pytest.mark.parametrize("link", [".attacker.example/redfish/v1/Chassis/1",
                                  "@attacker.example/x", "https://attacker.example/x", ""])
def test_redfish_links_are_paths_on_the_bmc_itself(link):
    # the reader appends a link to the BMC's address and sends the password with it:
    # "bmc1" + ".attacker.example/..." would be another host (issue 21 review)
    with pytest.raises(ValueError, match="no link"):
        bmc.chassis_members({"Members": [{"@odata.id": link}]})
    assert bmc.chassis_links({"Power": {"@odata.id": link},
                              "EnvironmentMetrics": {"@odata.id": link}}) == {}


def test_targets():
    ts = bmc.parse_targets("gpu001=ipmi://10.0.0.1, gpu002=redfish://bmc2:8443#1U\n"
                           "# a comment\ngpu003=http://[::1]:8000")
    assert [(t.node, t.protocol, t.address, t.scheme, t.chassis) for t in ts] == [
        ("gpu001", "ipmi", "10.0.0.1", "https", ""),
        ("gpu002", "redfish", "bmc2:8443", "https", "1U"),
        ("gpu003", "redfish", "[::1]:8000", "http", "")]
    with pytest.raises(ValueError, match="bmc.targets: 'gpu001=ssh://x' is not"):
        bmc.parse_targets("gpu001=ssh://x")
    with pytest.raises(ValueError, match="node 'a' has two BMCs"):
        bmc.parse_targets("a=ipmi://x,a=ipmi://y")


def test_target_file_is_reread(tmp_path):
    f = tmp_path / "bmcs.txt"
    f.write_text("gpu001=ipmi://h1\n")
    targets = target_list(f"@{f}")
    assert [t.node for t in targets()] == ["gpu001"]
    f.write_text("gpu001=ipmi://h1\ngpu002=ipmi://h2\n")
    assert [t.node for t in targets()] == ["gpu001", "gpu002"]
    with pytest.raises(ValueError, match="cannot read"):
        target_list(f"@{tmp_path / 'missing'}")()


# -------------------------------------------------------------------- property tests

_reading_line = st.builds(
    lambda label, value, unit: f"{label}: {value} {unit}",
    st.sampled_from(["Instantaneous power reading", "Current Power", "Power"]),
    st.one_of(st.integers(-10, 10**9).map(str), st.floats(allow_nan=True).map(str),
              st.text(max_size=6)),
    st.sampled_from(["Watts", "watts", "W", ""]))
_dcmi_text = st.lists(st.one_of(_reading_line, st.text(max_size=40),
                                st.sampled_from(["Power reading state is: deactivated",
                                                 "Power Measurement : Active"])),
                      max_size=6).map("\n".join)


@pytest.mark.property
@given(_dcmi_text)
def test_property_dcmi_gives_a_plausible_reading_or_a_value_error_naming_it(text):
    try:
        reading = bmc.parse_dcmi(text)
    except ValueError as exc:
        assert "DCMI reading" in str(exc) and repr(text[:20])[1:-1] in str(exc)
        return
    assert 0 <= reading.power_w <= bmc.MAX_NODE_W and math.isfinite(reading.power_w)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12)
_sensor = st.one_of(_json, st.builds(lambda r: {"Reading": r}, _json))
_redfish = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={"PowerWatts": _sensor, "EnergykWh": _sensor}),
    st.fixed_dictionaries({"PowerControl": st.lists(st.one_of(_json, st.fixed_dictionaries(
        {"PowerConsumedWatts": _json})), max_size=3)}),
    st.fixed_dictionaries({"Members": st.lists(st.one_of(_json, st.builds(
        lambda x: {"@odata.id": x}, _json)), max_size=3)}))


@pytest.mark.property
@given(_redfish, st.sampled_from([bmc.parse_power, bmc.parse_environment_metrics,
                                  bmc.chassis_members, bmc.chassis_links]))
def test_property_redfish_gives_a_reading_or_a_value_error_naming_it(doc, parse):
    try:
        out = parse(doc)
    except ValueError as exc:
        assert str(exc).startswith("Redfish ")
        return
    if isinstance(out, bmc.PowerReading):
        assert out.power_w is None or 0 <= out.power_w <= bmc.MAX_NODE_W
        assert out.energy_j is None or (math.isfinite(out.energy_j) and out.energy_j >= 0)


@pytest.mark.property
@given(st.text(max_size=60))
def test_property_targets_or_a_value_error_naming_the_setting(text):
    try:
        targets = bmc.parse_targets(text)
    except ValueError as exc:
        assert str(exc).startswith("bmc.targets: ")
        return
    assert all(t.protocol in bmc.PROTOCOLS and t.node for t in targets)


# -------------------------------------------------------------- the source, ipmitool

def _fake_ipmitool(tmp_path: Path) -> Path:
    """A stand-in for ipmitool: records its argv and IPMI_PASSWORD, answers per host."""
    script = tmp_path / "ipmitool"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/argv
echo "$IPMI_PASSWORD" >> {tmp_path}/env
case "$*" in
  *good*) cat {FIXTURES}/ipmitool_dcmi_power_reading.txt ;;
  *junk*) echo "Instantaneous power reading: 99999999 Watts" ;;
  *) echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; exit 1 ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_one_bad_bmc_costs_its_node_only_and_the_password_stays_off_the_command_line(
        tmp_path):
    tool = _fake_ipmitool(tmp_path)
    source = BmcSource(target_list("n1=ipmi://good:623,n2=ipmi://junk,n3=ipmi://down"),
                       interval_s=60, timeout_s=5, username="admin",
                       password="s3cret-pw", ipmitool=str(tool))
    [(kind, table)] = source.collect(T)
    assert kind == "node_power"
    assert table.to_pylist() == [{"ts": T, "node": "n1", "total_power_w": 2520.0,
                                  "energy_j": None, "source": "ipmi"}]
    assert set(source.targets_down) == {"n2=ipmi://junk", "n3=ipmi://down"}
    assert "not 0-30000 W" in source.targets_down["n2=ipmi://junk"]
    assert "RMCP+ session" in source.targets_down["n3=ipmi://down"]
    argv = (tmp_path / "argv").read_text()
    assert "s3cret-pw" not in argv and "-E" in argv and "-p 623" in argv
    assert (tmp_path / "env").read_text().split() == ["s3cret-pw"] * 3
    details = _source_details(source)
    assert details["dropped"] == {REFUSED: 1}
    assert details["targets"]["total"] == 3 and details["targets"]["up"] == 1
    assert "s3cret-pw" not in json.dumps(details)


def test_missing_ipmitool_is_a_down_target(tmp_path):
    target = bmc.parse_targets("n1=ipmi://h")[0]
    with pytest.raises(Exception, match="cannot run"):
        read_ipmi(target, username="u", password="p", timeout_s=1,
                  ipmitool=os.fspath(tmp_path / "nope"))


def test_the_service_builds_the_bmc_source_from_configuration(tmp_path):
    from gpulens.config import ConfigError, load
    from gpulens.sources import build_sources
    from warehouse import Warehouse

    cfg = load(None, env={"GPULENS_COLLECT_SOURCE": "bmc", "GPULENS_BMC_TARGETS":
                          "n1=ipmi://h1", "GPULENS_BMC_PASSWORD": "pw"})
    wh = Warehouse(str(tmp_path / "w.duckdb"))
    try:
        [source] = build_sources(cfg, wh, now=T)
        assert source.name == "bmc" and source.interval_s == 60.0
        bad = load(None, env={"GPULENS_COLLECT_SOURCE": "bmc", "GPULENS_BMC_TARGETS": "n1=x"})
        with pytest.raises(ConfigError, match="'n1=x' is not"):
            build_sources(bad, wh, now=T)
    finally:
        wh.close()


def test_ipmi_addresses():
    from collector.bmc_source import _host_port

    assert _host_port("10.0.0.1:623") == ("10.0.0.1", "623")
    assert _host_port("bmc1") == ("bmc1", "")
    assert _host_port("[fe80::1]:6230") == ("fe80::1", "6230")
    assert _host_port("[::1]") == ("::1", "")


# ------------------------------------------------------------- IPMI sensor records (SDR)

def _sdr(name: str) -> bmc.SdrList:
    return bmc.parse_sdr((FIXTURES / name).read_text())


@pytest.mark.parametrize("fixture, watts, refused", [
    ("ipmitool_sdr_elist_full_hp_dl360g7.txt", 100.0, 0),  # "Power Meter", not the supplies
    ("ipmitool_sdr_elist_dell_idrac.txt", 2520.0, 0),  # "Pwr Consumption"
    ("ipmitool_sdr_elist_intel_psu_inputs.txt", 2520.0, 0),  # PS1 input; PS2 failed (ns)
    ("ipmitool_sdr_elist_telegraf.txt", 110.0, 0),  # the one supply, output or not
    ("ipmitool_sdr_list_telegraf.txt", 210.0, 0),  # sdr list layout: "Avg Power"
])
def test_sdr_power_of_real_listings(fixture, watts, refused):
    listing = _sdr(fixture)
    assert listing.refused == refused
    assert bmc.sdr_power(listing) == bmc.PowerReading(watts)


def test_sdr_sensors_keep_what_the_bmc_said():
    hp = {s.name: s for s in _sdr("ipmitool_sdr_elist_full_hp_dl360g7.txt").sensors}
    assert hp["Power Meter"] == bmc.SdrSensor("Power Meter", "7.6", "ok", 100.0, "W")
    assert hp["Temp 4"].value is None and hp["Temp 4"].status == "ns"  # "Disabled"
    assert hp["Temp 17"].entity == "8.10" and hp["Temp 17"].unit == "degrees C"
    assert hp["UID Light"].value is None  # no reading text at all
    assert hp["Power Supply 1"].watts == 0.0  # "0 Watts, Presence detected, Failure ..."
    ibm = {s.name: s for s in _sdr("ipmitool_sdr_list_telegraf.txt").sensors}
    assert ibm["Power Supply 1"].value is None  # "0x00": a discrete state, no number
    assert ibm["DASD Backplane 3"].status == "ns" and ibm["Avg Power"].entity == ""
    # the supply's amps on its entity 10.1 are no watts
    assert [s.name for s in _sdr("ipmitool_sdr_elist_telegraf.txt").sensors
            if s.watts is not None] == ["Power Supply 1"]


def test_sdr_power_named_sensors_are_summed():
    intel = _sdr("ipmitool_sdr_elist_intel_psu_inputs.txt")
    choice = bmc.parse_sensor_choice("ps1 input power")  # names match without case
    assert bmc.sdr_power(intel, choice).power_w == 2520.0
    dell = _sdr("ipmitool_sdr_elist_dell_idrac.txt")
    with pytest.raises(ValueError, match="'PS2 Input Power' has no reading in watts"):
        bmc.sdr_power(intel, bmc.parse_sensor_choice("PS1 Input Power,PS2 Input Power"))
    with pytest.raises(ValueError, match="'Total_Power' is not listed"):
        bmc.sdr_power(dell, bmc.parse_sensor_choice("Total_Power"))
    with pytest.raises(ValueError, match="'Current 1' has no reading in watts"):
        bmc.sdr_power(dell, ("Current 1",))  # amps are no watts
    assert bmc.parse_sensor_choice(" AUTO ") == ()
    for bad in ("", "a,,b", "x|y", " , "):
        with pytest.raises(ValueError, match="bmc.ipmi_power_sensor: "):
            bmc.parse_sensor_choice(bad)


@pytest.mark.parametrize("text, watts", [
    # Lenovo/Inspur-style parts beside the total: the total wins, parts never count
    ("CPU_Power | 20h | ok | 3.1 | 400 Watts\nMemory_Power | 21h | ok | 32.1 | 90 Watts\n"
     "Fan_Power | 22h | ok | 29.1 | 60 Watts\nTotal_Power | 23h | ok | 7.1 | 2520 Watts\n",
     2520.0),
    # Gigabyte-style supplies: inputs summed, outputs left out
    ("PSU0_PIN | 90h | ok | 10.1 | 1300 Watts\nPSU0_POUT | 91h | ok | 10.1 | 1200 Watts\n"
     "PSU1_PIN | 92h | ok | 10.2 | 1220 W\nPSU1_POUT | 93h | ok | 10.2 | 1150 W\n", 2520.0),
    # outputs only (no input sensor): the supplies that do not say output... none: so all
    ("PS1 Output Power | 10h | ok | 10.1 | 1000 Watts\n"
     "PS1 Input Power | 11h | ns | 10.1 | No Reading\n"
     "PS2 Power | 12h | ok | 10.2 | 900 Watts\n", 900.0),
    # a disabled total falls back to the supplies
    ("SYS_POWER | 01h | ns | 7.1 | Disabled\nPS1 Input Power | 02h | ok | 10.1 | 700 Watts\n"
     "PS2 Input Power | 03h | ok | 10.2 | 650 Watts\n", 1350.0),
    # an unknown name that is no part and no supply is the total; "W" is watts too
    ("Node Input Pwr | 01h | ok | 7.1 | 812.5 W\nCPU Power | 02h | ok | 3.1 | 300 W\n", 812.5),
    # a total by its name on the supplies' entity is still the total, never summed
    ("PS1 Input Power | 64h | ok | 10.1 | 1300 Watts\n"
     "Pwr Consumption | 77h | ok | 10.1 | 2520 Watts\n", 2520.0),
    # an active 0 W (a node switched off at the plug) is a reading
    ("Pwr Consumption | 77h | ok | 7.1 | 0 Watts\n", 0.0),
])
def test_sdr_power_picks_the_total_else_the_supply_inputs(text, watts):
    assert bmc.sdr_power(bmc.parse_sdr(text)).power_w == watts


def test_one_bad_sensor_costs_that_sensor_only():
    text = ("PS1 Input Power  | 10h | ok  | 10.1 | 99999999 Watts\n"  # beyond 30 kW
            "PS2 Input Power  | 11h | ok  | 10.2 | 1240 Watts\n"
            "this line is no sensor\n"
            "Broken           | zzh | ok  |  7.1 | 3 Watts\n"  # no sensor number
            "Odd state        | 12h | ?? |  7.1 | 3 Watts\n"
            "Inlet Temp       | 04h | ok  |  7.1 | 23 degrees C\n")
    listing = bmc.parse_sdr(text)
    assert listing.refused == 4
    assert [s.name for s in listing.sensors] == ["PS2 Input Power", "Inlet Temp"]
    assert bmc.sdr_power(listing).power_w == 1240.0
    # bytes that are not UTF-8 in one name cost nothing else
    raw = b"PS1 Input Power \xa0\xff | 10h | ok | 10.1 | 600 Watts\n" \
          b"PS2 Input Power | 11h | ok | 10.2 | 640 Watts\n"
    got = bmc.parse_sdr(raw)
    assert got.refused == 0 and bmc.sdr_power(got).power_w == 1240.0


@pytest.mark.parametrize("text, message", [
    ("", "holds no sensor line"),
    ("Error: Unable to establish IPMI v2 / RMCP+ session\n", "holds no sensor line"),
    ("Inlet Temp | 04h | ok | 7.1 | 23 degrees C\n", "no total power sensor and no power"),
    ("PS1 Input Power | 10h | ns | 10.1 | No Reading\n", "watt sensors: none"),
    ("Pwr Consumption | 77h | ok | 7.1 | 20000 Watts\nPS1 Input Power | 10h | ok | 10.1 | "
     "20000 Watts\n", None),  # the total is read, not summed with the supplies
    ("PS1 Input Power | 10h | ok | 10.1 | 20000 Watts\n"
     "PS2 Input Power | 11h | ok | 10.2 | 20000 Watts\n", "not 0-30000 W"),
])
def test_sdr_refuses_what_is_no_node_power(text, message):
    if message is None:
        assert bmc.sdr_power(bmc.parse_sdr(text)).power_w == 20000.0
        return
    with pytest.raises(ValueError, match=message) as err:
        bmc.sdr_power(bmc.parse_sdr(text))
    assert str(err.value).startswith("IPMI SDR")


_sdr_reading = st.one_of(
    st.builds(lambda v, u: f"{v} {u}", st.one_of(st.integers(-10, 10**6), st.floats()),
              st.sampled_from(["Watts", "W", "watts", "degrees C", "Amps", "RPM"])),
    st.sampled_from(["No Reading", "Disabled", "Not Readable", "0x00", "",
                     "95 Watts, Presence detected", "Device Present"]),
    st.text(max_size=12))
_sdr_line_st = st.one_of(
    st.builds(lambda n, num, state, ent, r: f"{n} | {num:02X}h | {state} | {ent} | {r}",
              st.one_of(st.sampled_from(["Pwr Consumption", "PS1 Input Power",
                                         "PS2 Input Power", "CPU Power", "Total_Power",
                                         "Power Supply 1", "PSU0_POUT"]),
                        st.text(max_size=16)),
              st.integers(0, 255), st.sampled_from(["ok", "ns", "cr", "nc", "xx"]),
              st.sampled_from(["7.1", "10.1", "10.2", "3.1", ""]), _sdr_reading),
    st.builds(lambda n, r, state: f"{n} | {r} | {state}", st.text(max_size=16),
              _sdr_reading, st.sampled_from(["ok", "ns"])),
    st.text(max_size=40))
_sdr_text = st.lists(_sdr_line_st, max_size=8).map("\n".join)


@pytest.mark.property
@given(st.one_of(_sdr_text, _sdr_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
                 st.binary(max_size=60)),
       st.one_of(st.just("auto"), st.text(max_size=30)))
def test_property_sdr_gives_a_plausible_reading_or_a_value_error_naming_it(text, choice):
    try:
        listing = bmc.parse_sdr(text)
    except ValueError as exc:
        assert str(exc).startswith("IPMI SDR listing ")
        return
    assert listing.refused >= 0 and listing.sensors
    assert all(s.watts is None or 0 <= s.watts <= bmc.MAX_NODE_W for s in listing.sensors)
    try:
        names = bmc.parse_sensor_choice(choice)
    except ValueError as exc:
        assert str(exc).startswith("bmc.ipmi_power_sensor: ")
        return
    try:
        reading = bmc.sdr_power(listing, names)
    except ValueError as exc:
        assert str(exc).startswith("IPMI SDR (watt sensors: ")
        return
    assert 0 <= reading.power_w <= bmc.MAX_NODE_W and math.isfinite(reading.power_w)


# ----------------------------------------------- the source: DCMI refused, then the SDR

def _fake_ipmitool_sdr(tmp_path: Path) -> Path:
    """A stand-in for ipmitool whose BMCs refuse DCMI in the ways real ones do, or not."""
    script = tmp_path / "ipmitool"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/argv
case "$*" in
  *c1host*dcmi*) printf '\\n    DCMI request failed because: Invalid command (c1)\\n' >&2; exit 1 ;;
  *cchost*dcmi*) printf '\\n    DCMI request failed because: Invalid data field in request (cc)\\n' >&2; exit 1 ;;
  *nodc*dcmi*)  printf '\\n    A valid DCMI command was not returned! (0)'; exit 1 ;;
  *off*dcmi*) printf 'Instantaneous power reading: 0 Watts\\nPower reading state is: deactivated\\n' ;;
  *privhost*dcmi*) printf '\\n    DCMI request failed because: Insufficient privilege level (d4)\\n' >&2; exit 1 ;;
  *bytes*dcmi*) printf "\\n    DCMI request failed because: Invalid command (c1)\\n" >&2; exit 1 ;;
  *dcmi*) cat {FIXTURES}/ipmitool_dcmi_power_reading.txt ;;
  *bytes*sdr*) printf 'PS1 Inp\\377ut Power | 10h | ok | 10.1 | 1000 Watts\\nnot a sensor\\n' ;;
  *sdr*) cat {FIXTURES}/ipmitool_sdr_elist_intel_psu_inputs.txt ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_bmc_refusing_dcmi_is_read_from_its_sdr_and_asked_there_next_time(tmp_path):
    tool = _fake_ipmitool_sdr(tmp_path)
    spec = ("a=ipmi://c1host,b=ipmi://cchost,c=ipmi://nodc,d=ipmi://off,e=ipmi://good,"
            "f=ipmi://privhost,g=ipmi://bytes")
    source = BmcSource(target_list(spec), interval_s=60, timeout_s=5, username="admin",
                       password="s3cret-pw", ipmitool=str(tool))
    for _ in range(2):
        table = source.collect(T)[0][1]
        assert dict(zip(table.column("node").to_pylist(),
                        table.column("total_power_w").to_pylist(), strict=True)) == {
            "a": 2520.0, "b": 2520.0, "c": 2520.0, "d": 2520.0, "e": 2520.0, "g": 1000.0}
    assert source.answered_by == {"a=ipmi://c1host": "sdr", "b=ipmi://cchost": "sdr",
                                  "c=ipmi://nodc": "sdr", "d=ipmi://off": "sdr",
                                  "e=ipmi://good": "dcmi", "g=ipmi://bytes": "sdr"}
    # a privilege refusal is no DCMI refusal: the SDR is not asked
    assert "(d4)" in source.targets_down["f=ipmi://privhost"]
    argv = (tmp_path / "argv").read_text().splitlines()
    asked = {h: [a.split("-E ", 1)[1] for a in argv if f"-H {h} " in a]
             for h in ("c1host", "good", "privhost")}
    assert asked == {"c1host": ["dcmi power reading", "sdr elist full", "sdr elist full"],
                     "good": ["dcmi power reading"] * 2,
                     "privhost": ["dcmi power reading"] * 2}
    assert all("s3cret-pw" not in a for a in argv)
    # the "not a sensor" line of g, twice; the Intel listing's lines are all sensors
    assert source.dropped.as_dict() == {"sdr line: refused by the parser": 2}
    details = _source_details(source)
    assert details["answered_by"] == {"dcmi": 1, "sdr": 5}
    assert details["answered_by_target"]["a=ipmi://c1host"] == "sdr"
    assert details["answered_by_target"]["e=ipmi://good"] == "dcmi"

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

"""Property-based tests of the file parsers: inventory (TOML/CSV), topology.conf, CSV job
traces and grid-intensity CSVs.

Each fails only with its documented error (InventoryError, TraceError; topology.conf
never raises for content), naming the input, and returns values within the bounds of
collector.bounds that fit the warehouse's tables.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import traces
from collector.bounds import EARLIEST, MAX_FUTURE, MAX_GPUS_PER_NODE
from collector.topology import InventoryError, parse_inventory, parse_topology_conf
from warehouse.schema import SCHEMAS

pytestmark = pytest.mark.property

NOW = datetime(2026, 11, 2, 12, 0)
ODD = ["", "-8", "8", "nan", "inf", "-inf", "1e300", "1.5", "true", "0", "99999999999999999999",
       "gpu[001-008]", "gpu[1-200000]", "gpu[9-", "r01", "\udcff", "caf\ufffd", "\x00", "x,y",
       '"', "1e12", "2023-03-01 08:00:00", "2023-03-01T12:00:00Z", "1677700800", "9999-01-01",
       "1999-12-31", "Asia/Shanghai"]
cells = st.one_of(st.sampled_from(ODD), st.text(max_size=16),
                  st.integers(-2**40, 2**40).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr))


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def table_rows(columns: list[str]):
    return st.lists(st.lists(cells, min_size=len(columns), max_size=len(columns)), max_size=6)


def check_topology(topo) -> None:
    tables = topo.tables()  # must fit the warehouse's types
    assert tables["racks"].schema.equals(SCHEMAS["racks"])
    for node in topo.nodes.values():
        assert node["gpus"] is None or 0 <= node["gpus"] <= MAX_GPUS_PER_NODE
    for rack in topo.racks.values():
        for key in ("x", "y"):
            assert rack[key] is None or math.isfinite(rack[key])
        assert rack["row"] is None or rack["row"] >= 0


INVENTORY_COLUMNS = ["rack", "zone", "row", "x", "y", "nodes", "partition", "gpus"]


@given(st.lists(st.sampled_from(INVENTORY_COLUMNS + ["extra", ""]), min_size=1, max_size=9),
       st.data())
def test_inventory_csv_fails_only_with_inventory_error(header, data):
    text = csv_text(header, data.draw(table_rows(header)))
    try:
        topo = parse_inventory(text, "csv", "inv.csv")
    except InventoryError as err:
        assert str(err).startswith("inv.csv")
        return
    check_topology(topo)


toml_values = st.one_of(
    st.sampled_from(ODD).map(json.dumps), st.integers(-2**63, 2**63 - 1).map(str),
    st.sampled_from(["nan", "inf", "-inf", "true", "1.5", "[1, 2]", "{a = 1}", "1979-05-27"]))


@given(st.lists(st.dictionaries(st.sampled_from(INVENTORY_COLUMNS), toml_values, max_size=8),
                max_size=4), st.text(max_size=30))
def test_inventory_toml_fails_only_with_inventory_error(racks, noise):
    text = "".join("[[rack]]\n" + "".join(f"{k} = {v}\n" for k, v in r.items()) + "\n"
                   for r in racks)
    for candidate in (text, noise + text, text + noise):
        try:
            topo = parse_inventory(candidate, "toml", "inv.toml")
        except InventoryError as err:
            assert str(err).startswith("inv.toml")
            continue
        check_topology(topo)


conf_words = st.one_of(
    st.sampled_from(["SwitchName=leaf01", "SwitchName=spine", "Nodes=gpu[001-004]",
                     "Nodes=gpu[1-", "Switches=leaf[01-02]", "Switches=x[1-999999]",
                     "Nodes=", "SwitchName=", "#", "\\\n", "LinkSpeed=100"]),
    st.text(max_size=12))


@given(st.lists(st.lists(conf_words, max_size=4).map(" ".join), max_size=8))
def test_topology_conf_never_raises_for_content(lines):
    check_topology(parse_topology_conf("\n".join(lines)))


TRACE_COLUMNS = ["job_id", "user", "node_num", "gpu_num", "type", "state", "submit_time",
                 "start_time", "end_time", "vc", "name"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TRACE_COLUMNS), min_size=1, max_size=11, unique=True),
       st.data(), st.sampled_from(["UTC", "Asia/Shanghai", "Nowhere/Else"]),
       st.booleans())
def test_csv_trace_fails_only_with_trace_error(tmp_path, header, data, tz, skip_bad):
    path = tmp_path / "trace.csv"
    path.write_text(csv_text(header, data.draw(table_rows(header))), errors="surrogateescape")
    try:
        res = traces.read_csv_trace(path, tz=tz, skip_bad=skip_bad, now=NOW)
    except traces.TraceError as err:
        assert str(err).startswith(str(path))
        return
    jobs = res.batch.jobs
    assert jobs.schema.equals(SCHEMAS["jobs"]) and res.batch.runs.schema.equals(SCHEMAS["runs"])
    for key in ("submit_ts", "start_ts", "end_ts"):
        for ts in jobs[key].to_pylist():
            assert ts is None or EARLIEST <= ts <= NOW + MAX_FUTURE
    assert all(g is None or 0 <= g <= 1_000_000 for g in jobs["gpus"].to_pylist())


INTENSITY_COLUMNS = ["timestamp", "region", "gCO2e/kWh", "zone", "carbon_intensity", "ts"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(INTENSITY_COLUMNS), min_size=1, max_size=4), st.data(),
       st.sampled_from([None, "de"]))
def test_intensity_csv_fails_only_with_trace_error(tmp_path, header, data, region):
    path = tmp_path / "grid.csv"
    path.write_text(csv_text(header, data.draw(table_rows(header))), errors="surrogateescape")
    try:
        frame = traces.read_intensity_csv(path, region=region, now=NOW)
    except traces.TraceError as err:
        assert str(err).startswith(str(path))
        return
    assert frame["g_co2_per_kwh"].between(0, 5_000).all()
    assert frame["ts"].between(EARLIEST, NOW + MAX_FUTURE).all()
    assert frame["region"].notna().all()

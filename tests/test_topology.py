"""Topology from an inventory (TOML/CSV) and Slurm's topology.conf."""

from __future__ import annotations

import pytest

from collector.topology import (
    InventoryError,
    TopologySource,
    merge,
    parse_inventory,
    parse_topology_conf,
)

TOPOLOGY_CONF = """# leaf switches are racks
SwitchName=leaf01 Nodes=gpu[001-002]
SwitchName=leaf02 Nodes=gpu[003-004]
SwitchName=spine1 Switches=leaf[01-02]
"""

INVENTORY = """
[[rack]]
rack = "r01"
zone = "hall-a"
row = 1
x = 0.0
y = 2.5
nodes = "gpu[001-002]"
partition = "train"
gpus = 8
"""


def test_topology_conf_leaf_is_rack_parent_is_zone():
    t = parse_topology_conf(TOPOLOGY_CONF)
    assert t.racks["leaf01"]["zone"] == "spine1"
    assert t.nodes["gpu004"]["rack"] == "leaf02"


def test_inventory_toml_and_csv_agree():
    toml = parse_inventory(INVENTORY, "toml")
    csv = parse_inventory('rack,zone,row,x,y,nodes,partition,gpus\n'
                          'r01,hall-a,1,0,2.5,"gpu[001-002]",train,8\n', "csv")
    assert toml.racks == csv.racks and toml.nodes == csv.nodes
    assert toml.nodes["gpu002"] == {"node": "gpu002", "rack": "r01", "partition": "train",
                                    "gpus": 8}
    with pytest.raises(InventoryError, match="inventory: not valid TOML"):
        parse_inventory('[[rack]\nrack = "r1"', "toml")


def test_inventory_wins(tmp_path):
    merged = merge(parse_topology_conf(TOPOLOGY_CONF), parse_inventory(INVENTORY, "toml"))
    assert merged.nodes["gpu001"]["rack"] == "r01"  # inventory
    assert merged.nodes["gpu003"]["rack"] == "leaf02"  # only in topology.conf
    (tmp_path / "inv.toml").write_text(INVENTORY)
    (tmp_path / "topology.conf").write_text(TOPOLOGY_CONF)
    src = TopologySource(str(tmp_path / "inv.toml"), str(tmp_path / "topology.conf"))
    tables = dict(src.collect(None))
    assert tables["racks"].num_rows == 3 and tables["nodes"].num_rows == 4


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("gpus", "-8", "inventory.gpus"),
        ("gpus", "100000", "inventory.gpus"),
        ("x", "nan", "inventory.x"),
        ("y", "inf", "inventory.y"),
        ("y", "1e300", "inventory.y"),
        ("row", "first", "inventory.row"),
        ("row", "-1", "inventory.row"),
        ("row", "1.5", "inventory.row"),
    ],
)
def test_an_impossible_value_is_null_and_counted(field, value, reason):
    row = {"rack": "r01", "row": "1", "x": "0", "y": "2.5", "nodes": "gpu[001-002]",
           "gpus": "8"} | {field: value}
    text = ",".join(row) + "\n" + ",".join(f'"{v}"' for v in row.values()) + "\n"
    topo = parse_inventory(text, "csv", "inv.csv")
    where = topo.nodes["gpu001"] if field == "gpus" else topo.racks["r01"]
    assert where[field] is None
    assert dict(topo.dropped) == {reason: 1}
    assert f"inv.csv: rack 1 {field}" in topo.problems[0]


def test_toml_values_of_the_wrong_kind():
    topo = parse_inventory(INVENTORY.replace("gpus = 8", "gpus = -8").replace(
        "x = 0.0", "x = nan").replace("row = 1", "row = true"), "toml")
    assert topo.racks["r01"]["x"] is None and topo.racks["r01"]["row"] is None
    assert topo.nodes["gpu001"]["gpus"] is None
    assert dict(topo.dropped) == {"inventory.gpus": 1, "inventory.x": 1, "inventory.row": 1}


def test_a_bad_rack_costs_that_rack():
    text = INVENTORY + """
[[rack]]
rack = "r02"
nodes = "gpu[009-"

[[rack]]
zone = "no name"

[[rack]]
rack = "r03"
nodes = "gpu[1-200000]"

[[rack]]
rack = "r04"
nodes = "gpu[100-101]"
"""
    topo = parse_inventory(text, "toml", "inv.toml")
    assert set(topo.racks) == {"r01", "r04"}
    assert set(topo.nodes) == {"gpu001", "gpu002", "gpu100", "gpu101"}
    assert dict(topo.dropped) == {"inventory.nodes": 2, "inventory.rack": 1}


def test_topology_conf_bad_switch_costs_that_switch(tmp_path):
    conf = TOPOLOGY_CONF + "SwitchName=leaf03 Nodes=gpu[005-\nSwitchName=leaf04 Nodes=x[1-2]\n"
    topo = parse_topology_conf(conf)
    assert set(topo.racks) == {"leaf01", "leaf02", "leaf04"}
    assert dict(topo.dropped) == {"topology_conf.nodes": 1}
    assert "topology.conf line 5: switch leaf03" in topo.problems[0]
    (tmp_path / "inv.csv").write_text("rack,nodes,gpus\nr9,n1,-8\n")
    (tmp_path / "topology.conf").write_text(conf)
    src = TopologySource(str(tmp_path / "inv.csv"), str(tmp_path / "topology.conf"))
    src.collect(None)
    assert src.dropped.as_dict() == {"topology_conf.nodes": 1, "inventory.gpus": 1}


def test_names_with_lone_surrogates_are_stored_readable():
    topo = parse_inventory("rack,nodes\n\udcffr1,n\udcff1\n", "csv")
    assert list(topo.tables()["racks"]["rack"].to_pylist()) == ["?r1"]
    assert list(topo.nodes) == ["n?1"]
    conf = parse_topology_conf("SwitchName=leaf\udcff Nodes=n1\n")
    assert conf.tables()["nodes"]["rack"].to_pylist() == ["leaf?"]

"""Topology from an inventory (TOML/CSV) and Slurm's topology.conf."""

from __future__ import annotations

import pytest

from collector.topology import TopologySource, merge, parse_inventory, parse_topology_conf

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
    with pytest.raises(ValueError, match="row"):
        parse_inventory('rack,row\nr1,first\n', "csv")


def test_inventory_wins(tmp_path):
    merged = merge(parse_topology_conf(TOPOLOGY_CONF), parse_inventory(INVENTORY, "toml"))
    assert merged.nodes["gpu001"]["rack"] == "r01"  # inventory
    assert merged.nodes["gpu003"]["rack"] == "leaf02"  # only in topology.conf
    (tmp_path / "inv.toml").write_text(INVENTORY)
    (tmp_path / "topology.conf").write_text(TOPOLOGY_CONF)
    src = TopologySource(str(tmp_path / "inv.toml"), str(tmp_path / "topology.conf"))
    tables = dict(src.collect(None))
    assert tables["racks"].num_rows == 3 and tables["nodes"].num_rows == 4

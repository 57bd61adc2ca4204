"""Topology: an inventory file and/or Slurm's ``topology.conf`` -> racks and nodes.

Inventory (the operator's truth; it wins where both describe a node or rack), TOML::

    [[rack]]
    rack = "r01"          # required
    zone = "hall-a"       # network zone / pod
    row = 1               # floor row number
    x = 0.0               # floor position, tiles (one tile = one rack width)
    y = 0.0
    nodes = "gpu[001-008]"   # a Slurm host list
    partition = "train"      # optional, for these nodes
    gpus = 8                 # optional, GPUs per node

or CSV with the same column names (one rack per line; quote a host list with commas).

``topology.conf`` (``TopologyPlugin=topology/tree``)::

    SwitchName=leaf01 Nodes=gpu[001-008]
    SwitchName=spine1 Switches=leaf[01-04]

A leaf switch (one with ``Nodes=``) is a rack; the switch that lists it under
``Switches=`` is its zone. Positions are unknown there and stay NULL (the warehouse
keeps values an inventory stored earlier). Parsing is pure: the functions take text.
"""

from __future__ import annotations

import csv
import io
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import hostlist
import pyarrow as pa

from warehouse.schema import SCHEMAS

__all__ = ["Topology", "TopologySource", "merge", "parse_inventory", "parse_topology_conf"]


@dataclass
class Topology:
    """Racks (rack -> row dict of SCHEMAS["racks"]) and nodes (node -> SCHEMAS["nodes"])."""

    racks: dict[str, dict] = field(default_factory=dict)
    nodes: dict[str, dict] = field(default_factory=dict)

    def tables(self) -> dict[str, pa.Table]:
        """``{"racks": table, "nodes": table}`` in the warehouse's contracts."""
        out = {}
        for kind, rows in (("racks", self.racks), ("nodes", self.nodes)):
            schema = SCHEMAS[kind]
            cleaned = [{k: r.get(k) for k in schema.names} for r in rows.values()]
            out[kind] = pa.Table.from_pylist(cleaned, schema=schema)
        return out


def _num(v, typ, what: str):
    if v in (None, ""):
        return None
    try:
        return typ(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {v!r} is not a {typ.__name__}") from None


def _expand(spec: str, what: str) -> list[str]:
    try:
        return hostlist.expand_hostlist(spec) if spec else []
    except hostlist.BadHostlist as exc:
        raise ValueError(f"{what}: bad host list {spec!r}: {exc}") from None


def _from_rows(rows: list[dict], where: str) -> Topology:
    topo = Topology()
    for i, r in enumerate(rows):
        what = f"{where}: rack {i + 1}"
        rack = str(r.get("rack") or "").strip()
        if not rack:
            raise ValueError(f"{what}: no 'rack' name")
        topo.racks[rack] = {
            "rack": rack, "zone": (str(r["zone"]).strip() or None) if r.get("zone") else None,
            "row": _num(r.get("row"), int, f"{what} row"),
            "x": _num(r.get("x"), float, f"{what} x"), "y": _num(r.get("y"), float, f"{what} y"),
        }
        gpus = _num(r.get("gpus"), int, f"{what} gpus")
        for node in _expand(str(r.get("nodes") or "").strip(), what):
            topo.nodes[node] = {"node": node, "rack": rack,
                                "partition": r.get("partition") or None, "gpus": gpus}
    return topo


def parse_inventory(text: str, fmt: str, where: str = "inventory") -> Topology:
    """Racks and nodes of an inventory file's text; ``fmt`` is 'toml' or 'csv'."""
    if fmt == "toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{where}: not valid TOML: {exc}") from None
        rows = data.get("rack", [])
        if not isinstance(rows, list):
            raise ValueError(f"{where}: expected [[rack]] tables")
        return _from_rows(rows, where)
    reader = csv.DictReader(io.StringIO(text), skipinitialspace=True)
    rows = [r for r in reader if any((v or "").strip() for v in r.values())]
    return _from_rows(rows, where)


def parse_topology_conf(text: str) -> Topology:
    """Racks (leaf switches) with zones (their parents) and nodes of ``topology.conf``."""
    joined = text.replace("\\\n", " ")
    leaves: dict[str, list[str]] = {}
    parent: dict[str, str] = {}
    for raw in joined.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        fields = {k.lower(): v for k, v in fields.items()}
        name = fields.get("switchname")
        if not name:
            continue
        if "nodes" in fields:
            leaves[name] = _expand(fields["nodes"], f"topology.conf switch {name}")
        for child in _expand(fields.get("switches", ""), f"topology.conf switch {name}"):
            parent.setdefault(child, name)
    topo = Topology()
    for leaf, nodes in leaves.items():
        topo.racks[leaf] = {"rack": leaf, "zone": parent.get(leaf), "row": None, "x": None,
                            "y": None}
        for node in nodes:
            topo.nodes[node] = {"node": node, "rack": leaf, "partition": None, "gpus": None}
    return topo


def merge(base: Topology, override: Topology) -> Topology:
    """``base`` with ``override``'s racks and nodes replacing it where both have them."""
    return Topology(racks={**base.racks, **override.racks},
                    nodes={**base.nodes, **override.nodes})


def load(inventory: str = "", topology_conf: str = "") -> Topology:
    """Read the configured files (either may be empty) and merge, inventory winning."""
    topo = Topology()
    if topology_conf:
        topo = parse_topology_conf(Path(topology_conf).read_text())
    if inventory:
        fmt = "csv" if inventory.endswith(".csv") else "toml"
        topo = merge(topo, parse_inventory(Path(inventory).read_text(), fmt, inventory))
    return topo


class TopologySource:
    """Source ``topology``: racks and nodes from files, re-read every ``interval_s``."""

    name = "topology"

    def __init__(self, inventory: str = "", topology_conf: str = "",
                 interval_s: float = 3600.0):
        if not inventory and not topology_conf:
            raise ValueError("topology: set topology.inventory or topology.slurm_conf")
        self.inventory, self.topology_conf = inventory, topology_conf
        self.interval_s = interval_s  # seconds between re-reads of the files

    def topology(self) -> dict[str, pa.Table]:
        return load(self.inventory, self.topology_conf).tables()

    def collect(self, ts) -> list[tuple[str, pa.Table]]:
        return list(self.topology().items())

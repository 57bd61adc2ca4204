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

What is refused (counted in ``Topology.dropped`` as ``inventory.<field>`` or
``topology_conf.<field>``, and in the source's ``dropped``, shown in ``/healthz``):

- a value (stored NULL): ``gpus`` outside 0-128, ``row`` outside 0-100,000 or not whole,
  ``x``/``y`` not finite or beyond +-1,000,000 tiles;
- a rack or switch (skipped): no name, not a table, a bad or oversized host list
  (python-hostlist refuses more than 100,000 names);
- the file (:class:`InventoryError`, :class:`TopologyConfError`, both
  :class:`TopologyError`): not readable, not TOML, no ``[[rack]]`` list.
"""

from __future__ import annotations

import csv
import io
import logging
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import hostlist
import pyarrow as pa

from collector.bounds import MAX_GPUS_PER_NODE, clean_text, finite
from collector.sanitize import DropCounter
from warehouse.schema import SCHEMAS

__all__ = ["InventoryError", "Topology", "TopologyConfError", "TopologyError", "TopologySource",
           "merge", "parse_inventory", "parse_topology_conf"]

log = logging.getLogger(__name__)
MAX_ROW = 100_000  # floor rows
MAX_TILES = 1_000_000.0  # floor positions, tiles from the origin
MAX_LISTED = 20  # problems kept as messages (the counts are complete)


class TopologyError(ValueError):
    """A topology file, rack or switch that cannot be read; the message names the file,
    the rack or switch and the field; ``reason`` is the field (the key it is counted
    under)."""

    def __init__(self, message: str, reason: str = "file"):
        super().__init__(message)
        self.reason = reason


class InventoryError(TopologyError):
    """An inventory (TOML/CSV) that cannot be read."""


class TopologyConfError(TopologyError):
    """A Slurm ``topology.conf`` that cannot be read."""


@dataclass
class Topology:
    """Racks (rack -> row dict of SCHEMAS["racks"]) and nodes (node -> SCHEMAS["nodes"]),
    and what was refused: ``dropped`` (count per ``<file kind>.<field>``), ``problems``
    (the first messages)."""

    racks: dict[str, dict] = field(default_factory=dict)
    nodes: dict[str, dict] = field(default_factory=dict)
    dropped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def refuse(self, kind: str, err: TopologyError) -> None:
        self.dropped[f"{kind}.{err.reason}"] += 1
        if len(self.problems) < MAX_LISTED:
            self.problems.append(str(err))

    def tables(self) -> dict[str, pa.Table]:
        """``{"racks": table, "nodes": table}`` in the warehouse's contracts."""
        out = {}
        for kind, rows in (("racks", self.racks), ("nodes", self.nodes)):
            schema = SCHEMAS[kind]
            cleaned = [{k: r.get(k) for k in schema.names} for r in rows.values()]
            out[kind] = pa.Table.from_pylist(cleaned, schema=schema)
        return out


def _whole(v) -> int:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    if isinstance(v, int):
        return v
    raise ValueError(v)


def _value(v, kind: type, lo: float, hi: float, what: str, topo: Topology):
    """``v`` as ``kind`` within ``[lo, hi]``; None (refused and counted) otherwise."""
    if v is None or v == "":
        return None
    try:
        if isinstance(v, bool):
            raise ValueError(v)
        x = float(v) if kind is float else _whole(v)
        if (kind is float and not finite(x)) or not lo <= x <= hi:
            raise ValueError(v)
    except (TypeError, ValueError, OverflowError):
        topo.refuse("inventory", InventoryError(
            f"{what}: {v!r:.40} is not a {kind.__name__} in [{lo:g}, {hi:g}]",
            what.rsplit(" ", 1)[-1]))
        return None
    return x


def _text(v) -> str | None:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        return None
    return str(v).strip() or None


def _expand(spec: str, what: str, error: type[TopologyError]) -> list[str]:
    try:
        return hostlist.expand_hostlist(spec) if spec else []
    except (hostlist.BadHostlist, ValueError, IndexError) as exc:
        raise error(f"{what}: bad host list {spec!r:.80}: {exc}", "nodes") from None


def _rack(r, what: str, topo: Topology) -> None:
    """Add one inventory rack and its nodes to ``topo``; InventoryError for the rack."""
    if not isinstance(r, Mapping):
        raise InventoryError(f"{what}: not a table of rack fields", "rack")
    rack = _text(r.get("rack"))
    if not rack:
        raise InventoryError(f"{what}: no 'rack' name", "rack")
    nodes = r.get("nodes")
    if nodes is not None and not isinstance(nodes, str):
        raise InventoryError(f"{what}: 'nodes' is not a host list string", "nodes")
    names = _expand((nodes or "").strip(), f"{what} ({rack})", InventoryError)
    row = {
        "rack": rack, "zone": _text(r.get("zone")),
        "row": _value(r.get("row"), int, 0, MAX_ROW, f"{what} row", topo),
        "x": _value(r.get("x"), float, -MAX_TILES, MAX_TILES, f"{what} x", topo),
        "y": _value(r.get("y"), float, -MAX_TILES, MAX_TILES, f"{what} y", topo),
    }
    gpus = _value(r.get("gpus"), int, 0, MAX_GPUS_PER_NODE, f"{what} gpus", topo)
    partition = _text(r.get("partition"))
    topo.racks[rack] = row
    for node in names:
        topo.nodes[node] = {"node": node, "rack": rack, "partition": partition, "gpus": gpus}


def _from_rows(rows: list, where: str) -> Topology:
    topo = Topology()
    for i, r in enumerate(rows):
        try:
            _rack(r, f"{where}: rack {i + 1}", topo)
        except InventoryError as err:
            topo.refuse("inventory", err)
    return topo


def parse_inventory(text: str, fmt: str, where: str = "inventory") -> Topology:
    """Racks and nodes of an inventory file's text; ``fmt`` is 'toml' or 'csv'.

    Raises :class:`InventoryError` (naming ``where``) only for the whole file; a bad
    rack or value is refused and counted (the module doc)."""
    text = clean_text(text)
    if fmt == "toml":
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise InventoryError(f"{where}: not valid TOML: {exc}") from None
        rows = data.get("rack", [])
        if not isinstance(rows, list):
            raise InventoryError(f"{where}: expected [[rack]] tables")
        return _from_rows(rows, where)
    try:
        reader = csv.DictReader(io.StringIO(text), skipinitialspace=True)
        rows = [r for r in reader if any(isinstance(v, str) and v.strip()
                                         for v in r.values())]
    except csv.Error as exc:
        raise InventoryError(f"{where}: not valid CSV: {exc}") from None
    return _from_rows(rows, where)


def parse_topology_conf(text: str, where: str = "topology.conf") -> Topology:
    """Racks (leaf switches) with zones (their parents) and nodes of ``topology.conf``.

    A switch with a bad host list is skipped and counted; never raises for content."""
    joined = clean_text(text).replace("\\\n", " ")
    leaves: dict[str, list[str]] = {}
    parent: dict[str, str] = {}
    topo = Topology()
    for lineno, raw in enumerate(joined.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        fields = {k.lower(): v for k, v in fields.items()}
        name = fields.get("switchname")
        if not name:
            continue
        what = f"{where} line {lineno}: switch {name}"
        try:
            nodes = (_expand(fields["nodes"], what, TopologyConfError)
                     if "nodes" in fields else None)
            children = _expand(fields.get("switches", ""), what, TopologyConfError)
        except TopologyConfError as err:
            topo.refuse("topology_conf", err)
            continue
        if nodes is not None:
            leaves[name] = nodes
        for child in children:
            parent.setdefault(child, name)
    for leaf, nodes in leaves.items():
        topo.racks[leaf] = {"rack": leaf, "zone": parent.get(leaf), "row": None, "x": None,
                            "y": None}
        for node in nodes:
            topo.nodes[node] = {"node": node, "rack": leaf, "partition": None, "gpus": None}
    return topo


def merge(base: Topology, override: Topology) -> Topology:
    """``base`` with ``override``'s racks and nodes replacing it where both have them."""
    return Topology(racks={**base.racks, **override.racks},
                    nodes={**base.nodes, **override.nodes},
                    dropped=base.dropped + override.dropped,
                    problems=(base.problems + override.problems)[:MAX_LISTED])


def _read(path: str, error: type[TopologyError]) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        raise error(f"{path}: cannot be read: {exc}") from None


def load(inventory: str = "", topology_conf: str = "") -> Topology:
    """Read the configured files (either may be empty) and merge, inventory winning."""
    topo = Topology()
    if topology_conf:
        topo = parse_topology_conf(_read(topology_conf, TopologyConfError), topology_conf)
    if inventory:
        fmt = "csv" if inventory.endswith(".csv") else "toml"
        topo = merge(topo, parse_inventory(_read(inventory, InventoryError), fmt, inventory))
    return topo


class TopologySource:
    """Source ``topology``: racks and nodes from files, re-read every ``interval_s``.

    ``dropped`` counts what the last read of the files refused."""

    name = "topology"

    def __init__(self, inventory: str = "", topology_conf: str = "",
                 interval_s: float = 3600.0):
        if not inventory and not topology_conf:
            raise ValueError("topology: set topology.inventory or topology.slurm_conf")
        self.inventory, self.topology_conf = inventory, topology_conf
        self.interval_s = interval_s  # seconds between re-reads of the files
        self.dropped = DropCounter()

    def topology(self) -> dict[str, pa.Table]:
        topo = load(self.inventory, self.topology_conf)
        dropped = DropCounter()
        dropped.add(dict(topo.dropped))
        self.dropped = dropped
        for message in topo.problems:
            log.warning("topology: refused %s", message)
        return topo.tables()

    def collect(self, ts) -> list[tuple[str, pa.Table]]:
        return list(self.topology().items())

"""Node power from the BMC: pure parsers of IPMI DCMI and Redfish answers, and BMC targets.

The transport (ipmitool, HTTP) lives in collector/bmc_source.py; everything here is pure
and raises only ``ValueError`` naming the input it refuses (issue 21).

- IPMI DCMI: the text of ``ipmitool dcmi power reading`` ("Instantaneous power reading:
  412 Watts") or FreeIPMI's ``ipmi-dcmi --get-system-power-statistics`` ("Current Power :
  412 Watts"). A reading whose state is not active ("Power reading state is:
  deactivated") is refused: BMCs then report a stale or zero value.
- Redfish: ``/redfish/v1/Chassis/{id}/Power`` (``PowerControl[].PowerConsumedWatts``,
  deprecated but what most BMCs serve) and the newer
  ``/redfish/v1/Chassis/{id}/EnvironmentMetrics`` (``PowerWatts.Reading`` and the
  cumulative ``EnergykWh.Reading``), linked from the chassis document.

A reading is refused when it is not a finite number from 0 to :data:`MAX_NODE_W` watts
(energy: not negative and finite). Units: watts, joules.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

__all__ = ["MAX_NODE_W", "BmcTarget", "PowerReading", "chassis_links", "chassis_members",
           "parse_dcmi", "parse_environment_metrics", "parse_power", "parse_targets"]

MAX_NODE_W = 30_000.0  # a DGX B200 is ~14.3 kW; above this a reading is a unit mix-up
PROTOCOLS = ("ipmi", "redfish")
_SHOWN = 80  # characters of a refused input quoted in an error


def _show(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)[:10_000]
    return repr(text[:_SHOWN] + ("..." if len(text) > _SHOWN else ""))


@dataclass(frozen=True)
class PowerReading:
    """One BMC reading: the node's input power in watts and, where the BMC keeps one, its
    cumulative energy counter in joules."""

    power_w: float | None
    energy_j: float | None = None


def _watts(raw, where: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where}: power {_show(raw)} is not a number") from None
    if isinstance(raw, bool) or not math.isfinite(value) or not 0 <= value <= MAX_NODE_W:
        raise ValueError(f"{where}: power {_show(raw)} is not 0-{MAX_NODE_W:.0f} W")
    return value


# ------------------------------------------------------------------------- IPMI DCMI

_DCMI_POWER = re.compile(r"^[ \t]*(?:Instantaneous power reading|Current Power)[ \t]*:"
                         r"[ \t]*(\S+)[ \t]+watts?\.?[ \t]*$", re.I | re.M)
_DCMI_STATE = re.compile(r"^[ \t]*(?:Power reading state is|Power Measurement)[ \t]*:"
                         r"[ \t]*(.*?)[ \t]*$", re.I | re.M)


def parse_dcmi(text: str) -> PowerReading:
    """The instantaneous power of ``ipmitool dcmi power reading`` (or FreeIPMI's
    ``ipmi-dcmi --get-system-power-statistics``) output, in watts.

    Raises ValueError quoting the input when it holds no power line, when the BMC says
    the reading is not active, or when the value is not 0-MAX_NODE_W W."""
    if not isinstance(text, str):
        raise ValueError(f"DCMI reading {_show(text)} is not text")
    found = _DCMI_POWER.findall(text)
    if len(found) != 1:
        raise ValueError(f"DCMI reading {_show(text)}: expected one instantaneous power "
                         f"line, found {len(found)}")
    state = _DCMI_STATE.search(text)
    if state and state.group(1).lower() not in ("activated", "active"):
        raise ValueError(f"DCMI reading {_show(text)}: power measurement is "
                         f"{state.group(1)!r}, not active")
    return PowerReading(_watts(found[0], f"DCMI reading {_show(text)}"))


# --------------------------------------------------------------------------- Redfish

def _object(doc, what: str) -> dict:
    if not isinstance(doc, dict):
        raise ValueError(f"Redfish {what} {_show(doc)} is not a JSON object")
    return doc


def _link(value) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("@odata.id"), str):
        return value["@odata.id"]
    return None


def chassis_members(doc) -> list[str]:
    """The ``@odata.id`` paths of a ``/redfish/v1/Chassis`` collection's members.

    Raises ValueError quoting the document when it has no ``Members`` list of links."""
    members = _object(doc, "chassis collection").get("Members")
    if not isinstance(members, list):
        raise ValueError(f"Redfish chassis collection {_show(doc)} has no Members list")
    links = [_link(m) for m in members]
    if any(x is None for x in links):
        raise ValueError(f"Redfish chassis collection {_show(doc)}: a member is no link")
    return links


def chassis_links(doc) -> dict[str, str]:
    """The power documents a chassis links: ``environment_metrics`` and ``power`` (each
    only when present). Raises ValueError when the chassis document is no object."""
    doc = _object(doc, "chassis")
    out = {}
    for key, name in (("EnvironmentMetrics", "environment_metrics"), ("Power", "power")):
        link = _link(doc.get(key))
        if link:
            out[name] = link
    return out


def parse_power(doc) -> PowerReading:
    """Node power from a Redfish ``Power`` resource: the first ``PowerControl`` entry with
    a ``PowerConsumedWatts`` (the chassis total; later entries are often its parts).

    Raises ValueError quoting the document when none has a reading or it is implausible."""
    controls = _object(doc, "Power").get("PowerControl")
    if not isinstance(controls, list):
        raise ValueError(f"Redfish Power {_show(doc)} has no PowerControl list")
    for control in controls:
        if isinstance(control, dict) and control.get("PowerConsumedWatts") is not None:
            return PowerReading(_watts(control["PowerConsumedWatts"],
                                       f"Redfish Power {_show(doc)}"))
    raise ValueError(f"Redfish Power {_show(doc)}: no PowerControl has PowerConsumedWatts")


def _reading(doc: dict, key: str):
    sensor = doc.get(key)
    return sensor.get("Reading") if isinstance(sensor, dict) else None


def parse_environment_metrics(doc) -> PowerReading:
    """Power (``PowerWatts.Reading``, W) and cumulative energy (``EnergykWh.Reading``,
    kWh, returned in J) from a Redfish ``EnvironmentMetrics`` resource.

    Raises ValueError quoting the document when it has neither, or one is implausible."""
    doc = _object(doc, "EnvironmentMetrics")
    where = f"Redfish EnvironmentMetrics {_show(doc)}"
    watts, kwh = _reading(doc, "PowerWatts"), _reading(doc, "EnergykWh")
    if watts is None and kwh is None:
        raise ValueError(f"{where} has neither PowerWatts nor EnergykWh readings")
    energy_j = None
    if kwh is not None:
        try:
            energy_j = float(kwh) * 3.6e6
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{where}: energy {_show(kwh)} is not a number") from None
        if isinstance(kwh, bool) or not math.isfinite(energy_j) or energy_j < 0:
            raise ValueError(f"{where}: energy {_show(kwh)} is not a non-negative kWh")
    return PowerReading(None if watts is None else _watts(watts, where), energy_j)


# --------------------------------------------------------------------------- targets

@dataclass(frozen=True)
class BmcTarget:
    """One BMC and the node it measures. ``address`` is ``host`` or ``host:port``;
    ``chassis`` (Redfish) picks one chassis id, else the first that reports power."""

    node: str
    protocol: str  # "ipmi" or "redfish"
    address: str
    scheme: str = "https"  # Redfish only
    chassis: str = ""

    @property
    def key(self) -> str:
        """The target's name in /healthz: ``node=protocol://address``."""
        return f"{self.node}={self.protocol}://{self.address}"


_ITEM = re.compile(r"^(?P<node>[A-Za-z0-9_.\-]+)=(?P<proto>ipmi|redfish|https?)://"
                   r"(?P<addr>[A-Za-z0-9_.\-]+(?::[0-9]{1,5})?|\[[0-9a-fA-F:.]+\](?::[0-9]{1,5})?)"
                   r"(?:#(?P<chassis>[A-Za-z0-9_.\-]+))?$")


def _target(item: str, where: str) -> BmcTarget:
    m = _ITEM.match(item.strip())
    if not m:
        raise ValueError(f"{where}: {_show(item)} is not node=ipmi://host[:port] or "
                         "node=redfish://host[:port] (https://, http:// for Redfish too)")
    proto = m["proto"]
    scheme = "http" if proto == "http" else "https"
    return BmcTarget(m["node"], "ipmi" if proto == "ipmi" else "redfish", m["addr"],
                     scheme, m["chassis"] or "")


def parse_targets(text: str, where: str = "bmc.targets") -> list[BmcTarget]:
    """BMC targets from items ``node=ipmi://host[:port]`` or ``node=redfish://host[:port]``
    (``https://``; ``http://`` for plain-HTTP Redfish; ``#chassis`` picks a chassis),
    separated by commas or newlines; ``#`` starts a comment at the start of a line.

    Raises ValueError naming ``where`` and the item that is not such a target, or a node
    named twice."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: {_show(text)} is not text")
    items = [i for line in text.splitlines() if not line.lstrip().startswith("#")
             for i in line.split(",") if i.strip()]
    out = [_target(i, where) for i in items]
    seen: set[str] = set()
    for t in out:
        if t.node in seen:
            raise ValueError(f"{where}: node {t.node!r} has two BMCs")
        seen.add(t.node)
    return out

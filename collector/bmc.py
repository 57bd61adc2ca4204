"""Node power from the BMC: pure parsers of IPMI DCMI and Redfish answers, and BMC targets.

The transport (ipmitool, HTTP) lives in collector/bmc_source.py; everything here is pure
and raises only ``ValueError`` naming the input it refuses (issue 21).

- IPMI DCMI: the text of ``ipmitool dcmi power reading`` ("Instantaneous power reading:
  412 Watts") or FreeIPMI's ``ipmi-dcmi --get-system-power-statistics`` ("Current Power :
  412 Watts"). A reading whose state is not active ("Power reading state is:
  deactivated") is refused: BMCs then report a stale or zero value.
- IPMI SDR: the text of ``ipmitool sdr elist full`` (or ``sdr list full``), read when a
  BMC refuses DCMI; the node's power is its total power sensor, else the sum of its power
  supplies' input sensors (:func:`sdr_power`).
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

__all__ = ["MAX_NODE_W", "BmcTarget", "DcmiInactive", "PowerReading", "SdrList", "SdrSensor",
           "chassis_links", "chassis_members", "parse_dcmi", "parse_environment_metrics",
           "parse_power", "parse_sdr", "parse_sensor_choice", "parse_targets", "sdr_power"]

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
    method: str = ""  # what answered, set by the source: dcmi, sdr, redfish


class DcmiInactive(ValueError):
    """The BMC answers DCMI but says its power measurement is not active."""


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

    Raises ValueError quoting the input when it holds no power line or the value is not
    0-MAX_NODE_W W; DcmiInactive (a ValueError) when the BMC says the reading is not
    active."""
    if not isinstance(text, str):
        raise ValueError(f"DCMI reading {_show(text)} is not text")
    found = _DCMI_POWER.findall(text)
    if len(found) != 1:
        raise ValueError(f"DCMI reading {_show(text)}: expected one instantaneous power "
                         f"line, found {len(found)}")
    state = _DCMI_STATE.search(text)
    if state and state.group(1).lower() not in ("activated", "active"):
        raise DcmiInactive(f"DCMI reading {_show(text)}: power measurement is "
                         f"{state.group(1)!r}, not active")
    return PowerReading(_watts(found[0], f"DCMI reading {_show(text)}"))


# -------------------------------------------------------------------------- IPMI SDR
#
# ``ipmitool sdr elist full`` prints one full sensor record a line:
#   "PS1 Input Power  | 64h | ok  | 10.1 | 280 Watts"
#   (name | sensor number | status | entity.instance | reading[, discrete states])
# and ``sdr list full`` the shorter "name | reading | status". A reading is a number and a
# unit, or words ("No Reading", "Disabled", "Device Present"); status "ns" means none.

SDR_AUTO = "auto"
_SDR_NUMBER = re.compile(r"^[ \t]*([-+]?[0-9]+(?:\.[0-9]+)?)[ \t]+(\S.*?)[ \t]*$")
_SDR_STATES = ("ok", "ns", "nc", "cr", "nr", "lnc", "lcr", "lnr", "unc", "ucr", "unr")
# names that say a power supply (or the entity is 10, "Power Supply")
_PSU = re.compile(r"^(?:ps|psu|pws|pwr ?supply|power ?supply)[ _-]?[0-9]", re.I)
_PSU_IN = re.compile(r"input|(?:^|[ _])p?in(?:$|[ _])|pin(?:$|[ _])", re.I)
_PSU_OUT = re.compile(r"output|(?:^|[ _])p?out(?:$|[ _])|pout(?:$|[ _])", re.I)
# watt sensors of one part of the node, never its total
_PART = re.compile(r"cpu|proc|mem|dimm|fan|gpu|hdd|ssd|disk|storage|nic|pcie|pch|vr|riser"
                   r"|peak|max|min|limit|cap|threshold", re.I)
# the node's total under the names BMCs give it, best first (Dell, Lenovo/Inspur, Gigabyte,
# Huawei, HPE, Intel); another watt sensor that is no part and no supply comes after these
_TOTALS = ("pwr consumption", "power consumption", "total_power", "total power",
           "sys_power", "sys power", "system power", "power meter", "system level", "power")


@dataclass(frozen=True)
class SdrSensor:
    """One line of ``ipmitool sdr elist full``: the sensor's name, its entity
    ("10.1", "" when the layout has none), status and reading (``value`` in ``unit``,
    "W" for watts; None when the BMC gave no number)."""

    name: str
    entity: str
    status: str
    value: float | None
    unit: str

    @property
    def watts(self) -> float | None:
        """The reading in watts, or None when this is no watt sensor with a reading."""
        return self.value if self.unit == "W" and self.status != "ns" else None


@dataclass(frozen=True)
class SdrList:
    """The sensors of one SDR listing and how many of its lines were refused (a line
    that is no sensor, or a watt reading that is not 0-MAX_NODE_W: one bad sensor costs
    that sensor only)."""

    sensors: tuple[SdrSensor, ...]
    refused: int


def _unit(text: str) -> str:
    return "W" if text.lower() in ("watts", "watt", "w") else text


def _sdr_line(line: str) -> SdrSensor | None:
    fields = [f.strip() for f in line.split("|")]
    if len(fields) == 5:  # elist: name | 64h | ok | 10.1 | reading
        name, number, status, entity, reading = fields
        if not re.fullmatch(r"[0-9A-Fa-f]{1,2}h", number):
            return None
    elif len(fields) == 3:  # list: name | reading | status
        (name, reading, status), entity = fields, ""
    else:
        return None
    status = status.lower()
    if not name or status not in _SDR_STATES:
        return None
    m = _SDR_NUMBER.match(reading.split(",", 1)[0])
    if m is None or status == "ns":
        return SdrSensor(name, entity, status, None, "")
    unit = _unit(m.group(2))
    value = float(m.group(1))
    if unit == "W" and not 0 <= value <= MAX_NODE_W:
        return None
    return SdrSensor(name, entity, status, value, unit)


def parse_sdr(text) -> SdrList:
    """The sensors of ``ipmitool sdr elist full`` (or ``sdr list full``) output.

    Lines that are no sensor line, and watt readings that are not 0-MAX_NODE_W W, are
    refused one by one (counted in ``refused``). Raises ValueError quoting the input when
    it is not text or not one of its lines is a sensor."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")  # a name's bad bytes cost nothing else
    if not isinstance(text, str):
        raise ValueError(f"IPMI SDR listing {_show(text)} is not text")
    lines = [line for line in text.splitlines() if line.strip()]
    sensors = [s for s in map(_sdr_line, lines) if s is not None]
    if not sensors:
        raise ValueError(f"IPMI SDR listing {_show(text)} holds no sensor line")
    return SdrList(tuple(sensors), len(lines) - len(sensors))


def parse_sensor_choice(text: str, where: str = "bmc.ipmi_power_sensor") -> tuple[str, ...]:
    """``auto`` (returned as ``()``) or sensor names separated by commas, whose readings
    are summed. Raises ValueError naming ``where`` when there is neither."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: {_show(text)} is not text")
    if text.strip().lower() == SDR_AUTO:
        return ()
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n or "|" in n for n in names):
        raise ValueError(f"{where}: {_show(text)} is not 'auto' or sensor names separated "
                         "by commas")
    return names


def _is_psu(s: SdrSensor) -> bool:
    return bool(_PSU.match(s.name)) or s.entity.split(".")[0] == "10"


def sdr_power(sdr: SdrList, choice: tuple[str, ...] = ()) -> PowerReading:
    """The node's input power (W) from its SDR sensors.

    ``choice`` names the sensors to sum (:func:`parse_sensor_choice`); each must be in
    the listing with a reading in watts. ``()`` ("auto") takes, among the sensors with a
    reading in watts:

    1. the node's total: the first of the names in ``_TOTALS`` (Dell's "Pwr
       Consumption", "Total_Power", "SYS_POWER", HPE's "Power Meter", ...) on any
       entity, else the first watt sensor that is neither a power supply nor a part
       (CPU, memory, fans, GPU, disks, peak or limit values);
    2. else the sum of the power supplies' input sensors (a name like "PS1 Input Power"
       or entity 10): those saying input where any of them has a reading, else all
       that do not say output. A supply without a reading (failed, pulled, "ns") adds
       nothing.

    Raises ValueError naming the listing's watt sensors when none of these is found, a
    named sensor is missing or has no reading, or the sum is not 0-MAX_NODE_W W."""
    watts = [s for s in sdr.sensors if s.watts is not None]
    where = "IPMI SDR (watt sensors: " + (
        ", ".join(repr(s.name) for s in watts[:12]) or "none") + ")"
    if choice:
        by_name: dict[str, SdrSensor] = {}
        for s in sdr.sensors:
            by_name.setdefault(s.name.lower(), s)
        picked = []
        for name in choice:
            s = by_name.get(name.lower())
            if s is None or s.watts is None:
                state = "is not listed" if s is None else "has no reading in watts"
                raise ValueError(f"{where}: sensor {name!r} {state}")
            picked.append(s)
        return PowerReading(_watts(sum(s.watts for s in picked), where))
    for total in _TOTALS:  # a total by its name, whatever entity the BMC gave it
        for s in watts:
            if s.name.lower() == total:
                return PowerReading(_watts(s.watts, where))
    others = [s for s in watts if not _is_psu(s) and not _PART.search(s.name)]
    if others:
        return PowerReading(_watts(others[0].watts, where))
    supplies = [s for s in watts if _is_psu(s)]
    read = ([s.watts for s in supplies if _PSU_IN.search(s.name)]
            or [s.watts for s in supplies if not _PSU_OUT.search(s.name)])
    if not read:
        raise ValueError(f"{where}: no total power sensor and no power supply reading "
                         "in watts")
    return PowerReading(_watts(sum(read), where))


# --------------------------------------------------------------------------- Redfish

def _object(doc, what: str) -> dict:
    if not isinstance(doc, dict):
        raise ValueError(f"Redfish {what} {_show(doc)} is not a JSON object")
    return doc


def _link(value) -> str | None:
    """The ``@odata.id`` path of a link; None unless it is a path on the BMC itself (it is
    appended to the BMC's address, and the password goes with the request)."""
    path = value.get("@odata.id") if isinstance(value, dict) else None
    return path if isinstance(path, str) and path.startswith("/") else None


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

"""Node power read from the BMCs on their own schedule (transport; parsing: collector/bmc.py).

Each cycle reads every BMC in parallel, IPMI ones through ``ipmitool -I lanplus ... -E
dcmi power reading``, or ``sdr elist full`` for BMCs that refuse DCMI (the password
travels in the ``IPMI_PASSWORD`` environment variable of the child, never on its command
line), Redfish ones over HTTP(S) with basic auth. ``answered_by`` says per BMC which
answered (dcmi, sdr, redfish). It
yields one ``node_power`` row per node that answered (``total_power_w`` W, ``energy_j``
J where the BMC keeps a counter, ``source``). One BMC that fails or answers nonsense
costs that node's row only: it is listed in ``targets_down`` (shown by /healthz), a
refused answer is also counted in ``dropped``; the cycle and the other BMCs go on.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

import pyarrow as pa
import requests

from collector import bmc
from collector.http import session
from collector.sanitize import DropCounter
from gpulens.settings import default
from warehouse.clock import naive_utc
from warehouse.schema import SCHEMAS

__all__ = ["BmcSource", "read_ipmi", "RedfishReader"]

REFUSED = "reading: refused by the parser"
SENSOR_REFUSED = "sdr line: refused by the parser"


class TransportError(RuntimeError):
    """The BMC could not be asked (timeout, connection refused, HTTP error, ipmitool
    failed); the message never holds the password."""


def _host_port(address: str) -> tuple[str, str]:
    """``host:port``, ``host``, ``[v6]:port`` or ``[v6]`` -> (host, port or "")."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, rest.lstrip(":")
    host, _, port = address.partition(":")
    return host, port


# ipmitool's words when the BMC refuses DCMI's Get Power Reading as unsupported: completion
# codes C1h (invalid command, ipmi_sim), C2h (invalid for this LUN), CCh (invalid data
# field: no DCMI group extension DCh), D5h (not supported in present state), D6h (command
# disabled); or an answer that is not DCMI's. Session, timeout and privilege failures are
# no refusal of DCMI: the SDR would fail alike, so they are not retried there.
_DCMI_REFUSED = re.compile(r"DCMI request failed because: .*\((?:c1|c2|cc|d5|d6)\)"
                           r"|A valid DCMI command was not returned", re.I)


class DcmiRefused(TransportError):
    """The BMC answered DCMI's power reading with a refusal (see ``_DCMI_REFUSED``)."""


def _ipmitool(target: bmc.BmcTarget, args: list[str], *, username: str, password: str,
              timeout_s: float, ipmitool: str, cipher_suite: int) -> str:
    """ipmitool's standard output for ``args`` over lanplus; the password travels in its
    environment (``-E``), never on its command line. Raises TransportError (DcmiRefused
    for a refused DCMI command) with ipmitool's last line, never the password."""
    host, port = _host_port(target.address)
    cmd = [ipmitool, "-I", "lanplus", "-C", str(cipher_suite), "-H", host,
           *(["-p", port] if port else []), "-U", username, "-E", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False,
                              env={**os.environ, "IPMI_PASSWORD": password})
    except subprocess.TimeoutExpired:
        raise TransportError(f"ipmitool timed out after {timeout_s:g} s") from None
    except OSError as exc:
        raise TransportError(f"cannot run {ipmitool}: {exc.strerror}") from None
    out = done.stdout.decode("utf-8", "replace")  # one sensor's bad bytes cost nothing else
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace")
        tail = (err or out).strip().splitlines()[-1:] or [""]
        kind = DcmiRefused if _DCMI_REFUSED.search(err + out) else TransportError
        raise kind(f"ipmitool exit {done.returncode}: {tail[0].strip()[:200]}")
    return out


def read_ipmi(target: bmc.BmcTarget, *, username: str, password: str, timeout_s: float,
              ipmitool: str = default("bmc.ipmitool"),
              cipher_suite: int = default("bmc.ipmi_cipher_suite"),
              power_sensor: str = default("bmc.ipmi_power_sensor"), method: str = "dcmi",
              on_refused: Callable[[int], None] | None = None) -> bmc.PowerReading:
    """One power reading (W) over IPMI-over-LAN (lanplus, RMCP+ ``cipher_suite``).

    ``method`` "dcmi" asks ``dcmi power reading`` first and, when the BMC refuses DCMI
    (``_DCMI_REFUSED``) or says its power measurement is not active, reads the SDR's
    power sensors (``sdr elist full``, :func:`collector.bmc.sdr_power` with
    ``power_sensor``); "sdr" reads the SDR at once. The reading's ``method`` says which
    answered; ``on_refused`` gets the count of SDR lines refused."""
    ask = {"username": username, "password": password, "timeout_s": timeout_s,
           "ipmitool": ipmitool, "cipher_suite": cipher_suite}
    choice = bmc.parse_sensor_choice(power_sensor)
    why = ""
    if method == "dcmi":
        try:
            reading = bmc.parse_dcmi(_ipmitool(target, ["dcmi", "power", "reading"], **ask))
            return replace(reading, method="dcmi")
        except (DcmiRefused, bmc.DcmiInactive) as exc:
            why = f"DCMI: {exc}; "
    try:
        listing = bmc.parse_sdr(_ipmitool(target, ["sdr", "elist", "full"], **ask))
        if on_refused is not None and listing.refused:
            on_refused(listing.refused)
        return replace(bmc.sdr_power(listing, choice), method="sdr")
    except TransportError as exc:
        raise TransportError(f"{why}SDR: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{why}SDR: {exc}") from None


class RedfishReader:
    """Reads a Redfish BMC's node power; remembers which document holds it per target."""

    def __init__(self, *, username: str, password: str, timeout_s: float,
                 ca_file: str = "", verify_tls: bool = True):
        headers = {"Accept": "application/json", "User-Agent": "gpulens-bmc"}
        if username or password:
            token = base64.b64encode(f"{username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        self._http = session(ca_file=ca_file, verify_tls=verify_tls, headers=headers)
        self._timeout = timeout_s
        self._where: dict[str, tuple[str, Callable]] = {}  # target key -> (path, parser)
        self._lock = threading.Lock()

    def _get(self, target: bmc.BmcTarget, path: str):
        url = f"{target.scheme}://{target.address}{path}"
        try:
            resp = self._http.get(url, timeout=self._timeout)
        except requests.RequestException as exc:
            raise TransportError(f"GET {path}: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise TransportError(f"GET {path}: HTTP {resp.status_code}")
        try:
            return json.loads(resp.content)
        except (ValueError, RecursionError):
            raise ValueError(
                f"Redfish {path}: not JSON: {bmc._show(resp.content[:200])}") from None

    def _locate(self, target: bmc.BmcTarget) -> tuple[str, Callable]:
        members = bmc.chassis_members(self._get(target, "/redfish/v1/Chassis"))
        if target.chassis:
            members = [m for m in members if m.rstrip("/").rsplit("/", 1)[-1] == target.chassis]
        for path in members:
            links = bmc.chassis_links(self._get(target, path))
            for key, parse in (("environment_metrics", bmc.parse_environment_metrics),
                               ("power", bmc.parse_power)):
                if key in links:
                    try:
                        parse(self._get(target, links[key]))
                    except ValueError:
                        continue  # this document has no reading here; try the next
                    return links[key], parse
        raise ValueError(f"Redfish {target.key}: no chassis"
                         f"{' ' + repr(target.chassis) if target.chassis else ''} "
                         "reports power (EnvironmentMetrics or Power)")

    def read(self, target: bmc.BmcTarget) -> bmc.PowerReading:
        with self._lock:
            where = self._where.get(target.key)
        if where is None:
            where = self._locate(target)
            with self._lock:
                self._where[target.key] = where
        try:
            return where[1](self._get(target, where[0]))
        except Exception:
            with self._lock:  # look again next cycle: the BMC may have been replaced
                self._where.pop(target.key, None)
            raise


class BmcSource:
    """The ``bmc`` source (collector/source.py): ``node_power`` rows from every BMC.

    ``targets`` is the text of ``bmc.targets`` or a callable returning the current
    targets (a file re-read each cycle)."""

    name = "bmc"

    def __init__(self, targets: Callable[[], list[bmc.BmcTarget]], *, interval_s: float,
                 timeout_s: float, username: str, password: str,
                 workers: int = default("bmc.workers"),
                 ipmitool: str = default("bmc.ipmitool"),
                 cipher_suite: int = default("bmc.ipmi_cipher_suite"), ca_file: str = "",
                 verify_tls: bool = True,
                 ipmi_power_sensor: str = default("bmc.ipmi_power_sensor")):
        self.interval_s = interval_s
        self._targets = targets
        bmc.parse_sensor_choice(ipmi_power_sensor)  # a bad setting stops the start
        self._ipmi = {"username": username, "password": password, "timeout_s": timeout_s,
                      "ipmitool": ipmitool, "cipher_suite": cipher_suite,
                      "power_sensor": ipmi_power_sensor}
        self._method: dict[str, str] = {}  # IPMI target key -> "sdr" once DCMI was refused
        self._method_lock = threading.Lock()
        self._redfish = RedfishReader(username=username, password=password,
                                      timeout_s=timeout_s, ca_file=ca_file,
                                      verify_tls=verify_tls)
        self._workers = workers
        self.dropped = DropCounter()
        self.targets_down: dict[str, str] = {}
        self.targets_total: int | None = None
        self.answered_by: dict[str, str] = {}  # target key -> dcmi, sdr or redfish

    def _read(self, target: bmc.BmcTarget) -> bmc.PowerReading:
        if target.protocol != "ipmi":
            return replace(self._redfish.read(target), method="redfish")
        with self._method_lock:
            method = self._method.get(target.key, "dcmi")
        try:
            reading = read_ipmi(target, **self._ipmi, method=method,
                                on_refused=lambda n: self.dropped.add({SENSOR_REFUSED: n}))
        except Exception:
            with self._method_lock:  # ask DCMI again next cycle: the BMC may have changed
                self._method.pop(target.key, None)
            raise
        with self._method_lock:
            self._method[target.key] = reading.method
        return reading

    def _attempt(self, target: bmc.BmcTarget):
        try:
            return self._read(target), None
        except ValueError as exc:
            return None, (True, str(exc))
        except TransportError as exc:
            return None, (False, str(exc))
        except Exception as exc:  # one BMC's surprise never costs the cycle
            return None, (False, f"{type(exc).__name__}: {exc}")

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        """One reading per BMC at ``ts``; raises only when the target list is unreadable."""
        targets = self._targets()
        ts = naive_utc(ts)
        with ThreadPoolExecutor(max(1, min(self._workers, len(targets) or 1))) as pool:
            results = list(pool.map(self._attempt, targets))
        rows, down, refused, answered = [], {}, 0, {}
        for target, (reading, error) in zip(targets, results, strict=True):
            if error is not None:
                refused += error[0]
                down[target.key] = error[1]
                continue
            answered[target.key] = reading.method
            rows.append({"ts": ts, "node": target.node, "total_power_w": reading.power_w,
                         "energy_j": reading.energy_j, "source": target.protocol})
        self.dropped.add({REFUSED: refused})
        self.targets_down, self.targets_total = down, len(targets)
        self.answered_by = answered
        return [("node_power", pa.Table.from_pylist(rows, schema=SCHEMAS["node_power"]))]


def target_list(spec: str) -> Callable[[], list[bmc.BmcTarget]]:
    """The targets of ``bmc.targets``: the items themselves, or ``@path`` of a file of
    such items (one per line), re-read every cycle. ValueError names the bad item."""
    if spec.strip().startswith("@"):
        path = spec.strip()[1:]

        def from_file() -> list[bmc.BmcTarget]:
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"bmc.targets: cannot read {path}: {exc}") from None
            return bmc.parse_targets(text, where=path)

        return from_file
    fixed = bmc.parse_targets(spec)
    return lambda: fixed

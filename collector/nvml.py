"""NVML on the local host: one snapshot per GPU per tick (the only module using pynvml).

Every NVML call goes through :func:`query` (after nvitop's ``nvmlQuery``): a field the
GPU does not support, or any other NVMLError, reads as None (NULL in the warehouse),
never as an exception, except NVML_ERROR_GPU_IS_LOST, which marks the whole GPU lost:
it becomes one event (kind='lost') and the other GPUs are still read. XID critical
errors come from NVML's event API, polled without blocking (``nvmlEventSetWait_v2``
with a 0 ms timeout) once per tick.

Units: NVML reports power in mW, energy in mJ, memory in bytes; snapshots hold W, J and
MiB. Record a real GPU's answers for the tests with::

    python -m collector.nvml --record tests/fixtures/nvml/my_gpu.json

which dumps every NVML call this module makes, with its result or error code, as JSON
(the format ``tests/support/fake_pynvml.py`` replays).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from collector.dcgm import THROTTLE_POWER, THROTTLE_THERMAL
from collector.sanitize import DropCounter, sanitize_samples
from gpulens.settings import default
from warehouse.schema import SCHEMAS

__all__ = ["GpuLost", "GpuSnapshot", "NvmlSource", "query", "samples_table"]

GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
FI_DEV_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
XID_CRITICAL = 8  # nvmlEventTypeXidCriticalError
MIB = 1024 * 1024


class GpuLost(RuntimeError):
    """NVML says the GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)."""


def _plain(value: Any) -> Any:
    """NVML results as JSON-able values: structs -> dicts, bytes -> str, tuples -> lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "_fields_"):
        return {name: _plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, type):  # plain objects
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return value


def query(nvml, name: str, *args, record: dict | None = None, key: str = "") -> Any:
    """``nvml.<name>(*args)``, or None on any NVMLError or a function this NVML lacks.

    Raises :class:`GpuLost` for NVML_ERROR_GPU_IS_LOST. ``record``, when given, gets
    ``key -> result`` (or ``{"error": code}``) for ``--record``.
    """
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        result = fn(*args)
    except nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if record is not None:
            record[key or name] = {"error": code}
        if code == GPU_IS_LOST:
            raise GpuLost(name) from None
        return None
    if record is not None:
        record[key or name] = _plain(result)
    return result


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one tick; None = not supported or not available."""

    index: int
    uuid: str | None = None
    name: str | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None  # total energy since driver load
    temp_c: float | None = None
    mem_temp_c: float | None = None  # HBM
    sm_clock_mhz: float | None = None
    clocks_event_reasons: int | None = None  # NVML bitmask
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_failure: bool | None = None
    pcie_replays: int | None = None
    xid_last: int | None = None  # last XID seen by this process, 0 = none
    lost: bool = False


def _scale(v, factor: float):
    return None if v is None else v * factor


def _field_value(v) -> float | None:
    """The number in one ``nvmlFieldValue_t`` (None if NVML returned an error for it)."""
    if v is None or getattr(v, "nvmlReturn", 0) != 0:
        return None
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
    return float(getattr(v.value, member.get(v.valueType, "ullVal")))


def read_gpu(nvml, index: int, handle, record: dict | None = None) -> GpuSnapshot:
    """Every reading of one GPU (raises GpuLost)."""

    def q(name, *args):
        key = f"{name}({','.join(map(str, args))})" if args else name
        return query(nvml, name, handle, *args, record=record, key=key)

    util = q("nvmlDeviceGetUtilizationRates")
    mem = q("nvmlDeviceGetMemoryInfo")
    reasons = q("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons")
    fv = query(nvml, "nvmlDeviceGetFieldValues", handle, [FI_DEV_MEMORY_TEMP])
    mem_temp = _field_value(fv[0]) if fv else None
    if record is not None:  # the number, not the ctypes array
        record[f"nvmlDeviceGetFieldValues({FI_DEV_MEMORY_TEMP})"] = (
            mem_temp if fv else {"error": 3})
    remap = q("nvmlDeviceGetRemappedRows")
    return GpuSnapshot(
        index=index,
        uuid=q("nvmlDeviceGetUUID"),
        name=q("nvmlDeviceGetName"),
        util_pct=getattr(util, "gpu", None),
        mem_util_pct=getattr(util, "memory", None),
        mem_used_mib=_scale(getattr(mem, "used", None), 1 / MIB),
        mem_total_mib=_scale(getattr(mem, "total", None), 1 / MIB),
        power_w=_scale(q("nvmlDeviceGetPowerUsage"), 1e-3),
        power_limit_w=_scale(q("nvmlDeviceGetEnforcedPowerLimit"), 1e-3),
        energy_j=_scale(q("nvmlDeviceGetTotalEnergyConsumption"), 1e-3),
        temp_c=q("nvmlDeviceGetTemperature", 0),
        mem_temp_c=mem_temp,
        sm_clock_mhz=q("nvmlDeviceGetClockInfo", 1),
        clocks_event_reasons=reasons,
        ecc_sbe_volatile=q("nvmlDeviceGetTotalEccErrors", 0, 0),
        ecc_dbe_volatile=q("nvmlDeviceGetTotalEccErrors", 1, 0),
        ecc_sbe_aggregate=q("nvmlDeviceGetTotalEccErrors", 0, 1),
        ecc_dbe_aggregate=q("nvmlDeviceGetTotalEccErrors", 1, 1),
        remapped_rows_correctable=remap[0] if remap else None,
        remapped_rows_uncorrectable=remap[1] if remap else None,
        remap_failure=bool(remap[3]) if remap else None,
        pcie_replays=q("nvmlDeviceGetPcieReplayCounter"),
    )


def samples_table(snaps: list[GpuSnapshot], node: str, ts: datetime,
                  interval_s: float) -> pa.Table:
    """Samples rows (SCHEMAS["samples"]) of the GPUs that were read (lost ones skipped)."""
    rows = []
    for s in snaps:
        if s.lost:
            continue
        mask = s.clocks_event_reasons
        rows.append({
            "ts": ts, "node": node, "gpu_index": s.index, "gpu_uuid": s.uuid,
            "interval_s": interval_s, "util_pct": s.util_pct, "mem_util_pct": s.mem_util_pct,
            "sm_active_pct": None, "mem_used_mib": s.mem_used_mib, "power_w": s.power_w,
            "energy_j": s.energy_j, "temp_c": s.temp_c, "mem_temp_c": s.mem_temp_c,
            "sm_clock_mhz": s.sm_clock_mhz,
            "throttle_thermal": None if mask is None else bool(mask & THROTTLE_THERMAL),
            "throttle_power": None if mask is None else bool(mask & THROTTLE_POWER),
            "ecc_sbe_volatile": s.ecc_sbe_volatile, "ecc_dbe_volatile": s.ecc_dbe_volatile,
            "xid_last": s.xid_last,
        })
    return pa.Table.from_pylist(rows, schema=SCHEMAS["samples"])


# Counters whose increase is an event: (snapshot field, event kind, label).
_COUNTER_EVENTS = (
    ("ecc_sbe_aggregate", "ecc", "single-bit ECC errors (aggregate)"),
    ("ecc_dbe_aggregate", "ecc", "double-bit ECC errors (aggregate)"),
    ("remapped_rows_correctable", "row_remap", "rows remapped (correctable)"),
    ("remapped_rows_uncorrectable", "row_remap", "rows remapped (uncorrectable)"),
    ("pcie_replays", "pcie_replay", "PCIe replays"),
)


def counter_events(before: GpuSnapshot | None, now: GpuSnapshot) -> list[tuple[str, str]]:
    """``(kind, detail)`` for each error counter that grew since ``before`` (one per kind).

    Nothing on first sight (counters persist across gpulens restarts).
    """
    if before is None or now.lost or before.lost:
        return []
    found: dict[str, list[str]] = {}
    for attr, kind, label in _COUNTER_EVENTS:
        a, b = getattr(before, attr), getattr(now, attr)
        if a is not None and b is not None and b > a:
            found.setdefault(kind, []).append(f"+{b - a} {label} (now {b})")
    return [(kind, "; ".join(parts)) for kind, parts in found.items()]


class NvmlReader:
    """The GPUs of this host through NVML: ``read()`` once per tick."""

    def __init__(self, nvml=None):
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.driver_version = query(nvml, "nvmlSystemGetDriverVersion")
        self.events = query(nvml, "nvmlEventSetCreate")
        self._uuid_index = {}
        for i, h in enumerate(self.handles):
            try:
                self._uuid_index[query(nvml, "nvmlDeviceGetUUID", h)] = i
                if self.events is not None:
                    query(nvml, "nvmlDeviceRegisterEvents", h, XID_CRITICAL, self.events)
            except GpuLost:
                continue
        self.xid_last = dict.fromkeys(range(count), 0)
        self.lost: set[int] = set()

    def poll_xids(self) -> list[tuple[int | None, str | None, int]]:
        """``(gpu index, uuid, XID)`` of critical errors since the last poll; never blocks."""
        out = []
        if self.events is None:
            return out
        wait = getattr(self.nvml, "nvmlEventSetWait_v2", None) or self.nvml.nvmlEventSetWait
        for _ in range(1000):  # bounded: a storm of XIDs must not stall the tick
            try:
                data = wait(self.events, 0)
            except self.nvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending
            uuid = None
            try:
                uuid = query(self.nvml, "nvmlDeviceGetUUID", data.device)
            except GpuLost:
                pass
            index = self._uuid_index.get(uuid)
            out.append((index, uuid, int(data.eventData)))
            if index is not None:
                self.xid_last[index] = int(data.eventData)
        return out

    def read(self, record: dict | None = None) -> list[GpuSnapshot]:
        """A snapshot of every GPU; a lost GPU gives ``GpuSnapshot(index, lost=True)``."""
        out = []
        for i, h in enumerate(self.handles):
            sub = None if record is None else record.setdefault(f"device{i}", {})
            try:
                snap = read_gpu(self.nvml, i, h, sub)
            except GpuLost:
                out.append(GpuSnapshot(index=i, lost=True))
                continue
            out.append(GpuSnapshot(**{**asdict(snap), "xid_last": self.xid_last.get(i, 0)}))
        return out

    def close(self) -> None:
        if self.events is not None:
            query(self.nvml, "nvmlEventSetFree", self.events)
        query(self.nvml, "nvmlShutdown")


def _event_row(ts, node, snap: GpuSnapshot, kind, code, detail):
    index, uuid = snap.index, snap.uuid
    return {"ts": ts, "node": node, "gpu_index": index, "gpu_uuid": uuid, "kind": kind,
            "code": code, "detail": detail}


class NvmlSource:
    """Source ``nvml``: this host's GPUs, read directly each tick."""

    name = "nvml"

    def __init__(self, node: str = "", interval_s: float = default("collect.interval_s"),
                 nvml=None, now=None):
        self.node = node or socket.gethostname()
        self.interval_s = interval_s  # seconds between ticks
        self.reader = NvmlReader(nvml)
        self.dropped = DropCounter()
        self.previous: dict[int, GpuSnapshot] = {}
        self._now = now or (lambda: datetime.now(UTC).replace(tzinfo=None))

    def topology(self) -> dict[str, pa.Table]:
        """The ``gpus`` inventory: UUID, model, power limit (W), memory (MiB)."""
        rows = [{"gpu_uuid": s.uuid, "node": self.node, "gpu_index": s.index,
                 "model": s.name, "tdp_w": s.power_limit_w, "memory_mib": s.mem_total_mib}
                for s in self.reader.read() if not s.lost and s.uuid]
        return {"gpus": pa.Table.from_pylist(rows, schema=SCHEMAS["gpus"])}

    def snapshot(self, ts: datetime) -> tuple[list[GpuSnapshot], pa.Table]:
        """This tick's snapshots and its events (XIDs, newly lost GPUs, counter growth)."""
        events = [_event_row(ts, self.node, GpuSnapshot(index=i, uuid=uuid), "xid", xid,
                             f"NVML XID {xid} critical error")
                  for i, uuid, xid in self.reader.poll_xids()]
        snaps = self.reader.read()
        for s in snaps:
            before = self.previous.get(s.index)
            if s.lost and not (before and before.lost):
                events.append(_event_row(ts, self.node, before or s, "lost", 0,
                                         "NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus"))
            for kind, detail in counter_events(before, s):
                events.append(_event_row(ts, self.node, s, kind, 0, detail))
            self.previous[s.index] = s
        return snaps, pa.Table.from_pylist(events, schema=SCHEMAS["events"])

    def collect(self, ts: datetime) -> list[tuple[str, pa.Table]]:
        snaps, events = self.snapshot(ts)
        samples = samples_table(snaps, self.node, ts, self.interval_s)
        samples, _ = sanitize_samples(samples, self._now(), counter=self.dropped)
        return [("samples", samples), ("events", events)]

    def close(self) -> None:
        self.reader.close()


def record(path: str, nvml=None) -> int:
    """Dump every NVML call of one read of every GPU as JSON to ``path``."""
    reader = NvmlReader(nvml)
    calls: dict[str, Any] = {}
    reader.read(record=calls)
    doc = {
        "recorded_at": datetime.now(UTC).isoformat(),
        "host": socket.gethostname(),
        "nvmlSystemGetDriverVersion": reader.driver_version,
        "nvmlDeviceGetCount": len(reader.handles),
        "devices": [calls.get(f"device{i}", {}) for i in range(len(reader.handles))],
    }
    reader.close()
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
    return len(reader.handles)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collector.nvml",
                                     description="Read or record this host's GPUs.")
    parser.add_argument("--record", metavar="FILE",
                        help="write every NVML reading as JSON (a test fixture)")
    args = parser.parse_args(argv)
    try:
        if args.record:
            n = record(args.record)
            print(f"recorded {n} GPU(s) to {args.record}")
            return 0
        reader = NvmlReader()
        for s in reader.read():
            print(json.dumps({f.name: getattr(s, f.name) for f in fields(s)}))
        reader.close()
    except ImportError:
        print("error: pynvml is missing; pip install nvidia-ml-py", file=sys.stderr)
        return 2
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded...
        print(f"error: cannot read NVML ({exc}); is the NVIDIA driver loaded?",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

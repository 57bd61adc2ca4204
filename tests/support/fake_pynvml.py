"""A fake ``pynvml`` module replaying a recording (``python -m collector.nvml --record``).

    nvml = FakeNvml.load("tests/fixtures/nvml/h100_hgx.json")
    source = NvmlSource(node="n1", nvml=nvml)
    nvml.set(2, "nvmlDeviceGetPowerUsage", 650_000)        # change a reading
    nvml.unsupported(0, "nvmlDeviceGetPcieReplayCounter")  # NVML_ERROR_NOT_SUPPORTED
    nvml.lose(3)                                           # NVML_ERROR_GPU_IS_LOST
    nvml.push_xid(1, 79)                                   # an XID critical error

Functions follow nvidia-ml-py's names and signatures; results are SimpleNamespaces with
the fields of NVML's structs. Only what collector/nvml.py calls is provided.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from pathlib import Path
from types import SimpleNamespace

NOT_SUPPORTED = 3
TIMEOUT = 10
GPU_IS_LOST = 15


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class Handle(SimpleNamespace):
    """A device handle: only its index matters."""


def _ns(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    return value


class FakeNvml:
    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_ERROR_TIMEOUT = TIMEOUT

    def __init__(self, doc: dict):
        self.doc = copy.deepcopy(doc)
        self.devices: list[dict] = self.doc["devices"]
        self.lost: set[int] = set()
        self.pending: deque = deque()
        self.registered: set[int] = set()
        self.initialised = 0
        self.calls = 0

    @classmethod
    def load(cls, path: str | Path) -> FakeNvml:
        return cls(json.loads(Path(path).read_text()))

    # -- test controls ------------------------------------------------------------
    def set(self, index: int, key: str, value) -> None:
        self.devices[index][key] = value

    def unsupported(self, index: int, key: str) -> None:
        self.devices[index][key] = {"error": NOT_SUPPORTED}

    def lose(self, index: int) -> None:
        self.lost.add(index)

    def push_xid(self, index: int, xid: int) -> None:
        self.pending.append((index, xid))

    # -- the pynvml API -----------------------------------------------------------
    def nvmlInit(self):
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        return self.doc["nvmlSystemGetDriverVersion"]

    def nvmlDeviceGetCount(self):
        return self.doc["nvmlDeviceGetCount"]

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.devices):
            raise NVMLError(2)  # INVALID_ARGUMENT
        return Handle(index=index)

    def _get(self, handle, name, *args):
        self.calls += 1
        if handle.index in self.lost:
            raise NVMLError(GPU_IS_LOST)
        key = f"{name}({','.join(map(str, args))})" if args else name
        dev = self.devices[handle.index]
        if key not in dev:
            raise NVMLError(NOT_SUPPORTED)
        value = dev[key]
        if isinstance(value, dict) and set(value) == {"error"}:
            raise NVMLError(value["error"])
        return value

    def __getattr__(self, name):
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: _ns(self._get(handle, name, *args))
        raise AttributeError(name)

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        out = []
        for fid in field_ids:
            v = self._get(handle, "nvmlDeviceGetFieldValues", fid)
            if v is None:
                out.append(SimpleNamespace(nvmlReturn=NOT_SUPPORTED, valueType=0,
                                           value=SimpleNamespace(dVal=0.0)))
            else:
                out.append(SimpleNamespace(nvmlReturn=0, valueType=0,
                                           value=SimpleNamespace(dVal=float(v))))
        return out

    def nvmlDeviceGetRemappedRows(self, handle):
        return tuple(self._get(handle, "nvmlDeviceGetRemappedRows"))

    # events
    def nvmlEventSetCreate(self):
        return SimpleNamespace(kind="event set")

    def nvmlEventSetFree(self, event_set):
        return None

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        if handle.index in self.lost:
            raise NVMLError(GPU_IS_LOST)
        self.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        assert timeout_ms == 0, "the collector must never block on NVML events"
        if not self.pending:
            raise NVMLError(TIMEOUT)
        index, xid = self.pending.popleft()
        return SimpleNamespace(device=Handle(index=index), eventType=8, eventData=xid,
                               gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)

"""dcgm-exporter scrapes -> wide GPU sample rows (warehouse.schema.SCHEMAS["samples"]).

Pure: the caller fetches ``/metrics`` from each node's exporter (transport lives
elsewhere) and hands the texts in; :func:`parse_scrapes` parses them all at once with the
vectorised parser of :mod:`collector.promtext`.

Identity of a row: ``node`` is the exporter's ``Hostname`` label (``hostname`` in some
4.x builds), or the target key when the label is absent or empty; ``gpu_index`` is label
``gpu``; ``gpu_uuid`` is label ``UUID`` (``uuid`` in some exporter configurations).
Lines without a ``gpu`` label (NVSwitch, CPU or exporter-internal metrics) are ignored.
When one GPU has several series of a field (MIG instances, or pod labels in Kubernetes
mode) the first line wins.

Values DCGM uses for "blank / not found / not supported / not permissioned" are stored
as NULL, never as numbers: the 16 values above each base of dcgm_structs.h,
``DCGM_INT32_BLANK`` 0x7ffffff0, ``DCGM_INT64_BLANK`` 0x7ffffffffffffff0 and
``DCGM_FP64_BLANK`` 2**47. NaN is NULL too.

XID: the exporter's ``DCGM_FI_DEV_XID_ERRORS`` gauge holds the last XID seen since the
exporter started, so an XID is an *event* only when the gauge changes; see
:func:`xid_events`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.promtext import label_values, parse_texts_lenient
from warehouse.clock import naive_utc as _naive_utc
from warehouse.schema import SCHEMAS

__all__ = [
    "FIELDS",
    "DcgmCollector",
    "build_samples",
    "fill_grid",
    "ScrapeResult",
    "THROTTLE_POWER",
    "THROTTLE_THERMAL",
    "parse_scrapes",
    "xid_events",
]

# NVML clocks-event ("throttle") reason bits, DCGM_FI_DEV_CLOCK(S)_{THROTTLE,EVENT}_REASONS.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8  # thermal or power brake; the specific bits below say which
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
THROTTLE_THERMAL = SW_THERMAL | HW_THERMAL | HW_SLOWDOWN
THROTTLE_POWER = SW_POWER_CAP | HW_POWER_BRAKE

INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 2.0**47


@dataclass(frozen=True)
class Field:
    """One DCGM field: exporter metric name(s), the sample column, and unit conversion.

    ``column_value = exporter_value * scale``. ``dcgm_type`` is DCGM's field type
    ('i' int64, 'd' double), which decides how the exporter prints it.
    """

    names: tuple[str, ...]
    column: str
    scale: float
    dcgm_type: str
    prom_type: str
    help: str


FIELDS: tuple[Field, ...] = (
    Field(("DCGM_FI_DEV_SM_CLOCK",), "sm_clock_mhz", 1.0, "i", "gauge",
          "SM clock frequency (in MHz)."),
    Field(("DCGM_FI_DEV_MEMORY_TEMP",), "mem_temp_c", 1.0, "i", "gauge",
          "Memory temperature (in C)."),
    Field(("DCGM_FI_DEV_GPU_TEMP",), "temp_c", 1.0, "i", "gauge", "GPU temperature (in C)."),
    Field(("DCGM_FI_DEV_POWER_USAGE",), "power_w", 1.0, "d", "gauge", "Power draw (in W)."),
    Field(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), "energy_j", 1e-3, "i", "counter",
          "Total energy consumption since boot (in mJ)."),
    Field(("DCGM_FI_DEV_GPU_UTIL",), "util_pct", 1.0, "i", "gauge", "GPU utilization (in %)."),
    Field(("DCGM_FI_DEV_MEM_COPY_UTIL",), "mem_util_pct", 1.0, "i", "gauge",
          "Memory utilization (in %)."),
    Field(("DCGM_FI_DEV_FB_USED",), "mem_used_mib", 1.0, "i", "gauge",
          "Framebuffer memory used (in MiB)."),
    Field(("DCGM_FI_PROF_SM_ACTIVE",), "sm_active_pct", 100.0, "d", "gauge",
          "The ratio of cycles an SM has at least 1 warp assigned (in %)."),
    Field(("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
          "throttle_mask", 1.0, "i", "gauge", "Current clock event reasons (bitmask)."),
    Field(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",), "ecc_sbe_volatile", 1.0, "i", "counter",
          "Total number of single-bit volatile ECC errors."),
    Field(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",), "ecc_dbe_volatile", 1.0, "i", "counter",
          "Total number of double-bit volatile ECC errors."),
    Field(("DCGM_FI_DEV_XID_ERRORS",), "xid_last", 1.0, "i", "gauge",
          "Value of the last XID error encountered."),
)
_FIELD_OF_NAME = {n: i for i, f in enumerate(FIELDS) for n in f.names}
# Preference among a field's alternative names: lower rank wins.
_RANK_OF_NAME = {n: r for f in FIELDS for r, n in enumerate(f.names)}


@dataclass
class ScrapeResult:
    """Samples (SCHEMAS["samples"]), XID events (SCHEMAS["events"]) and per-target errors."""

    samples: pa.Table
    errors: dict[str, str] = field(default_factory=dict)
    events: pa.Table = field(default_factory=lambda: SCHEMAS["events"].empty_table())


def _blank(v: np.ndarray, int32_blank: bool) -> np.ndarray:
    """True where ``v`` is NaN or one of DCGM's blank sentinels."""
    out = np.isnan(v) | ((v >= FP64_BLANK) & (v <= FP64_BLANK + 15))
    out |= v >= float(INT64_BLANK) - 1024.0  # float64 cannot tell the 16 apart
    if int32_blank:
        out |= (v >= INT32_BLANK) & (v <= INT32_BLANK + 15)
    return out


def _gpu_labels(labels: pa.DictionaryArray) -> tuple[np.ndarray, list, list]:
    """Per unique label set: gpu index (-1 if none), uuid, hostname."""
    uniq = labels.dictionary
    gpu = label_values(uniq, "gpu")
    ok = pc.fill_null(pc.match_substring_regex(gpu, r"^[0-9]{1,4}$"), False)
    gpu_i = pc.fill_null(pc.cast(pc.if_else(ok, gpu, None), pa.int64()), -1).to_numpy()
    uuid = pc.coalesce(label_values(uniq, "UUID"), label_values(uniq, "uuid")).to_pylist()
    host = pc.coalesce(label_values(uniq, "Hostname"),
                       label_values(uniq, "hostname")).to_pylist()
    return gpu_i, uuid, host


def parse_scrapes(
    texts: Mapping[str, str],
    ts: datetime,
    interval_s: float = 15.0,
    nodes: Mapping[str, str] | None = None,
) -> ScrapeResult:
    """Parse dcgm-exporter texts (``target -> text``) into one samples row per GPU.

    ``ts`` is the scrape time (zone-aware is converted to naive UTC); ``interval_s`` the
    sampling period each row stands for, seconds. A target whose text is not valid
    exposition format, or that carries no GPU metric at all, is left out and reported in
    ``errors``; the other targets are unaffected. ``nodes`` maps a target to its node
    name when the exporter's ``Hostname`` label cannot be trusted (in Kubernetes it is
    the exporter pod's name); a mapped target's name wins over the label.
    """
    table, errors = parse_texts_lenient(texts)
    names = table["name"].combine_chunks()
    labels = table["labels"].combine_chunks()
    target = table["target"].combine_chunks()
    targets = target.dictionary.to_pylist() if len(target) else list(texts)

    dict_names = names.dictionary.to_pylist()
    fid_of = np.array([_FIELD_OF_NAME.get(n, -1) for n in dict_names] + [-1], np.int64)
    rank_of = np.array([_RANK_OF_NAME.get(n, 0) for n in dict_names] + [0], np.int64)
    fid = fid_of[names.indices.to_numpy()] if len(names) else np.empty(0, np.int64)
    rank = rank_of[names.indices.to_numpy()] if len(names) else np.empty(0, np.int64)
    lab_idx = labels.indices.to_numpy() if len(labels) else np.empty(0, np.int64)
    gpu_u, uuid_u, host_u = _gpu_labels(labels) if len(labels) else (np.empty(0), [], [])
    gpu = gpu_u[lab_idx] if len(lab_idx) else np.empty(0, np.int64)
    tgt = target.indices.to_numpy().astype(np.int64) if len(target) else np.empty(0, np.int64)
    value = table["value"].to_numpy()

    keep = (fid >= 0) & (gpu >= 0)
    fid, rank, gpu, tgt, value, lab_idx = (a[keep] for a in (fid, rank, gpu, tgt, value, lab_idx))
    key = tgt * 65536 + gpu
    ukey, first_row, row = np.unique(key, return_index=True, return_inverse=True)
    present = set((ukey // 65536).tolist())
    for i, t in enumerate(targets):
        if t not in errors and t in texts and i not in present:
            errors[t] = "no GPU metrics (no DCGM_FI_* line with a gpu label)"

    grid = fill_grid(len(ukey), row, fid, rank, value)

    host = [host_u[i] for i in lab_idx[first_row]]
    nodes = nodes or {}
    node = []
    for h, k in zip(host, ukey, strict=True):
        t = targets[int(k // 65536)]
        node.append(nodes.get(t) or h or t)
    uuid = [uuid_u[i] for i in lab_idx[first_row]]
    samples = build_samples(ts, node, (ukey % 65536).astype(np.int16), uuid, grid, interval_s)
    return ScrapeResult(samples=samples, errors=errors)


def fill_grid(
    nrows: int, row: np.ndarray, fid: np.ndarray, rank: np.ndarray, value: np.ndarray
) -> np.ndarray:
    """An ``nrows x len(FIELDS)`` grid of values from observations (NaN where none).

    Observation ``i`` is field ``fid[i]`` of row ``row[i]``. When a cell has several
    (MIG instances, pod labels, two Prometheus jobs scraping one exporter) the first
    wins, preferring a field's first-listed name (lower ``rank``).
    """
    nf = len(FIELDS)
    order = np.lexsort((np.arange(len(row)), rank, row * nf + fid))
    cell = (row * nf + fid)[order]
    firsts = order[np.r_[True, cell[1:] != cell[:-1]]] if len(cell) else order
    grid = np.full((nrows, nf), np.nan)
    grid[row[firsts], fid[firsts]] = value[firsts]
    return grid


def build_samples(
    ts: datetime | list[datetime] | np.ndarray,
    node: list[str],
    gpu_index: np.ndarray,
    uuid: list[str | None],
    grid: np.ndarray,
    interval_s: float = 15.0,
) -> pa.Table:
    """Samples rows from exporter values: ``grid[row, j]`` is field ``FIELDS[j]``.

    ``grid`` holds values as the exporter prints them (NaN where absent); this applies
    each field's scale and turns DCGM's blank sentinels into NULL. ``ts`` is one scrape
    time for all rows, or one per row (naive UTC or zone-aware). Shared by the
    exporter-text path (:func:`parse_scrapes`) and the Prometheus path.
    """
    n = len(node)
    cols: dict[str, np.ndarray] = {}
    for j, f in enumerate(FIELDS):
        v = grid[:, j]
        cols[f.column] = np.where(_blank(v, int32_blank=f.column != "energy_j"), np.nan,
                                  v * f.scale)

    def f32(name: str) -> pa.Array:
        return pa.array(cols[name], pa.float32(), from_pandas=True)

    def i64(name: str, typ: pa.DataType) -> pa.Array:
        v = cols[name]
        return pa.array(np.nan_to_num(v).astype(np.int64), typ, mask=np.isnan(v))

    if isinstance(ts, datetime):
        ts_col = pa.array([_naive_utc(ts)] * n, pa.timestamp("us"))
    else:
        ts_col = pa.array(ts, pa.timestamp("us")) if n else pa.array([], pa.timestamp("us"))
    mask = cols["throttle_mask"]
    bits = np.nan_to_num(mask).astype(np.int64)
    no_mask = np.isnan(mask)
    return pa.table(
        {
            "ts": ts_col,
            "node": pa.array(node, pa.string()),
            "gpu_index": pa.array(np.asarray(gpu_index, np.int16), pa.int16()),
            "gpu_uuid": pa.array(uuid, pa.string()),
            "interval_s": pa.array(np.full(n, interval_s, np.float32), pa.float32()),
            "util_pct": f32("util_pct"),
            "mem_util_pct": f32("mem_util_pct"),
            "sm_active_pct": f32("sm_active_pct"),
            "mem_used_mib": f32("mem_used_mib"),
            "power_w": f32("power_w"),
            "energy_j": pa.array(cols["energy_j"], pa.float64(), from_pandas=True),
            "temp_c": f32("temp_c"),
            "mem_temp_c": f32("mem_temp_c"),
            "sm_clock_mhz": f32("sm_clock_mhz"),
            "throttle_thermal": pa.array((bits & THROTTLE_THERMAL) != 0, mask=no_mask),
            "throttle_power": pa.array((bits & THROTTLE_POWER) != 0, mask=no_mask),
            "ecc_sbe_volatile": i64("ecc_sbe_volatile", pa.int64()),
            "ecc_dbe_volatile": i64("ecc_dbe_volatile", pa.int64()),
            "xid_last": i64("xid_last", pa.int32()),
        },
        schema=SCHEMAS["samples"],
    )


def xid_events(
    previous: Mapping[tuple[str, int], int], samples: pa.Table, ts: datetime
) -> tuple[pa.Table, dict[tuple[str, int], int]]:
    """XID events from the change of each GPU's last-XID gauge since the previous scrape.

    ``previous`` maps ``(node, gpu_index)`` to the gauge's last value. An event
    (kind='xid', code=the XID) is emitted when a GPU's gauge changes to a non-zero value.
    On the first sight of a GPU nothing is emitted, even if its gauge is already
    non-zero: the gauge keeps its value for the exporter's lifetime, so reporting it
    would repeat an old XID after every gpulens restart. Limits of a last-value gauge:
    the same XID twice in a row, or several XIDs within one interval, show as one event.
    Rows with a NULL gauge leave the state unchanged. Returns ``(events, new_state)``;
    ``previous`` is not modified.
    """
    state = dict(previous)
    rows = []
    cols = samples.select(["node", "gpu_index", "gpu_uuid", "xid_last"]).to_pydict()
    for node, gpu, uuid, xid in zip(*cols.values(), strict=True):
        if xid is None:
            continue
        key = (node, gpu)
        before = state.get(key)
        state[key] = xid
        if before is not None and xid != before and xid != 0:
            detail = f"DCGM_FI_DEV_XID_ERRORS changed from {before} to {xid}"
            rows.append((node, gpu, uuid, xid, detail))
    when = _naive_utc(ts)
    events = pa.table(
        {
            "ts": pa.array([when] * len(rows), pa.timestamp("us")),
            "node": pa.array([r[0] for r in rows], pa.string()),
            "gpu_index": pa.array([r[1] for r in rows], pa.int16()),
            "gpu_uuid": pa.array([r[2] for r in rows], pa.string()),
            "kind": pa.array(["xid"] * len(rows), pa.string()),
            "code": pa.array([r[3] for r in rows], pa.int32()),
            "detail": pa.array([r[4] for r in rows], pa.string()),
        },
        schema=SCHEMAS["events"],
    )
    return events, state


class DcgmCollector:
    """Stateful wrapper: parses scrapes and remembers each GPU's last XID between them."""

    def __init__(self, interval_s: float = 15.0):
        self.interval_s = interval_s
        self.xid_state: dict[tuple[str, int], int] = {}

    def collect(
        self, texts: Mapping[str, str], ts: datetime, nodes: Mapping[str, str] | None = None
    ) -> ScrapeResult:
        """Samples, XID events and per-target errors of one round of scrapes."""
        result = parse_scrapes(texts, ts, self.interval_s, nodes)
        result.events, self.xid_state = xid_events(self.xid_state, result.samples, ts)
        return result

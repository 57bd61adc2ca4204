"""dcgm-exporter scrapes -> wide GPU sample rows (warehouse.schema.SCHEMAS["samples"]).

Pure: the caller fetches ``/metrics`` from each node's exporter (transport lives
elsewhere) and hands the texts in; :func:`parse_scrapes` parses them all at once with the
vectorised parser of :mod:`collector.promtext`.

Identity of a row: ``node`` as :mod:`collector.nodenames` says (a name the operator gave
for the target, else the exporter's ``Hostname``/``hostname`` label, else the target's
host without its port, mapped to scheduler names); ``gpu_index`` is label ``gpu`` (0-31,
DCGM_MAX_NUM_DEVICES; another value is refused and counted); ``gpu_uuid`` is label
``UUID`` (``uuid`` in some exporter configurations). Lines without a ``gpu`` label
(NVSwitch, CPU or exporter-internal metrics) are ignored. Several series of one GPU's
field: per MIG instance (``GPU_I_ID``) the first line wins (pod labels repeat a value),
then the instances make the GPU's value (:func:`fill_grid`); each instance's own figures
go to ``mig_samples`` rows (:func:`instance_rows`).

One bad thing costs one thing (issue 12): a bad line costs that line, an impossible
value that value (NULL); both are counted per reason (``ScrapeResult.dropped``). DCGM's
blank values ("blank / not found / not supported / not permissioned") are NULL, never
numbers, and not counted: the families of dcgm_structs.h's ``DCGM_*_IS_BLANK`` macros
(:func:`clean_values`). NaN is NULL too.

XID: the exporter's ``DCGM_FI_DEV_XID_ERRORS`` gauge holds the last XID seen since the
exporter started, so an XID is an *event* only when the gauge changes; see
:func:`xid_events`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.nodenames import NodeNames, host_of
from collector.promtext import label_values, parse_texts_lenient
from gpulens.settings import default
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
    Field(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), "tensor_active_pct", 100.0, "d", "gauge",
          "Ratio of cycles the tensor (HMMA) pipe is active (in %)."),
    Field(("DCGM_FI_PROF_DRAM_ACTIVE",), "dram_active_pct", 100.0, "d", "gauge",
          "Ratio of cycles the device memory interface is active (in %)."),
    Field(("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
          "throttle_mask", 1.0, "i", "gauge", "Current clock event reasons (bitmask)."),
    Field(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",), "ecc_sbe_volatile", 1.0, "i", "counter",
          "Total number of single-bit volatile ECC errors."),
    Field(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",), "ecc_dbe_volatile", 1.0, "i", "counter",
          "Total number of double-bit volatile ECC errors."),
    Field(("DCGM_FI_DEV_XID_ERRORS",), "xid_last", 1.0, "i", "gauge",
          "Value of the last XID error encountered."),
)
# Not stored as such: GPU utilisation where DCGM_FI_DEV_GPU_UTIL is absent (MIG GPUs).
GR_ACTIVE = Field(("DCGM_FI_PROF_GR_ENGINE_ACTIVE",), "gr_active_pct", 100.0, "d", "gauge",
                  "Ratio of time the graphics engine is active (in %).")
FIELDS = FIELDS + (GR_ACTIVE,)
_FIELD_OF_NAME = {n: i for i, f in enumerate(FIELDS) for n in f.names}
# Preference among a field's alternative names: lower rank wins.
_RANK_OF_NAME = {n: r for f in FIELDS for r, n in enumerate(f.names)}
_COL = {f.column: j for j, f in enumerate(FIELDS)}

# How the series of a MIG GPU's instances (labels GPU_I_ID, GPU_I_PROFILE) make the
# GPU's value: memory adds up; activity ratios are weighted by each instance's compute
# slices (the N of an "Ng.XXgb" profile) over the GPU's slices; other fields are the
# GPU's own, repeated on every instance's series (the first is taken).
_MIG_SUM = frozenset({"mem_used_mib"})
_MIG_WEIGHTED = frozenset({"sm_active_pct", "gr_active_pct", "tensor_active_pct",
                           "dram_active_pct"})
# Compute slices of a whole GPU in MIG mode (NVIDIA MIG user guide, "Supported
# profiles"): 4 on an A30, 7 on A100, H100, H200 and later.
MIG_SLICES_DEFAULT = 7
MIG_SLICES = {"A30": 4}

# DCGM's limits (dcgm_structs.h).
DCGM_MAX_NUM_DEVICES = 32  # GPU indices are 0..31
INT32_MAX = 2**31 - 1
EXACT_INT = 2.0**53  # above, float64 (how the text carries numbers) skips integers

# Reasons under which refused values and lines are counted (source.dropped).
GPU_INDEX = "row: gpu label not a GPU index 0-31"
NO_GPU = "no GPU metrics (no DCGM_FI_* line with a gpu label 0-31)"


@dataclass
class ScrapeResult:
    """Samples (SCHEMAS["samples"]), XID events (SCHEMAS["events"]), per-target errors
    (a target listed here delivered no row) and counts of what was refused, per reason."""

    samples: pa.Table
    errors: dict[str, str] = field(default_factory=dict)
    events: pa.Table = field(default_factory=lambda: SCHEMAS["events"].empty_table())
    dropped: Counter = field(default_factory=Counter)
    instances: pa.Table = field(default_factory=lambda: SCHEMAS["mig_samples"].empty_table())


_INT_COLUMNS = frozenset({"xid_last", "ecc_sbe_volatile", "ecc_dbe_volatile", "throttle_mask"})


def clean_values(value: np.ndarray, fid: np.ndarray, counts: Counter | None = None
                 ) -> np.ndarray:
    """``value`` (as exporters print them) with blanks and impossible values as NaN.

    Observation ``i`` is field ``FIELDS[fid[i]]``. DCGM's blank families become NaN
    silently (they mean "no value"; ``dcgm_structs.h``: an int field's value in
    [``DCGM_INT32_BLANK``, 2**31) or >= ``DCGM_INT64_BLANK``, a double field's value >=
    ``DCGM_FP64_BLANK`` = 2**47), as does NaN. The energy counter legitimately passes
    through the int32 family, so only the int64 one is blank there. Counted in
    ``counts`` under ``"value: <column> <why>"`` and made NaN: an infinity, a value
    beyond 2**53 (the text's float64 cannot hold it exactly), a non-integer where the
    column stores integers (XID, ECC counts, the clock-event bitmask), and an XID beyond
    int32 (4294967295, 3000000000).
    """
    value = np.array(value, dtype=np.float64, copy=True)
    if not len(value):
        return value
    nf = len(FIELDS)
    is_int = np.array([f.dcgm_type == "i" for f in FIELDS] + [False])[fid]
    int_col = np.array([f.column in _INT_COLUMNS for f in FIELDS] + [False])[fid]
    i32_blank = np.array([f.dcgm_type == "i" and f.column != "energy_j" for f in FIELDS]
                         + [False])[fid]
    blank = np.isnan(value)
    blank |= ~is_int & (value >= FP64_BLANK)
    # float64 rounds the int64 family; an int field's infinity is no int64 at all
    blank |= is_int & (value >= float(INT64_BLANK) - 1024.0) & np.isfinite(value)
    blank |= i32_blank & (value >= INT32_BLANK) & (value <= INT32_MAX)
    finite = np.isfinite(value)
    reasons = [("not finite", ~blank & ~finite)]
    with np.errstate(invalid="ignore"):
        reasons.append(("not an integer", ~blank & finite & int_col
                        & (np.floor(value) != value)))
        reasons.append(("beyond 2^53", ~blank & finite & (np.abs(value) > EXACT_INT)))
        reasons.append(("outside int32", ~blank & finite & (fid == _COL["xid_last"])
                        & ((value > INT32_MAX) | (value < -INT32_MAX - 1))))
    bad = np.zeros(len(value), dtype=bool)
    for why, mask in reasons:
        mask &= ~bad
        if counts is not None and mask.any():
            for j, n in enumerate(np.bincount(fid[mask], minlength=nf).tolist()):
                if n:
                    counts[f"value: {FIELDS[j].column} {why}"] += n
        bad |= mask
    value[blank | bad] = np.nan
    return value


def mig_slices(profile: str | None) -> int:
    """Compute slices of a MIG profile name: ``"3g.40gb"`` -> 3; 1 when unreadable."""
    if profile:
        head = profile.split("g.", 1)[0]
        if head.isdigit() and 0 < int(head) <= 8:
            return int(head)
    return 1


def gpu_slices(model: str | None) -> int:
    """Compute slices of a whole GPU of ``model`` (its modelName label) in MIG mode."""
    for key, n in MIG_SLICES.items():
        if model and key in model:
            return n
    return MIG_SLICES_DEFAULT


def gpu_index(labels: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per label set: the GPU index from label ``gpu`` (-1 where there is none) and
    whether a ``gpu`` label was present but is not an index 0..31 (refused)."""
    gpu = label_values(labels, "gpu")
    ok = pc.fill_null(pc.match_substring_regex(gpu, r"^[0-9]{1,2}$"), False)
    idx = pc.fill_null(pc.cast(pc.if_else(ok, gpu, None), pa.int64()), -1).to_numpy()
    idx = np.where(idx < DCGM_MAX_NUM_DEVICES, idx, -1)
    refused = (idx < 0) & pc.is_valid(gpu).to_numpy(zero_copy_only=False)
    return idx, refused


def _either(labels: pa.Array, name: str, other: str) -> list[str | None]:
    """Label ``name``, else label ``other``, per label set (``other`` only where needed)."""
    first = label_values(labels, name)
    missing = pc.is_null(first)
    if pc.any(missing).as_py():
        first = pc.coalesce(first, label_values(pc.if_else(missing, labels, None), other))
    return first.to_pylist()


def _label_sets(labels: pa.Array) -> dict[str, object]:
    """Per unique label set: gpu index, refused flag, uuid, host, MIG instance, weights."""
    gpu_i, refused = gpu_index(labels)
    uuid = _either(labels, "UUID", "uuid")
    host = _either(labels, "Hostname", "hostname")
    inst = label_values(labels, "GPU_I_ID")
    ok = pc.fill_null(pc.match_substring_regex(inst, r"^[0-9]{1,6}$"), False)
    inst_i = pc.fill_null(pc.cast(pc.if_else(ok, inst, None), pa.int64()), -1).to_numpy()
    weight = np.ones(len(labels))
    slices = np.full(len(labels), float(MIG_SLICES_DEFAULT))
    profile = np.full(len(labels), None, dtype=object)
    mig = np.flatnonzero(inst_i >= 0)
    if len(mig):  # profiles and models matter for MIG instances only
        sub = labels.take(pa.array(mig))
        profile[mig] = label_values(sub, "GPU_I_PROFILE").to_pylist()
        weight[mig] = [mig_slices(p) for p in profile[mig]]
        slices[mig] = [gpu_slices(m) for m in label_values(sub, "modelName").to_pylist()]
    return {"gpu": gpu_i, "refused": refused, "uuid": uuid, "host": host, "inst": inst_i,
            "weight": weight, "slices": slices, "profile": profile}


def parse_scrapes(
    texts: Mapping[str, str],
    ts: datetime,
    interval_s: float = default("collect.interval_s"),
    nodes: Mapping[str, str] | None = None,
    names: NodeNames | None = None,
) -> ScrapeResult:
    """Parse dcgm-exporter texts (``target -> text``) into one samples row per GPU.

    ``ts`` is the scrape time (zone-aware is converted to naive UTC); ``interval_s`` the
    sampling period each row stands for, seconds. A bad line costs that line, a bad
    value that value (NULL), both counted in ``dropped``; a target that yields no GPU
    row (nothing but bad lines, or no GPU metric at all) is reported in ``errors``; the
    other targets are unaffected. Node names follow :mod:`collector.nodenames`:
    ``nodes`` maps a target to the node an operator named for it (it wins over the
    exporter's ``Hostname`` label, which in Kubernetes is the exporter pod's name);
    otherwise the label or the target's host, mapped by ``names``.
    """
    dropped: Counter = Counter()
    table, bad_lines = parse_texts_lenient(texts, counts=dropped)
    names_ = table["name"].combine_chunks()
    labels = table["labels"].combine_chunks()
    target = table["target"].combine_chunks()
    targets = list(texts)
    if len(target):
        tpos = {t: i for i, t in enumerate(targets)}
        remap = np.array([tpos[t] for t in target.dictionary.to_pylist()], np.int64)
        tgt = remap[target.indices.to_numpy()]
    else:
        tgt = np.empty(0, np.int64)

    dict_names = names_.dictionary.to_pylist() if len(names_) else []
    fid_of = np.array([_FIELD_OF_NAME.get(n, -1) for n in dict_names] + [-1], np.int64)
    rank_of = np.array([_RANK_OF_NAME.get(n, 0) for n in dict_names] + [0], np.int64)
    name_idx = names_.indices.to_numpy() if len(names_) else np.empty(0, np.int64)
    fid, rank = fid_of[name_idx], rank_of[name_idx]
    lab_idx = labels.indices.to_numpy() if len(labels) else np.empty(0, np.int64)
    sets = _label_sets(labels.dictionary) if len(labels) else None
    gpu = sets["gpu"][lab_idx] if sets else np.empty(0, np.int64)
    value = table["value"].to_numpy()

    if sets is not None:
        refused = (fid >= 0) & sets["refused"][lab_idx]
        if refused.any():
            dropped[GPU_INDEX] += int(refused.sum())
    keep = (fid >= 0) & (gpu >= 0)
    fid, rank, gpu, tgt, value, lab_idx = (a[keep] for a in (fid, rank, gpu, tgt, value, lab_idx))
    key = tgt * DCGM_MAX_NUM_DEVICES + gpu
    ukey, first_row, row = np.unique(key, return_index=True, return_inverse=True)
    present = set((ukey // DCGM_MAX_NUM_DEVICES).tolist())
    errors: dict[str, str] = {}
    for i, t in enumerate(targets):
        if i not in present:
            errors[t] = bad_lines.get(t) or NO_GPU

    inst = sets["inst"][lab_idx] if sets else np.empty(0, np.int64)
    weight = sets["weight"][lab_idx] if sets else np.empty(0)
    slices = sets["slices"][lab_idx[first_row]] if sets else np.empty(0)
    grid = fill_grid(len(ukey), row, fid, rank, value, inst=inst, weight=weight,
                     slices=slices, counts=dropped)

    names = names or NodeNames()
    nodes = nodes or {}
    host = [sets["host"][i] for i in lab_idx[first_row]] if sets else []
    node = []
    for h, k in zip(host, ukey.tolist(), strict=True):
        t = targets[k // DCGM_MAX_NUM_DEVICES]
        node.append(nodes.get(t) or names(h or host_of(t) or t))
    uuid = [sets["uuid"][i] for i in lab_idx[first_row]] if sets else []
    gpu_of_row = (ukey % DCGM_MAX_NUM_DEVICES).astype(np.int16)
    samples = build_samples(ts, node, gpu_of_row, uuid, grid, interval_s)
    profile = sets["profile"][lab_idx] if sets else np.empty(0, object)
    instances = instance_rows(ts, node, gpu_of_row, row, fid, inst, value, profile)
    return ScrapeResult(samples=samples, errors=errors, dropped=dropped, instances=instances)


_INSTANCE_COLUMNS = ("mem_used_mib", "gr_active_pct", "sm_active_pct")


def instance_rows(
    ts: datetime | np.ndarray,
    node: list[str],
    gpu_index: np.ndarray,
    row: np.ndarray,
    fid: np.ndarray,
    inst: np.ndarray,
    value: np.ndarray,
    profile: np.ndarray,
) -> pa.Table:
    """One ``mig_samples`` row per MIG instance of each GPU row: its own memory and
    activity (SCHEMAS["mig_samples"]), the first series winning as in :func:`fill_grid`.

    ``ts``, ``node`` and ``gpu_index`` describe the GPU rows (``ts`` one time or one per
    row); observation ``i`` is field ``fid[i]`` of GPU row ``row[i]``, instance
    ``inst[i]`` (-1: not an instance) with profile ``profile[i]``. Blank and impossible
    values are NULL (counted once, by :func:`fill_grid`).
    """
    cols = np.array([_COL[c] for c in _INSTANCE_COLUMNS])
    m = (inst >= 0) & np.isin(fid, cols)
    if not m.any():
        return SCHEMAS["mig_samples"].empty_table()
    r, f, k, p = row[m], fid[m], inst[m], profile[m]
    v = clean_values(value[m], f)
    key = r.astype(np.int64) * 1_000_000 + k
    ukey, first, idx = np.unique(key, return_index=True, return_inverse=True)
    col = np.searchsorted(np.sort(cols), f)
    order = np.lexsort((np.arange(len(idx)), col, idx))
    cell = (idx * len(cols) + col)[order]
    firsts = order[np.r_[True, cell[1:] != cell[:-1]]]
    out = np.full((len(ukey), len(cols)), np.nan)
    out[idx[firsts], col[firsts]] = v[firsts]
    gpu_rows = ukey // 1_000_000
    ts_col = (pa.array([_naive_utc(ts)] * len(ukey), pa.timestamp("us"))
              if isinstance(ts, datetime) else pa.array(np.asarray(ts)[gpu_rows],
                                                        pa.timestamp("us")))
    by_col = dict(zip([FIELDS[j].column for j in np.sort(cols)], out.T, strict=True))
    return pa.table(
        {
            "ts": ts_col,
            "node": pa.array([node[i] for i in gpu_rows.tolist()], pa.string()),
            "gpu_index": pa.array(np.asarray(gpu_index)[gpu_rows], pa.int16()),
            "gpu_i_id": pa.array(ukey % 1_000_000, pa.int32()),
            "gpu_i_profile": pa.array(list(p[first]), pa.string()),
            **{c: pa.array(by_col[c] * FIELDS[_COL[c]].scale, pa.float32(), from_pandas=True)
               for c in _INSTANCE_COLUMNS},
        },
        schema=SCHEMAS["mig_samples"],
    )


def fill_grid(
    nrows: int,
    row: np.ndarray,
    fid: np.ndarray,
    rank: np.ndarray,
    value: np.ndarray,
    *,
    inst: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    slices: np.ndarray | None = None,
    counts: Counter | None = None,
) -> np.ndarray:
    """An ``nrows x len(FIELDS)`` grid of values from observations (NaN where none).

    Observation ``i`` is field ``fid[i]`` of row ``row[i]``, as the exporter printed it;
    blanks and impossible values become NaN first (:func:`clean_values`, counted in
    ``counts``). Several observations of one cell: per MIG instance ``inst[i]`` (-1: not
    an instance) the first wins, preferring a field's first-listed name (lower ``rank``)
    - so pod labels or two Prometheus jobs scraping one exporter never count twice. A
    GPU-level observation (-1) then wins; else the instances make the GPU's value: the
    sum for memory, for activity ratios the sum of value x ``weight[i]`` (the instance's
    compute slices) over ``slices[row]`` (the GPU's), else the first instance's value.
    Where ``util_pct`` is absent, GPU utilisation is the graphics-engine activity.
    """
    nf = len(FIELDS)
    n = len(row)
    inst = np.full(n, -1, np.int64) if inst is None else inst
    weight = np.ones(n) if weight is None else weight
    value = clean_values(value, fid, counts)
    cell = row * nf + fid
    grid = np.full((nrows, nf), np.nan)
    if (inst < 0).all() and (np.bincount(cell, minlength=nrows * nf) <= 1).all():
        # One observation per cell, no instance: nothing to choose or fold, and no
        # sort of the observations (0.3 s of a 100,000-GPU pull's 1.5 M, issue 17).
        grid.flat[cell] = value
    else:
        _fold(grid, cell, fid, rank, value, inst, weight, slices)
    util, gr = grid[:, _COL["util_pct"]], grid[:, _COL["gr_active_pct"]]
    grid[:, _COL["util_pct"]] = np.where(np.isnan(util), gr * GR_ACTIVE.scale, util)
    return grid


def _fold(grid: np.ndarray, cell: np.ndarray, fid: np.ndarray, rank: np.ndarray,
          value: np.ndarray, inst: np.ndarray, weight: np.ndarray,
          slices: np.ndarray | None) -> None:
    """:func:`fill_grid`'s choice among several observations of a cell, into ``grid``
    (flat cell ``cell[i]`` = row x fields + field): the observations sorted by cell,
    instance and rank, each (cell, instance)'s first kept, the instances folded."""
    nrows, nf = grid.shape
    n = len(cell)
    order = np.lexsort((np.arange(n), rank, inst, cell))
    c, k = cell[order], inst[order]
    firsts = order[np.r_[True, (c[1:] != c[:-1]) | (k[1:] != k[:-1])]] if n else order
    # One observation per (cell, instance) now, ordered by cell then instance (-1 first).
    fc, fi, fv = cell[firsts], inst[firsts], value[firsts]
    head = np.r_[True, fc[1:] != fc[:-1]] if len(fc) else np.zeros(0, bool)
    grid.flat[fc[head]] = fv[head]  # the GPU-level value, or the first instance's
    mig = fi >= 0
    gpu_level = np.zeros(nrows * nf, bool)
    gpu_level[fc[~mig]] = True
    for column, how in [(c, "sum") for c in _MIG_SUM] + [(c, "w") for c in _MIG_WEIGHTED]:
        m = mig & (fid[firsts] == _COL[column]) & ~gpu_level[fc]
        if not m.any():
            continue
        v = fv[m] if how == "sum" else fv[m] * weight[firsts][m]
        ok = ~np.isnan(v)
        total = np.zeros(nrows * nf)
        seen = np.zeros(nrows * nf, bool)
        np.add.at(total, fc[m][ok], v[ok])
        seen[fc[m][ok]] = True
        cells = np.unique(fc[m])
        out = np.where(seen[cells], total[cells], np.nan)
        if how == "w":
            gpu_w = np.ones(nrows) if slices is None else np.asarray(slices, np.float64)
            wsum = np.zeros(nrows * nf)
            np.add.at(wsum, fc[m], weight[firsts][m])
            out = out / np.maximum(gpu_w[cells // nf], wsum[cells])
        grid.flat[cells] = out


def build_samples(
    ts: datetime | list[datetime] | np.ndarray,
    node: list[str],
    gpu_index: np.ndarray,
    uuid: list[str | None],
    grid: np.ndarray,
    interval_s: float = default("collect.interval_s"),
) -> pa.Table:
    """Samples rows from a grid of :func:`fill_grid`: ``grid[row, j]`` is ``FIELDS[j]``.

    ``grid`` holds values as the exporter prints them, already cleaned (NaN where absent
    or refused); this applies each field's scale. ``ts`` is one scrape time for all rows,
    or one per row (naive UTC or zone-aware). Shared by the exporter-text path
    (:func:`parse_scrapes`) and the Prometheus path.
    """
    n = len(node)
    cols: dict[str, np.ndarray] = {}
    for j, f in enumerate(FIELDS):
        cols[f.column] = grid[:, j] * f.scale

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
            "tensor_active_pct": f32("tensor_active_pct"),
            "dram_active_pct": f32("dram_active_pct"),
        },
        schema=SCHEMAS["samples"],
    )


def xid_events(
    previous: Mapping[tuple[str, int], int], samples: pa.Table, ts: datetime | None
) -> tuple[pa.Table, dict[tuple[str, int], int]]:
    """XID events from the change of each GPU's last-XID gauge since the previous scrape.

    ``previous`` maps ``(node, gpu_index)`` to the gauge's last value. An event
    (kind='xid', code=the XID) is emitted when a GPU's gauge changes to a non-zero value.
    On the first sight of a GPU nothing is emitted, even if its gauge is already
    non-zero: the gauge keeps its value for the exporter's lifetime, so reporting it
    would repeat an old XID after every gpulens restart. Limits of a last-value gauge:
    the same XID twice in a row, or several XIDs within one interval, show as one event.
    Rows with a NULL gauge leave the state unchanged. Rows are read in the order given:
    several samples of one GPU (a range read back from Prometheus) come oldest first.
    Each event is at ``ts``, or with ``ts=None`` at its own row's ``ts`` (rows read back
    at their scrape times). Returns ``(events, new_state)``; ``previous`` is not modified.
    """
    state = dict(previous)
    rows = []
    names = ["node", "gpu_index", "gpu_uuid", "xid_last"] + (["ts"] if ts is None else [])
    cols = samples.select(names).to_pydict()
    times = cols.pop("ts") if ts is None else [_naive_utc(ts)] * samples.num_rows
    for node, gpu, uuid, xid, when in zip(*cols.values(), times, strict=True):
        if xid is None:
            continue
        key = (node, gpu)
        before = state.get(key)
        state[key] = xid
        if before is not None and xid != before and xid != 0:
            detail = f"DCGM_FI_DEV_XID_ERRORS changed from {before} to {xid}"
            rows.append((node, gpu, uuid, xid, detail, when))
    events = pa.table(
        {
            "ts": pa.array([r[5] for r in rows], pa.timestamp("us")),
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

    def __init__(self, interval_s: float = default("collect.interval_s"),
                 names: NodeNames | None = None):
        self.interval_s = interval_s
        self.names = names or NodeNames()
        self.xid_state: dict[tuple[str, int], int] = {}

    def collect(
        self, texts: Mapping[str, str], ts: datetime, nodes: Mapping[str, str] | None = None
    ) -> ScrapeResult:
        """Samples, XID events, per-target errors and refusals of one round of scrapes."""
        result = parse_scrapes(texts, ts, self.interval_s, nodes, self.names)
        result.events, self.xid_state = xid_events(self.xid_state, result.samples, ts)
        return result

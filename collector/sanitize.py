"""Refuse implausible telemetry before it reaches the warehouse, and count what was refused.

One bad value costs that value, one bad row that row (issue 12). For a sample row
(``warehouse.schema.SCHEMAS["samples"]``):

- the row is dropped when its timestamp is further than ``max_skew_s`` seconds from
  ``now`` into the future, or older than ``max_age_s`` (a clock gone wrong on a node, a
  replayed scrape from last year): reason ``"row: timestamp not near now"``; when its
  ``gpu_index`` is not a GPU index 0-31 (``DCGM_MAX_NUM_DEVICES``): ``"row: gpu index
  outside 0-31"``; when it names no node: ``"row: no node"``;
- a reading that is NaN or infinite (``"value: <column> not finite"``), below its floor
  (``"value: <column> below <lo>"``) or above what any GPU can report (``"value:
  <column> above <hi>"``; bounds in :data:`BOUNDS`, generous on purpose: they catch
  sentinels and unit mix-ups, not hot GPUs) becomes NULL; the rest of the row is kept.

NULL is "not reported" and always allowed. The checks are vectorised (pyarrow.compute),
so sanitising a 24,576-GPU cycle costs milliseconds. Counts are kept per reason in a
:class:`DropCounter`, which each source exposes as ``source.dropped`` and /healthz shows.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collector.dcgm import DCGM_MAX_NUM_DEVICES
from warehouse.clock import naive_utc as _naive_utc

__all__ = ["BOUNDS", "DropCounter", "GPU_INDEX", "NO_NODE", "TIMESTAMP", "sanitize_samples"]

TIMESTAMP = "row: timestamp not near now"
GPU_INDEX = "row: gpu index outside 0-31"
NO_NODE = "row: no node"
MAX_GPU_INDEX = DCGM_MAX_NUM_DEVICES - 1

# column -> (lowest, highest) plausible value, in the column's unit.
BOUNDS: dict[str, tuple[float, float]] = {
    "interval_s": (0.0, 86_400.0),
    "util_pct": (0.0, 100.0),
    "mem_util_pct": (0.0, 100.0),
    "sm_active_pct": (0.0, 100.0),
    "gr_active_pct": (0.0, 100.0),
    "tensor_active_pct": (0.0, 100.0),
    "dram_active_pct": (0.0, 100.0),
    "mem_used_mib": (0.0, 4_194_304.0),  # 4 TiB
    "power_w": (0.0, 5_000.0),  # a GB200 superchip is ~2.7 kW
    "energy_j": (0.0, 1e15),  # ~31 years at 1 kW
    "temp_c": (-40.0, 150.0),
    "mem_temp_c": (-40.0, 150.0),
    "sm_clock_mhz": (0.0, 10_000.0),
    "ecc_sbe_volatile": (0.0, 1e12),
    "ecc_dbe_volatile": (0.0, 1e12),
    "xid_last": (0.0, 1e6),
}


class DropCounter:
    """What a source refused, per reason, since it was created (thread-safe).

    Reasons start with what was refused: ``"line: ..."`` (an exporter text line),
    ``"value: <column> ..."`` (stored as NULL), ``"row: ..."`` (a sample row),
    ``"series: ..."`` (a Prometheus series or point). Targets that are down are listed
    by the scraping sources themselves (``source.status``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, counts: dict[str, int]) -> None:
        with self._lock:
            self._counts.update({k: v for k, v in counts.items() if v})

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"DropCounter({self.as_dict()})"


def sanitize_samples(
    samples: pa.Table,
    now: datetime,
    *,
    max_skew_s: float = 300.0,
    max_age_s: float = 8 * 86_400.0,
    counter: DropCounter | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """The plausible part of ``samples``, and the count refused per reason.

    ``now`` is the collection time (naive UTC or zone-aware); a row stamped more than
    ``max_skew_s`` seconds after it or more than ``max_age_s`` seconds before it is
    dropped. A dropped row is counted once, under the first of its row reasons; its
    values are not counted. ``counter``, if given, is updated. The table is returned
    unchanged (the same object) when nothing is refused.
    """
    n = samples.num_rows
    if n == 0:
        return samples, {}
    now = _naive_utc(now)
    ts = samples["ts"]
    lo_ts = pa.scalar(now - timedelta(seconds=max_age_s), ts.type)
    hi_ts = pa.scalar(now + timedelta(seconds=max_skew_s), ts.type)
    rows = [(TIMESTAMP, pc.fill_null(pc.or_(pc.less(ts, lo_ts), pc.greater(ts, hi_ts)), True))]
    if "gpu_index" in samples.column_names:
        g = samples["gpu_index"]
        rows.append((GPU_INDEX, pc.fill_null(
            pc.or_(pc.less(g, 0), pc.greater_equal(g, MAX_GPU_INDEX + 1)), False)))
    if "node" in samples.column_names:
        rows.append((NO_NODE, pc.fill_null(pc.equal(samples["node"], ""), True)))
    counts: dict[str, int] = {}
    drop = np.zeros(n, bool)
    for reason, mask in rows:
        m = _np(mask) & ~drop
        if m.any():
            counts[reason] = int(m.sum())
        drop |= m
    out = samples
    for column, (lo, hi) in BOUNDS.items():
        if column not in out.column_names:
            continue
        col = out[column]
        checks = [(f"below {lo:g}", pc.less(col, lo)), (f"above {hi:g}", pc.greater(col, hi))]
        if pa.types.is_floating(col.type):
            checks.insert(0, ("not finite", pc.invert(pc.is_finite(col))))
        bad = np.zeros(n, bool)
        for why, mask in checks:
            m = _np(pc.fill_null(mask, False)) & ~bad
            if (m & ~drop).any():
                counts[f"value: {column} {why}"] = int((m & ~drop).sum())
            bad |= m
        if bad.any():
            nulled = pc.if_else(pa.array(bad), pa.scalar(None, col.type), col)
            out = out.set_column(out.schema.get_field_index(column), column, nulled)
    if counter is not None:
        counter.add(counts)
    if drop.any():
        out = out.filter(pa.array(~drop))
    return out, counts


def _np(arr) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.to_numpy(zero_copy_only=False).astype(bool)

"""Drop implausible telemetry before it reaches the warehouse, and count what was dropped.

A sample row (``warehouse.schema.SCHEMAS["samples"]``) is dropped whole when

- its timestamp is further than ``max_skew_s`` seconds from ``now`` into the future, or
  older than ``max_age_s`` (a clock gone wrong on a node, a replayed scrape from last
  year): reason ``"timestamp"``;
- a reading is NaN or infinite (``"nan"``), below its floor (``"negative"``) or above
  what any GPU can report (``"absurd"``; bounds in :data:`BOUNDS`, generous on purpose:
  they catch sentinels and unit mix-ups, not hot GPUs).

NULL is "not reported" and always allowed. The checks are vectorised (pyarrow.compute),
so sanitising a 24,576-GPU cycle costs milliseconds. Counts are kept per reason in a
:class:`DropCounter`, which each source exposes as ``source.dropped``.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.clock import naive_utc as _naive_utc

__all__ = ["BOUNDS", "DropCounter", "sanitize_samples"]

# column -> (lowest, highest) plausible value, in the column's unit.
BOUNDS: dict[str, tuple[float, float]] = {
    "interval_s": (0.0, 86_400.0),
    "util_pct": (0.0, 100.0),
    "mem_util_pct": (0.0, 100.0),
    "sm_active_pct": (0.0, 100.0),
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
    """Rows dropped per reason since the source was created (thread-safe)."""

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
    """The rows of ``samples`` that are plausible, and the count dropped per reason.

    ``now`` is the collection time (naive UTC or zone-aware); a row stamped more than
    ``max_skew_s`` seconds after it or more than ``max_age_s`` seconds before it is
    dropped. A row failing several checks is counted once, under the first reason in
    the order timestamp, nan, negative, absurd. ``counter``, if given, is updated.
    """
    n = samples.num_rows
    if n == 0:
        return samples, {}
    now = _naive_utc(now)
    ts = samples["ts"]
    lo_ts = pa.scalar(now - timedelta(seconds=max_age_s), ts.type)
    hi_ts = pa.scalar(now + timedelta(seconds=max_skew_s), ts.type)
    bad_ts = pc.fill_null(pc.or_(pc.less(ts, lo_ts), pc.greater(ts, hi_ts)), True)
    reasons = {"timestamp": _np(bad_ts)}
    nan = np.zeros(n, bool)
    neg = np.zeros(n, bool)
    high = np.zeros(n, bool)
    for column, (lo, hi) in BOUNDS.items():
        if column not in samples.column_names:
            continue
        col = samples[column]
        if pa.types.is_floating(col.type):
            nan |= _np(pc.fill_null(pc.invert(pc.is_finite(col)), False))
        neg |= _np(pc.fill_null(pc.less(col, lo), False))
        high |= _np(pc.fill_null(pc.greater(col, hi), False))
    seen = reasons["timestamp"].copy()
    for name, mask in (("nan", nan), ("negative", neg), ("absurd", high)):
        reasons[name] = mask & ~seen
        seen |= mask
    counts = {k: int(v.sum()) for k, v in reasons.items() if v.any()}
    if counter is not None:
        counter.add(counts)
    if not seen.any():
        return samples, counts
    return samples.filter(pa.array(~seen)), counts


def _np(arr) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.to_numpy(zero_copy_only=False).astype(bool)

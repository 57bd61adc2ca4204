"""What the scheduler, topology and import parsers accept as plausible, in one place.

Bounds are generous on purpose: they catch sentinels, wrapped integers, unit mix-ups and
corrupted files, not unusual clusters. A value outside them is refused (stored NULL, or
its record skipped, as each parser documents) and counted by reason.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

__all__ = ["EARLIEST", "MAX_EXIT_CODE", "MAX_FUTURE", "MAX_GPUS_PER_JOB", "MAX_GPUS_PER_NODE",
           "MAX_NODES", "MAX_RESTARTS", "MAX_SIGNAL", "clean_text", "finite", "plausible_time"]

#: No GPU cluster job history predates this (Slurm 1.0 is from 2006).
EARLIEST = datetime(2000, 1, 1)
#: How far after "now" a timestamp may lie (clock skew between hosts, time zones gone wrong).
MAX_FUTURE = timedelta(days=1)
#: GPU indices (``gres_detail`` IDX) per node: 8-16 GPUs, up to 7 MIG slices each.
MAX_GPUS_PER_NODE = 128
#: GPUs of one job or run.
MAX_GPUS_PER_JOB = 1_000_000
#: Nodes of one job, or of one rack.
MAX_NODES = 1_000_000
#: Slurm's restart_cnt is a uint16.
MAX_RESTARTS = 65_535
#: A process exit status is one byte; signals are below 128.
MAX_EXIT_CODE = 255
MAX_SIGNAL = 127


def plausible_time(ts: datetime, now: datetime) -> bool:
    """``EARLIEST <= ts <= now + MAX_FUTURE`` (both naive UTC)."""
    return EARLIEST <= ts <= now + MAX_FUTURE


def finite(x: float) -> bool:
    """True for a real number (not NaN, not +-inf)."""
    return math.isfinite(x)


def clean_text(s: str) -> str:
    """``s`` as storable UTF-8: lone surrogates (bytes decoded with surrogateescape) become
    ``?`` and NULs U+FFFD."""
    if s.isascii() and "\x00" not in s:
        return s
    return s.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")

"""Freed memory given back to the system between large steps (issue 17).

The service's process holds three allocators: glibc's malloc (Python, numpy, pandas),
Arrow's pool (mimalloc) and DuckDB's (jemalloc, within ``warehouse.memory_limit_mb``).
Each keeps what the process frees for its own reuse, and none can use what another
keeps: after a parse of a 24,576-GPU scrape, Arrow's pool held ~220 MiB and glibc's heap
more, which the next step, a refresh in pandas or a query in DuckDB, could not use, so
its peak came on top. :func:`release_free_memory` hands Arrow's and glibc's free pages
back; the writer calls it after a long step of maintenance and the service after each
collection cycle (~3 ms at 24,576 GPUs).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

import pyarrow as pa

log = logging.getLogger(__name__)


def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Give the pages Arrow's pool and glibc's heap hold free back to the system.

    What is in use is untouched; what the allocators keep is only what they could reuse,
    at the cost of asking the system again later. Never raises: a failure is logged."""
    try:
        pa.default_memory_pool().release_unused()
        if _TRIM is not None:
            _TRIM(0)  # 0: keep no padding at the top of the heap
    except Exception:  # noqa: BLE001 - a cache not emptied costs memory, never the step
        log.exception("giving freed memory back failed")

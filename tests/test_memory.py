"""Freed memory given back to the system between large steps (gpulens/memory.py, issue
17)."""

from __future__ import annotations

import os

import pytest

from bench.common import current_rss_bytes
from gpulens import memory


@pytest.mark.skipif(memory._TRIM is None or not os.path.exists("/proc/self/statm"),
                    reason="needs glibc's malloc_trim and /proc (Linux)")
def test_free_pages_inside_the_heap_go_back_to_the_system():
    """150 MiB of 1,000-byte buffers (from glibc's heap, below its mmap threshold) freed
    under a buffer still in use stay in the process until given back."""
    held = [bytearray(1000) for _ in range(150_000)]
    pin = bytearray(1000)  # above them in the heap: glibc trims only the heap's top
    for b in held:
        b[::4096] = b"\x01" * len(b[::4096])  # touched, so resident
    del held
    before = current_rss_bytes() / 2**20
    memory.release_free_memory()
    after = current_rss_bytes() / 2**20
    assert before - after >= 100, (before, after)
    assert len(pin) == 1000


def test_a_failure_to_give_back_is_logged_not_raised(monkeypatch, caplog):
    def broken(_pad):
        raise OSError("no")

    monkeypatch.setattr(memory, "_TRIM", broken)
    memory.release_free_memory()
    assert "giving freed memory back failed" in caplog.text
